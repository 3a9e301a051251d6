"""Readable verdicts (#31 item 5): every rule keeps its code and has a short name, shown
wherever the code is; each built-in rule's name is a heading of docs/policies.md ("The rules
explained"), which the verdict's ``doc`` points at; a team rule may name itself; journals
written before names still read."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from gitopsbot.adapters.builtin_policies import builtin_policy_documents
from gitopsbot.core.planning import provenance
from gitopsbot.core.policy import Outcome, Severity, Verdict, load_rules, rule_doc
from gitopsbot.core.policy.code_rules import CODE_RULES
from gitopsbot.core.records.journal import Journal, OperationKind, OperationStatus
from gitopsbot.core.waves import promotion_gate
from gitopsbot.errors import FleetError

ROOT = Path(__file__).resolve().parents[2]
POLICIES_DOC = ROOT / "docs" / "policies.md"


def anchors() -> set[str]:
    """The anchors of docs/policies.md's headings, as GitHub makes them."""
    out = set()
    for line in POLICIES_DOC.read_text().splitlines():
        if line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            out.add("docs/policies.md#" + re.sub(r"[^a-z0-9 -]", "", title).replace(" ", "-"))
    return out


def test_every_built_in_rule_has_a_name_and_a_paragraph_that_explains_it() -> None:
    rules = load_rules(builtin_policy_documents())
    assert rules
    known = anchors()
    for rule in rules:
        assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", rule.name), rule.id
        assert rule.doc == rule_doc(rule.id, rule.name) and rule.doc in known, rule.doc


def test_the_rules_decided_in_code_are_named_and_explained_too() -> None:
    known = anchors()
    codes = [rule.id for rule in CODE_RULES]
    assert len(set(codes)) == len(codes) and set(codes).isdisjoint(
        r.id for r in load_rules(builtin_policy_documents())
    )
    for rule in CODE_RULES:
        assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", rule.name), rule.id
        assert rule.procedure and rule.doc in known, rule.id
        deny = rule.deny("m")
        assert deny.blocking and deny.label == f"{rule.id} {rule.name}" and deny.doc == rule.doc
    wave = promotion_gate.unreadable("no branch")
    assert wave.label == "WAVES promotion-follows-waves" and wave.doc in known
    # The one that was missing a name before the registry: the signed-chart deny.
    failed = provenance.verdict(
        provenance.Provenance(required=True, where="w", keyring="k", problem="bad"), None
    )
    assert failed is not None and failed.label == "CHART-PROVENANCE chart-provenance-verified"
    assert failed.doc in known


def test_no_verdict_is_built_by_hand_outside_the_policy_package() -> None:
    """A ``Verdict(...)`` written elsewhere could forget the rule's name and link (as the
    signed-chart deny once did): a rule decided in code denies through ``CodeRule.deny``."""
    policy = ROOT / "gitopsbot" / "core" / "policy"
    allowed = {policy / "evaluation.py", policy / "code_rules.py"}
    built = []
    for path in sorted((ROOT / "gitopsbot").rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        gate_verdict = any(  # the policy gate's Verdict (core.replicas.health has its own)
            isinstance(node, ast.ImportFrom)
            and node.module in {"gitopsbot.core.policy", "gitopsbot.core.policy.verdicts"}
            and any(alias.name == "Verdict" for alias in node.names)
            for node in ast.walk(tree)
        )
        for node in ast.walk(tree):
            called = isinstance(node, ast.Call) and (
                (isinstance(node.func, ast.Name) and node.func.id == "Verdict" and gate_verdict)
                or (isinstance(node.func, ast.Attribute) and node.func.attr == "Verdict")
            )
            if called and path not in allowed:
                built.append(f"{path.relative_to(ROOT)}:{getattr(node, 'lineno', 0)}")
    assert not built, built


def test_a_team_rule_may_name_itself_and_a_bad_name_is_located() -> None:
    named = """rules:
  - id: TEAM-REPLICAS
    name: three-prod-controllers
    severity: warn
    check: {kind: controller_replicas_below, min: 3}
"""
    (rule,) = load_rules([("policies/team.yaml", named)])
    assert rule.name == "three-prod-controllers" and rule.doc == ""  # no paragraph of ours
    (plain,) = load_rules(
        [("policies/team.yaml", named.replace("    name: three-prod-controllers\n", ""))]
    )
    verdict = Verdict(plain.id, Severity.WARN, Outcome.WARNED, "", "m", name=plain.name)
    assert verdict.label == "TEAM-REPLICAS"  # the code alone
    with pytest.raises(FleetError) as e:
        load_rules([("policies/team.yaml", named.replace("three-prod-controllers", "Three Prod"))])
    assert "policies/team.yaml:3:" in str(e.value) and "rules[0].name" in str(e.value)


def _blocked(*lines: str) -> Journal:
    from datetime import UTC, datetime

    return Journal(
        op_id="op", kind=OperationKind.UPGRADE, cluster="prod", desired_sha="a" * 40,
        created_at=datetime(2026, 12, 6, tzinfo=UTC), status=OperationStatus.BLOCKED,
        verdicts=lines,
    )  # fmt: skip


@pytest.mark.parametrize(
    "line",
    [
        "clusters/prod/release.yaml:5: WAVES promotion-follows-waves denied: wave production waits",
        "clusters/prod/release.yaml:5: WAVES denied: wave production waits",  # before names
    ],
)
def test_a_wave_hold_is_read_back_with_or_without_the_name(line: str) -> None:
    assert promotion_gate.held_only_by_waves([line])
    assert promotion_gate.held_message(_blocked(line)) == "wave production waits"
    other = "clusters/prod/rollout.yaml:9: F3 phase-needs-its-switch denied: pool a"
    assert not promotion_gate.held_only_by_waves([line, other])
