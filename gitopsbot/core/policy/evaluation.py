"""Evaluate the rules against one change: each firing rule's verdict, its outcome from the
rule's severity and the cluster's acknowledgements, located where the finding is written."""

from __future__ import annotations

import re

from gitopsbot.core.fleet.model import ClusterSpec, Location
from gitopsbot.core.fleet.secrets import join_path, split_path
from gitopsbot.core.policy.checks import CHECKS, PolicyInput
from gitopsbot.core.policy.verdicts import Outcome, Rule, Severity, Verdict

_FILE_ANCHOR = re.compile(r"^[a-z-]+\.yaml:")


def locate(cluster: ClusterSpec, anchor: str) -> Location | None:
    """Where ``anchor`` is written: ``<file>:<key>`` via ``cluster.locations``, a values path
    via ``cluster.values_locations`` (the nearest written ancestor)."""
    if not anchor:
        return None
    if _FILE_ANCHOR.match(anchor):
        return cluster.locations.get(anchor)
    try:
        parts = split_path(anchor)
    except ValueError:
        return None
    for n in range(len(parts), 0, -1):
        found = cluster.values_locations.get(join_path(parts[:n]))
        if found is not None:
            return found
    return None


def evaluate(rules: tuple[Rule, ...], inp: PolicyInput) -> tuple[Verdict, ...]:
    """Verdicts of the rules that fire, in rule order."""
    acks = inp.cluster.rollout.acknowledgements
    out: list[Verdict] = []
    for rule in rules:
        if rule.environments and inp.cluster.environment.value not in rule.environments:
            continue
        for finding in CHECKS[rule.kind](inp, rule.params):
            message, anchor = finding if isinstance(finding, tuple) else (finding, "")
            reason = acks.get(rule.id, "")
            if rule.severity == Severity.DENY:
                outcome = Outcome.DENIED
            elif rule.severity == Severity.WARN:
                outcome = Outcome.WARNED
            else:
                outcome = Outcome.ACKNOWLEDGED if reason else Outcome.NEEDS_ACK
            out.append(
                Verdict(
                    rule_id=rule.id,
                    severity=rule.severity,
                    outcome=outcome,
                    procedure=rule.procedure,
                    message=message,
                    description=rule.description,
                    link=rule.link,
                    ack_reason=reason if rule.severity == Severity.ACKNOWLEDGE else "",
                    location=locate(inp.cluster, anchor),
                    name=rule.name,
                    doc=rule.doc,
                )
            )
    return tuple(out)
