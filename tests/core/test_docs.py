"""The rule examples in docs/policies.md parse, and every built-in rule is documented."""

from __future__ import annotations

import re

from gitopsbot.core.policy import CHECKS, Rule, parse_rules
from tests.core.plan_builders import ROOT

DOC = ROOT / "docs" / "policies.md"


def test_rule_examples_parse() -> None:
    blocks = re.findall(r"```yaml\n(rules:.*?)```", DOC.read_text(), flags=re.S)
    assert len(blocks) >= 2
    for block in blocks:
        assert parse_rules(block, source="docs/policies.md")


def test_builtin_rules_and_check_kinds_documented(builtin_rules: tuple[Rule, ...]) -> None:
    text = DOC.read_text()
    for rule in builtin_rules:
        row = f"| [`{rule.id} {rule.name}`](#{rule.doc.split('#', 1)[1]}) | {rule.severity.value}"
        assert row in text, rule.id
    for kind in CHECKS:
        assert f"| `{kind}` |" in text, kind
