"""The policy gate: rules as data (YAML), evaluated by a closed set of built-in check kinds.

A rule names the bad situation; when its check finds it, the rule *fires* and yields a
``Verdict`` whose outcome follows the rule's severity:

- ``deny``: the change is refused (``Outcome.DENIED``); acknowledgements never lift it;
- ``acknowledge``: refused until ``rollout.yaml`` has ``acknowledgements: {RULE-ID: reason}``
  (``NEEDS_ACK`` → ``ACKNOWLEDGED``);
- ``warn``: shown, never blocks.

Rule documents: ``{rules: [{id, description, severity, enforces, check: {kind, ...params},
environments?, link?}]}`` (a bare list of rules is accepted too). Built-in rules ship in
``policies/``; a fleet repository adds its own in its ``policies/`` directory.
``docs/policies.md`` documents every check kind.

A package of five: ``verdicts`` (what the gate says), ``checks`` (the check kinds),
``rules`` (rule documents parsed), ``evaluation`` (rules against a change) and ``code_rules``
(the rules decided in code, by the packages above: their names and the one way they deny);
everything else it offers is named here.

May import: core.fleet, core.charts, core.records
(the layers contract in pyproject.toml).
"""

from gitopsbot.core.policy.checks import CHECKS, PARAMS, Check, Finding, PolicyInput, restart_needed
from gitopsbot.core.policy.evaluation import evaluate, locate
from gitopsbot.core.policy.rules import BUILTIN_SOURCE, load_rules, parse_rules
from gitopsbot.core.policy.verdicts import (
    RULES_DOC,
    Decision,
    Outcome,
    Rule,
    Severity,
    Verdict,
    decide,
    rule_doc,
    rule_label,
)

__all__ = [
    "BUILTIN_SOURCE", "CHECKS", "PARAMS", "RULES_DOC", "Check", "Decision", "Finding", "Outcome",
    "PolicyInput", "Rule", "Severity", "Verdict", "decide", "evaluate", "load_rules", "locate",
    "parse_rules", "restart_needed", "rule_doc", "rule_label",
]  # fmt: skip
