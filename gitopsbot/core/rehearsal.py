"""A rehearsal's timeline, and how it compares with the plan and with the real operation.

``gitopsbot rehearse`` (docs/rehearsal.md) plays an upgrade of one cluster in a sandbox on a
virtual clock (sandbox/rehearsal.py) and hands the moments it saw to this module: each pool's
start and finish, the maintenance-window waits, a ``maxDuration`` that bit, the verification
steps. Everything here is pure: it turns those records into the printed timeline, the JSON,
the compressed lines attached to a pull request's plan comment, the state-branch record
(``rehearsals/<cluster>/<desired-sha>.yaml``) and the comparison, per pool, of the predicted
rolling time with the plan's estimate or with what the bot measured for the real operation.

"Rolling time" is the time a pool's switch was open: from its first batch to its last
finished, less the waits for a window; that is what the plan's estimate counts
(core/rollouts/timeline.py), so the two compare directly.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from gitopsbot.core.planning.plan import Plan
from gitopsbot.core.planning.plan import StepKind as PlanStepKind
from gitopsbot.core.records.journal import Journal, StepKind, dump_yaml, load_yaml
from gitopsbot.core.rollouts.timeline import format_duration

RECORD_DIR = "rehearsals"
# The rehearsal agrees with an estimate when they differ by at most this share of the
# estimate, or by TOLERANCE_FLOOR_SECONDS for short pools. The plan is deliberately
# pessimistic where the controller is not: it counts a pod readiness for every progress step,
# even the trailing steps that hold no node any more (F4: ceil(100/pct) steps whatever the
# node count), and for worker batches, which the controller does not wait for; on the example
# production cluster that is 14 of 67 minutes (21%) for inference.
TOLERANCE = 0.25
TOLERANCE_FLOOR_SECONDS = 60


class Outcome:
    DONE = "done"
    MAX_DURATION = "max-duration"  # the pool's maxDuration ran out before it finished
    NOT_STARTED = "not-started"  # an earlier pool failed: this one never began
    STALLED = "stalled"  # nothing left to happen and the pool not finished


@dataclass(frozen=True, slots=True)
class Moment:
    """Something the rehearsal saw, at rehearsal time ``at``."""

    at: datetime
    pool: str  # "" for the cluster's own steps (CRDs, helm, controller, verification)
    what: str


@dataclass(frozen=True, slots=True)
class PoolRun:
    pool: str
    nodes: int
    components: tuple[str, ...]
    outcome: str
    started_at: datetime | None = None  # the first batch opened
    finished_at: datetime | None = None  # the last batch finished (or the deadline bit)
    waited_seconds: int = 0  # window waits between start and finish
    batches: int = 0
    estimate_seconds: int = 0  # the plan's estimate for the same components and nodes

    @property
    def rolling_seconds(self) -> int:
        if self.started_at is None or self.finished_at is None:
            return 0
        span = (self.finished_at - self.started_at).total_seconds()
        return max(int(span) - self.waited_seconds, 0)


@dataclass(frozen=True, slots=True)
class Rehearsal:
    cluster: str
    chart: str  # "<name> <version>"
    desired_sha: str  # the fleet commit rehearsed ("" for files on disk)
    started_at: datetime
    finished_at: datetime
    pools: tuple[PoolRun, ...]
    moments: tuple[Moment, ...]
    verification: tuple[str, ...]
    rollback: tuple[str, ...]
    on_failure: str
    notes: tuple[str, ...] = ()
    wall_seconds: float = 0.0  # real time the rehearsal took (not part of the record)

    @property
    def succeeded(self) -> bool:
        return all(p.outcome == Outcome.DONE for p in self.pools)

    @property
    def deadline_hits(self) -> tuple[PoolRun, ...]:
        return tuple(p for p in self.pools if p.outcome == Outcome.MAX_DURATION)


@dataclass(frozen=True, slots=True)
class PoolComparison:
    pool: str
    predicted_seconds: int
    other_seconds: int  # the plan's estimate, or the real operation's measured time
    tolerance_seconds: int

    @property
    def difference_seconds(self) -> int:
        return self.predicted_seconds - self.other_seconds

    @property
    def within(self) -> bool:
        return abs(self.difference_seconds) <= self.tolerance_seconds


def tolerance_for(seconds: int, share: float = TOLERANCE) -> int:
    return max(int(seconds * share), TOLERANCE_FLOOR_SECONDS)


def compare(
    predicted: Mapping[str, int], other: Mapping[str, int], share: float = TOLERANCE
) -> tuple[PoolComparison, ...]:
    """Per pool both sides know: predicted vs ``other`` (estimate or measured), with the
    tolerance taken on ``other``."""
    return tuple(
        PoolComparison(pool, predicted[pool], other[pool], tolerance_for(other[pool], share))
        for pool in predicted
        if pool in other
    )


def predicted(rehearsal: Rehearsal) -> dict[str, int]:
    """Rolling seconds per pool that finished in the rehearsal."""
    return {p.pool: p.rolling_seconds for p in rehearsal.pools if p.outcome == Outcome.DONE}


def estimates(rehearsal: Rehearsal) -> dict[str, int]:
    return {p.pool: p.estimate_seconds for p in rehearsal.pools if p.components}


def measured(journal: Journal) -> dict[str, int]:
    """Rolling seconds per pool the real operation measured: the switch-open time of each of
    the pool's finished phases (``open_seconds``; window waits are not in it), else the
    phase step's span."""
    out: dict[str, int] = {}
    phases = {p.step: p for p in journal.phases}
    for step in journal.steps:
        if step.kind is not StepKind.POOL_PHASE or not step.pool or not step.state.finished:
            continue
        phase = phases.get(step.name)
        seconds = phase.open_seconds if phase is not None else 0
        if not seconds and step.started_at is not None and step.finished_at is not None:
            seconds = int((step.finished_at - step.started_at).total_seconds())
        out[step.pool] = out.get(step.pool, 0) + seconds
    return out


