"""The policy gate at apply time: the verdict a pull request shows is enforced on the merge.

Branch protection is not a guardrail the bot may assume (direct pushes, admins, squash merges
of stale pull requests and Git-only mode all bypass it), so every operation the bot starts
from the watched branch is judged again, by the same rules and the same evaluation as its
pull request (``core.planning.plan.make_plan``), against what is deployed when it starts. A deny,
or an acknowledgement that is missing, blocks it before any step: the operation is recorded
``blocked`` with its verdicts and stays so until a newer commit for the cluster replaces it.

A rollback (a revert) is never blocked by the rules that judge upgrades: it returns to a state
that ran before. Only the hard safety rules (``HARD_CHECKS``: dropping a CRD version still in
``status.storedVersions``) judge it, and only when its chart is not older than the deployed
one: an older chart's CRDs are never applied (R16), so they cannot drop anything.

Pure: verdicts in, journal values out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from gitopsbot.core.fleet.model import ClusterSpec
from gitopsbot.core.policy import Decision, Rule, Verdict, decide
from gitopsbot.core.records.journal import Journal, OperationKind, OperationStatus

# Check kinds that protect the cluster itself, whatever the change: they judge rollbacks too.
HARD_CHECKS = frozenset({"crd_drops_version"})
# Verdict lines kept in a journal (a pathological rule set cannot bloat the state branch).
MAX_LINES = 50


@dataclass(frozen=True, slots=True)
class GateResult:
    decision: Decision
    lines: tuple[str, ...]  # every verdict, blocking ones first
    blocking: tuple[str, ...]

    @property
    def allowed(self) -> bool:
        return self.decision is Decision.ALLOWED


def rules_for(
    kind: OperationKind, rules: Sequence[Rule], *, chart_downgrade: bool
) -> tuple[Rule, ...]:
    """The rules that judge an operation of ``kind``."""
    if kind is not OperationKind.ROLLBACK:
        return tuple(rules)
    if chart_downgrade:
        return ()  # R16: an older chart's CRDs are not applied; nothing else judges a revert
    return tuple(r for r in rules if r.kind in HARD_CHECKS)


def verdict_line(verdict: Verdict, spec: ClusterSpec) -> str:
    """``clusters/prod/rollout.yaml:12: F3 phase-needs-its-switch denied: message`` (the
    release file when the rule names no place)."""
    where = verdict.location or spec.locations.get("release.yaml:chart.version")
    place = f"{where.file}:{where.line}" if where is not None and where.line else ""
    if not place:
        place = where.file if where is not None else f"clusters/{spec.name}/release.yaml"
    text = f"{place}: {verdict.label} {verdict.outcome}: {verdict.message}"
    if verdict.ack_reason:
        text += f" (acknowledged: {verdict.ack_reason})"
    return " ".join(text.split())  # one line, whatever the message holds


def judge(verdicts: Sequence[Verdict], spec: ClusterSpec) -> GateResult:
    found = tuple(verdicts)
    blocking = tuple(verdict_line(v, spec) for v in found if v.blocking)
    others = tuple(verdict_line(v, spec) for v in found if not v.blocking)
    lines = (blocking + others)[:MAX_LINES]
    return GateResult(decide(found), lines, blocking)


def admit(journal: Journal, result: GateResult) -> Journal:
    """The operation with the gate's verdicts; BLOCKED (never started) when they block."""
    if result.allowed:
        return replace(journal, verdicts=result.lines)
    first = result.blocking[0] if result.blocking else str(result.decision)
    more = len(result.blocking) - 1
    failure = f"blocked by policy ({result.decision}): {first}"
    if more > 0:
        failure += f" (and {more} more)"
    return replace(journal, status=OperationStatus.BLOCKED, verdicts=result.lines, failure=failure)
