"""Waves wired in (issue 14): the evidence from journals, and the gate as a policy verdict.

``core.waves.promotion`` decides on ``ClusterEvidence``; this module derives that evidence from the
state branch's journals (read by ``bot.waves``) and turns a decision into the ``WAVES``
verdict that the plan comment shows and the apply gate blocks on, like any deny.

Evidence, walking a cluster's operations oldest first (blocked and superseded ones changed
nothing and are skipped):

- the cluster's chart version is that of its latest operation whose release step took effect
  (a succeeded operation; a running or failed one whose ``helm-upgrade`` or ``rollback`` step
  succeeded). A new version restarts the soak (``verified_at`` cleared).
- "verified" is the ``verify`` step SUCCEEDED, at its ``finished_at`` (an operation without a
  verify step that succeeded: its last step's end).
- trouble is a FAILED operation ("failed"), a phase HALTED ("halted") or a ROLLBACK operation
  ("rolled back"), at the latest time the journal records; the soak of the version counts
  again from the first verification after it. A rollback's trouble concerns the version it
  left (that of the operation it reverts).
- an operation queued or running is in flight.

Pure: journals and a chart version per operation in, values out.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from datetime import datetime, timedelta

from gitopsbot.core.fleet.model import BotSettings, ClusterSpec, Location
from gitopsbot.core.planning.plan import Plan
from gitopsbot.core.policy import Outcome, Verdict, decide
from gitopsbot.core.policy.code_rules import WAVES
from gitopsbot.core.records.journal import (
    Journal,
    OperationStatus,
)
from gitopsbot.core.waves import wave_evidence
from gitopsbot.core.waves.promotion import (
    ChangeKind,
    ClusterEvidence,
    PromotionDecision,
    WaveMembers,
    clock_text,
    judge,
)

RULE_ID = WAVES.id  # the verdict's rule id: on the plan, in a blocked journal's verdicts
RULE_NAME = WAVES.name
# The deny in a blocked journal's verdict line, with the name (journals written before
# rules had names carry the code alone).
_DENY_MARK = re.compile(rf" {RULE_ID}(?: {RULE_NAME})? {re.escape(str(Outcome.DENIED))}: ")


def evidence_from(
    cluster: str, journals: Iterable[Journal], version_of: Callable[[Journal], str]
) -> ClusterEvidence:
    """What ``cluster``'s operations say, for ``core.waves.promotion.judge``. ``version_of`` gives
    the chart version an operation's desired commit names ("" when unreadable). The fold is
    ``core.waves.wave_evidence``'s, the one the state branch's summary is read with."""
    found = list(journals)
    by_id = {j.op_id: j for j in found}
    versions: dict[str, str] = {}

    def version(j: Journal) -> str:
        # Asked only where the fold may use it, as before the summary: a blocked or
        # superseded operation's commit is never read.
        if j.status in (OperationStatus.BLOCKED, OperationStatus.SUPERSEDED) and not any(
            r.reverts_op == j.op_id for r in by_id.values()
        ):
            return ""
        if j.op_id not in versions:
            versions[j.op_id] = version_of(j)
        return versions[j.op_id]

    return wave_evidence.fold(
        cluster, [wave_evidence.digest(j, version(by_id[j.op_id])) for j in found]
    )


# -- the gate ---------------------------------------------------------------------------------


def applies(settings: BotSettings) -> bool:
    """Whether waves can hold anything: without waves and failedVersions the gate is silent
    (and nothing is read from the state branch)."""
    return bool(settings.waves or settings.failed_versions)


def decide_change(
    *,
    settings: BotSettings,
    clusters: Iterable[ClusterSpec],
    evidence: Mapping[str, ClusterEvidence],
    spec: ClusterSpec,
    before: str,
    now: datetime,
    revert: bool = False,
) -> PromotionDecision:
    """The promotion decision for ``spec``'s change. ``before``: the chart version the
    cluster runs (Helm's, or the baseline's), "" when nothing is deployed: then the change is
    a chart change."""
    target = spec.release.version
    change = ChangeKind.VALUES if before and before == target else ChangeKind.CHART
    fleet = {c.name: c for c in clusters}
    fleet[spec.name] = spec  # the change's own files (a new cluster, new labels) decide
    return judge(
        waves=settings.waves,
        clusters=fleet.values(),
        evidence=evidence,
        target=spec.name,
        version=target,
        change=change,
        failed_versions=settings.failed_versions,
        now=now,
        revert=revert,
        deployed=before,
    )


def verdict(decision: PromotionDecision, spec: ClusterSpec) -> Verdict | None:
    """The ``WAVES`` deny when the decision holds the change; None when it may go."""
    if decision.allowed:
        return None
    where = spec.locations.get("release.yaml:chart.version")
    if decision.failed is not None and decision.failed.line:
        where = Location("gitopsbot.yaml", decision.failed.line, 0)
    elif decision.failed is not None:
        where = None  # a GPU canary mark on the state branch (core.canary_marks)
    return _deny(decision.message, where)


def unreadable(reason: str, decision: PromotionDecision | None = None) -> Verdict:
    """Fail closed: the evidence could not be read, so no wave may be judged passed.
    ``decision``: the one made without evidence, whose holds the message names too."""
    held = f"; without evidence: {decision.message}" if decision is not None else ""
    return _deny(f"held: the promotion evidence cannot be read ({reason}){held}", None)


def _deny(message: str, where: Location | None) -> Verdict:
    return WAVES.deny(message, where)


def with_verdicts(plan: Plan, extra: Iterable[Verdict]) -> Plan:
    """``plan`` with ``extra`` verdicts added and its decision folded again."""
    more = tuple(extra)
    if not more:
        return plan
    verdicts = (*plan.verdicts, *more)
    return replace(plan, verdicts=verdicts, decision=decide(verdicts))


def held_only_by_waves(verdict_lines: Iterable[str]) -> bool:
    """A blocked journal's verdict lines (``core.policy.apply_gate.verdict_line``): every blocking
    one is the ``WAVES`` deny, so the block may lift without a new commit for the cluster:
    once the earlier waves soak, or once a person removes the ``failedVersions`` mark from
    ``gitopsbot.yaml`` (a commit that is no change of the cluster's files). The bot judges
    it again on later passes."""
    blocking = [
        line for line in verdict_lines if f" {Outcome.DENIED}: " in line or "needs-ack" in line
    ]
    return bool(blocking) and all(_DENY_MARK.search(line) for line in blocking)


# -- status by wave ---------------------------------------------------------------------------


def wave_heading(
    members: WaveMembers, evidence: Mapping[str, ClusterEvidence], now: datetime
) -> str:
    """One line of ``status``: the wave, its soak, and where each of its clusters stands (the
    version it runs, verified since when, the soak's end, or its trouble)."""
    wave = members.wave
    if wave is None:
        head = "unwaved (not held by waves)"
    else:
        extras = [f"soak {_duration(wave.soak_seconds)}"]
        if wave.gate_values:
            extras.append("gateValues")
        head = f"wave {wave.name} ({', '.join(extras)})"
    if not members.clusters:
        return f"{head}: selects no cluster"
    soak = timedelta(seconds=wave.soak_seconds if wave is not None else 0)
    states = [
        _cluster_state(evidence.get(c, ClusterEvidence(c)), soak, now) for c in members.clusters
    ]
    return f"{head}: " + "; ".join(states)


def _cluster_state(e: ClusterEvidence, soak: timedelta, now: datetime) -> str:
    if e.trouble_at is not None and (e.verified_at is None or e.trouble_at > e.verified_at):
        return f"{e.cluster} {e.trouble} at {clock_text(e.trouble_at, now)}"
    if not e.chart_version:
        return f"{e.cluster} nothing applied by the bot yet"
    on = f"{e.cluster} {e.chart_version}"
    if e.in_flight:
        return f"{on}, a change in flight"
    if e.verified_at is None:
        return f"{on}, not verified"
    ends = e.verified_at + soak
    if now < ends:
        return f"{on} verified {clock_text(e.verified_at, now)}, soak ends {clock_text(ends, now)}"
    return f"{on} verified {clock_text(e.verified_at, now)}, soaked"


def held_message(journal: Journal | None) -> str:
    """What holds a cluster's latest change, from its blocked journal's WAVES verdict ("" when
    nothing holds it)."""
    if journal is None or journal.status is not OperationStatus.BLOCKED:
        return ""
    for line in journal.verdicts:
        found = _DENY_MARK.search(line)
        if found:
            return line[found.end() :]
    return ""


def _duration(seconds: int) -> str:
    if seconds and seconds % 3600 == 0:
        return f"{seconds // 3600}h"
    if seconds and seconds % 60 == 0:
        return f"{seconds // 60}m"
    return f"{seconds}s"