# ------------------------------------------------------------------ what the plan implies


def verification_steps(
    plan: Plan, canary_pools: Iterable[str], smoke_pools: Iterable[str]
) -> tuple[str, ...]:
    """The checks the operation makes, in order: the plan's controller and verify steps, the
    canary batch's checks per pool."""
    out = [
        s.title
        for s in plan.steps
        if s.kind in (PlanStepKind.CONTROLLER_READY, PlanStepKind.VERIFY)
    ]
    smoke = set(smoke_pools)
    for pool in canary_pools:
        extra = " and the GPU canary pod (canary-smoke.yaml)" if pool in smoke else ""
        out.append(f"{pool}: after the canary batch, the pool's pods checked{extra}")
    return tuple(out)


def rollback_steps(pools: Sequence[PoolRun], on_failure: str) -> tuple[str, ...]:
    """What a rollback of this operation does (R16), from what the rehearsal rolled."""
    rolled = [p for p in pools if p.started_at is not None]
    out = [
        "helm rollback to the revision before the operation (its chart and whole values file)",
        "CRDs stay as they are: a rollback never touches CRDs (R16)",
        "controller Deployment waited for, as on the way forward",
    ]
    for p in rolled:
        took = format_duration(p.rolling_seconds)
        out.append(
            f"pool {p.pool}: {', '.join(p.components)} back to the previous images in the same "
            f"batches (~{took} rolling, its window and deadline as on the way forward)"
        )
    if not rolled:
        out.append("no pool rolled: nothing on the nodes to undo")
    on = {
        "rollback": "a failure rolls back at once (onFailure: rollback)",
        "revert-pr": "a failure opens a revert pull request; merging it rolls back "
        "(onFailure: revert-pr)",
        "halt": "a failure halts the operation and waits for a person (onFailure: halt)",
    }
    out.append(on.get(on_failure, f"onFailure: {on_failure}"))
    return tuple(out)


# ------------------------------------------------------------------ rendering


def _t(at: datetime | None, origin: datetime) -> str:
    if at is None:
        return "—"
    return f"{at:%a %Y-%m-%d %H:%M:%S} UTC (+{format_duration(int((at - origin).total_seconds()))})"


def render_text(r: Rehearsal, share: float = TOLERANCE) -> str:
    lines = [
        f"rehearsal of {r.cluster}: {r.chart}"
        + (f" at {r.desired_sha[:12]}" if r.desired_sha else ""),
        f"  rehearsal clock: {_t(r.started_at, r.started_at)} → {_t(r.finished_at, r.started_at)}",
        "",
        "timeline:",
    ]
    for m in r.moments:
        who = f"{m.pool}: " if m.pool else ""
        lines.append(f"  {_t(m.at, r.started_at)}  {who}{m.what}")
    lines += ["", "pools:"]
    for p in r.pools:
        lines.append(
            f"  {p.pool} ({p.nodes} nodes; {', '.join(p.components) or 'nothing to roll'}): "
            f"{p.outcome}; start {_t(p.started_at, r.started_at)}, finish "
            f"{_t(p.finished_at, r.started_at)}; rolling {format_duration(p.rolling_seconds)}"
            f" in {p.batches} batches, window waits {format_duration(p.waited_seconds)}"
        )
    for p in r.deadline_hits:
        lines.append(
            f"  MAXDURATION HIT: pool {p.pool} did not finish within its maxDuration; the "
            f"operation fails there (onFailure: {r.on_failure})"
        )
    lines += ["", "compared with the plan's estimate (rolling time):"]
    for c in compare(predicted(r), estimates(r), share):
        verdict = "within" if c.within else "OUTSIDE"
        lines.append(
            f"  {c.pool}: rehearsed {format_duration(c.predicted_seconds)}, plan "
            f"{format_duration(c.other_seconds)} "
            f"({verdict} ±{format_duration(c.tolerance_seconds)})"
        )
    lines += ["", "verification steps:"] + [f"  - {v}" for v in r.verification]
    lines += ["", "what a rollback would do:"] + [f"  - {s}" for s in r.rollback]
    if r.notes:
        lines += ["", "notes:"] + [f"  - {n}" for n in r.notes]
    return "\n".join(lines) + "\n"


def _iso(at: datetime | None) -> str | None:
    return at.isoformat() if at is not None else None


def to_dict(r: Rehearsal, share: float = TOLERANCE) -> dict[str, Any]:
    return {
        "cluster": r.cluster,
        "chart": r.chart,
        "desired_sha": r.desired_sha,
        "started_at": _iso(r.started_at),
        "finished_at": _iso(r.finished_at),
        "succeeded": r.succeeded,
        "on_failure": r.on_failure,
        "pools": [
            {
                "pool": p.pool,
                "nodes": p.nodes,
                "components": list(p.components),
                "outcome": p.outcome,
                "started_at": _iso(p.started_at),
                "finished_at": _iso(p.finished_at),
                "rolling_seconds": p.rolling_seconds,
                "waited_seconds": p.waited_seconds,
                "batches": p.batches,
                "estimate_seconds": p.estimate_seconds,
            }
            for p in r.pools
        ],
        "compared_with_plan": [
            {
                "pool": c.pool,
                "rehearsed_seconds": c.predicted_seconds,
                "estimate_seconds": c.other_seconds,
                "tolerance_seconds": c.tolerance_seconds,
                "within": c.within,
            }
            for c in compare(predicted(r), estimates(r), share)
        ],
        "timeline": [{"at": _iso(m.at), "pool": m.pool, "what": m.what} for m in r.moments],
        "verification": list(r.verification),
        "rollback": list(r.rollback),
        "notes": list(r.notes),
        "wall_seconds": round(r.wall_seconds, 2),
    }


def compressed(r: Rehearsal) -> str:
    """A few Markdown lines for the pull request's plan comment: one per pool."""
    lines = ["**Rehearsal** (sandbox, virtual clock; docs/rehearsal.md)", ""]
    for p in r.pools:
        if p.started_at is None:
            lines.append(f"- {p.pool}: {p.outcome}")
            continue
        wait = (
            f", waits {format_duration(p.waited_seconds)} for its window"
            if p.waited_seconds
            else ""
        )
        start = int((p.started_at - r.started_at).total_seconds())
        end = int(((p.finished_at or p.started_at) - r.started_at).total_seconds())
        lines.append(
            f"- {p.pool}: +{format_duration(start)} → +{format_duration(end)}, "
            f"{format_duration(p.rolling_seconds)} rolling{wait}: {p.outcome}"
        )
    for p in r.deadline_hits:
        lines.append(f"- ⚠️ {p.pool} hits its maxDuration (onFailure: {r.on_failure})")
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------ the state branch


def record_path(cluster: str, desired_sha: str) -> str:
    return f"{RECORD_DIR}/{cluster}/{desired_sha or 'worktree'}.yaml"


def comparison_path(cluster: str, desired_sha: str) -> str:
    return f"{RECORD_DIR}/{cluster}/{desired_sha or 'worktree'}.compared.yaml"


def to_record(r: Rehearsal) -> dict[str, Any]:
    """What the state branch keeps of a rehearsal: its predictions, per pool."""
    return {
        "cluster": r.cluster,
        "chart": r.chart,
        "desired_sha": r.desired_sha,
        "succeeded": r.succeeded,
        # What a pull request's plan comment shows when rehearsal.attachToPlan is on.
        "compressed": compressed(r),
        "pools": {
            p.pool: {
                "outcome": p.outcome,
                "rolling_seconds": p.rolling_seconds,
                "waited_seconds": p.waited_seconds,
                "estimate_seconds": p.estimate_seconds,
            }
            for p in r.pools
        },
    }


def predicted_from_record(record: Mapping[str, Any]) -> dict[str, int]:
    pools = record.get("pools") or {}
    return {
        str(name): int(p.get("rolling_seconds") or 0)
        for name, p in pools.items()
        if isinstance(p, Mapping) and p.get("outcome") == Outcome.DONE
    }


@dataclass(frozen=True, slots=True)
class MeasuredComparison:
    op_id: str
    rows: tuple[PoolComparison, ...] = field(default_factory=tuple)

    def to_record(self) -> dict[str, Any]:
        return {
            "operation": self.op_id,
            "pools": {
                c.pool: {
                    "predicted_seconds": c.predicted_seconds,
                    "measured_seconds": c.other_seconds,
                    "difference_seconds": c.difference_seconds,
                    "tolerance_seconds": c.tolerance_seconds,
                    "within": c.within,
                }
                for c in self.rows
            },
        }

    def lines(self) -> list[str]:
        out = [f"rehearsal vs operation {self.op_id} (rolling time):"]
        for c in self.rows:
            verdict = "within" if c.within else "OUTSIDE"
            out.append(
                f"  {c.pool}: predicted {format_duration(c.predicted_seconds)}, measured "
                f"{format_duration(c.other_seconds)} ({verdict} ±"
                f"{format_duration(c.tolerance_seconds)})"
            )
        return out


def against_operation(record: Mapping[str, Any], journal: Journal) -> MeasuredComparison:
    """The stored rehearsal of ``journal``'s desired sha against what the bot measured."""
    return MeasuredComparison(
        journal.op_id, compare(predicted_from_record(record), measured(journal))
    )


def dumps(record: Mapping[str, Any]) -> str:
    return dump_yaml(dict(record))


def loads(text: str) -> dict[str, Any] | None:
    """A stored record (rehearsal or comparison), or None when it cannot be read."""
    try:
        data: Any = load_yaml(text)
    except ValueError:
        return None
    return dict(data) if isinstance(data, Mapping) else None


# The plan comment's rehearsal section sits between these, so a later plan replaces it whole.
# Not "<!-- gitopsbot:...": that is a comment's own marker (core.forge_types), which the
# forges strip from a body and look comments up by.
SECTION_START = "<!-- gitopsbot-rehearsal -->"
SECTION_END = "<!-- /gitopsbot-rehearsal -->"


def section(record: Mapping[str, Any] | None) -> str:
    """The plan comment's rehearsal section from a stored record ("" when none)."""
    text = str((record or {}).get("compressed") or "").strip()
    return f"{SECTION_START}\n{text}\n{SECTION_END}\n" if text else ""


def with_section(plan_markdown: str, rehearsal_section: str) -> str:
    """The plan comment with ``rehearsal_section`` at its end, an earlier one replaced (an
    empty section removes it)."""
    body = plan_markdown
    start = body.find(SECTION_START)
    if start >= 0:
        end = body.find(SECTION_END, start)
        tail = body[end + len(SECTION_END) :] if end >= 0 else ""
        body = body[:start].rstrip("\n") + "\n" + tail.lstrip("\n")
    if not rehearsal_section:
        return body
    return body.rstrip("\n") + "\n\n" + rehearsal_section
