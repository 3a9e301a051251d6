"""The journal of one operation: what the bot set out to do, how far it got, how to undo it.

A journal is a frozen value. The bot commits it to the state branch at every step transition
(``clusters/<name>/journal.yaml``) and resumes from it after a restart. Pure: serialisation
is to and from text; reading and writing files is ``bot.journal_store``'s job.

Format (``format: gitopsbot-journal/v1``): a YAML mapping with keys in a fixed order, times
as ISO-8601 strings in UTC, enums as their string values, absent optionals as ``null``.
``loads(dumps(j)) == j`` for every journal (tested with Hypothesis).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from ruamel.yaml import YAML

from gitopsbot.core.fleet import located_yaml
from gitopsbot.core.fleet.model import Component
from gitopsbot.core.records import batch_record, canary_record, node_states
from gitopsbot.core.records.batch_record import BatchRecord
from gitopsbot.core.records.canary_record import CanaryRecord
from gitopsbot.core.records.node_states import NodeRecord
from gitopsbot.errors import FleetError

FORMAT = "gitopsbot-journal/v1"


class OperationKind(StrEnum):
    UPGRADE = "upgrade"
    ROLLBACK = "rollback"
    CONTROLLER_RESTART = "controller-restart"
    ROLLOUT_ONLY = "rollout-only"
    ROTATION = "rotation"  # R17-R20: credentials only (core.rotation)


class OperationStatus(StrEnum):
    QUEUED = "queued"  # merged, waiting for its window or for the cluster's current operation
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"  # a step failed or a rollout halted; see ``failure``
    SUPERSEDED = "superseded"  # a newer merge for the cluster replaced it while queued
    # Nothing was applied: the policy gate refused it, or a step failed before it changed
    # anything in the cluster (the chart could not be fetched). Never remediated (no revert,
    # no rollback); a newer commit for the cluster replaces it.
    BLOCKED = "blocked"


class StepKind(StrEnum):
    BACKUP = "backup"  # R6
    CRDS = "crds"  # R7, R16
    HELM_UPGRADE = "helm-upgrade"  # R8
    CONTROLLER_READY = "controller-ready"  # R8 rollout status
    CONTROLLER_RESTART = "controller-restart"  # R24
    POOL_PHASE = "pool-phase"  # R10-R14, R21, R22
    VERIFY = "verify"  # R15
    ROLLBACK = "rollback"  # R16
    VENDOR_SECRET = "vendor-secret"  # R19 (core.rotation)
    AGENT_RECONNECT = "agent-reconnect"  # R18 (core.agent_reconnect)
    HYPERVISOR_RESTART = "hypervisor-restart"  # R20 (core.hypervisor_restart)


class StepState(StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    SKIPPED = "skipped"

    @property
    def finished(self) -> bool:
        return self in (StepState.SUCCEEDED, StepState.SKIPPED, StepState.FAILED)


class PhaseState(StrEnum):
    PENDING = "pending"  # not started
    CANARY = "canary"  # first small batch running (canaryBatchPercentage)
    CANARY_VERIFY = "canary-verify"  # switch closed after the canary batch; verifying
    ROLLING = "rolling"  # switch open, controller rolling
    # Switch closed by the bot at a batch boundary: gates, a budget or the window decide
    # whether the next batch opens (issue 18).
    BETWEEN = "between-batches"
    PAUSED = "paused"  # window closed or held (paused_by): switch closed until it may open
    DONE = "done"
    HALTED = "halted"  # deadline passed or stalled: switch closed, alert raised


@dataclass(frozen=True, slots=True)
class Effect:
    """Proof that a step took effect outside, so a restart never repeats it.

    For the Helm upgrade: the revision and the description the bot gave it
    (``gitopsbot op=<id> step=helm-upgrade``), found again in ``helm history``.
    """

    helm_revision: int = 0
    description: str = ""
    commit: str = ""  # a state-branch or watched-branch commit the step wrote


@dataclass(frozen=True, slots=True)
class Step:
    name: str
    kind: StepKind
    state: StepState = StepState.PENDING
    started_at: datetime | None = None
    finished_at: datetime | None = None
    detail: str = ""
    effect: Effect | None = None
    pool: str = ""  # POOL_PHASE only
    component: Component | None = None  # POOL_PHASE only
    attempts: int = 0

    def waited(self, now: datetime) -> float:
        """Seconds since the step started, as ``now`` sees it (0 before it started): what its
        time limits count."""
        return (now - (self.started_at or now)).total_seconds()


@dataclass(frozen=True, slots=True)
class PhaseProgress:
    """Per-pool, per-component rollout progress, as the bot last saw and drove it."""

    step: str  # the POOL_PHASE step's name
    state: PhaseState = PhaseState.PENDING
    started_at: datetime | None = None  # first time the switch was opened
    # Start of the interval the deadline counts now: the switch open, or the canary batch
    # verified with it closed (core.phase_clock.active_seconds); None: stopped.
    opened_at: datetime | None = None
    open_seconds: int = 0  # switch-open time accumulated over earlier intervals
    progress: int = 0  # R14 progress, 0..100
    last_progress_at: datetime | None = None  # when progress last changed (or the switch opened)
    halt_reason: str = ""
    canary_done: bool = False  # the canary batch ran and was verified
    # What a person is shown (core.phase_view): the batch settings pinned when the switch
    # last opened, the pool's size as last observed, the window and deadline in force, and
    # when each progress value was first seen. Recorded only with a change the bot records
    # anyway (an open, a progress step), so they add no commit.
    batch_percentage: int = 0  # the batchPercentage pinned at the last open
    batch_interval_seconds: int = 0
    total: int = 0  # nodes (hypervisor), workloads (worker) or pods (client) in the pool
    window_closes_at: datetime | None = None  # the window's end as seen at the last open
    max_duration_seconds: int | None = None
    marks: tuple[ProgressMark, ...] = ()  # each progress value and when it was first seen
    # Who holds the phase and why (core.pause): a person's pause, not a closed window.
    paused_by: str = ""
    # Batch boundaries, gates and admission (issue 18; core.batch_record).
    batches: BatchRecord = field(default_factory=BatchRecord)
    # Each node's state in this phase (hypervisor phases; core.node_states).
    nodes: tuple[NodeRecord, ...] = ()
    # The GPU canary's judgement with its evidence, passed or failed (core.canary_record).
    canary: CanaryRecord | None = None


@dataclass(frozen=True, slots=True)
class ProgressMark:
    """The moment the bot first saw ``progress`` (a batch finished, or the switch opened)."""

    progress: int
    at: datetime


@dataclass(frozen=True, slots=True)
class RollbackPoint:
    """Where the cluster was before the operation (R16)."""

    helm_revision: int
    chart_version: str
    values_digest: str = ""
    crd_bundle_digest: str = ""
    # pool -> component -> image
    images: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    # Found when a rollback runs, never written: the chart archive (sha256:<hex>) the
    # operation that made ``helm_revision`` applied, and that operation
    # (``core.planning.reviewed_chart.applied_archive``); "" when none was recorded.
    chart_archive: str = ""
    applied_by: str = ""


@dataclass(frozen=True, slots=True)
class QueueState:
    queued_until: datetime | None = None  # expected start (a window opening)
    superseded_by: str = ""  # the operation id that replaced this one
    # The merged commit that waits to be taken in until this one starts: a rotation and
    # another change never supersede each other (core.operations.merge_queue.waits_behind).
    behind: str = ""


@dataclass(frozen=True, slots=True)
class Journal:
    op_id: str
    kind: OperationKind
    cluster: str
    desired_sha: str
    created_at: datetime
    status: OperationStatus = OperationStatus.RUNNING
    # The desired commit's first parent: the Git state this operation moved away from, so
    # a later commit restoring it (a hand-made undo) is recognised as a rollback.
    base_sha: str = ""
    pr_number: int | None = None
    steps: tuple[Step, ...] = ()
    phases: tuple[PhaseProgress, ...] = ()
    rollback_point: RollbackPoint | None = None
    queue: QueueState = QueueState()
    failure: str = ""
    # For a rollback: the operation (and commit) it undoes.
    reverts_op: str = ""
    # What on_failure did: "" | "rollback:<op id>" | "revert-pr:#<n>" | "halt".
    remediation: str = ""
    # The policy gate's verdicts at apply time, one line each ("file:line: RULE outcome:
    # message"); the blocking ones made the operation BLOCKED.
    verdicts: tuple[str, ...] = ()
    # Comment commands (docs/pause.md): the pauses they hold (pool → who and why; "*" the
    # whole cluster), what was approved to go on, the last comment id handled (a restart
    # never applies a comment twice) and one line per command handled.
    holds: Mapping[str, str] = field(default_factory=dict)
    approved: tuple[str, ...] = ()
    comment_cursor: int = 0
    commands: tuple[str, ...] = ()
    # The chart archive (sha256:<hex>) the apply gate fetched and compared with the plan's
    # (bot.reviewed_chart): the CRDs and Helm steps install that very file. From an OCI
    # registry, also the manifest the tag pointed at then (``chart_manifest``).
    chart_archive: str = ""
    chart_manifest: str = ""

    def step(self, name: str) -> Step:
        for s in self.steps:
            if s.name == name:
                return s
        raise KeyError(name)

    def phase(self, step_name: str) -> PhaseProgress:
        for p in self.phases:
            if p.step == step_name:
                return p
        return PhaseProgress(step=step_name)

    def with_step(self, step: Step) -> Journal:
        return replace(self, steps=tuple(step if s.name == step.name else s for s in self.steps))

    def with_phase(self, phase: PhaseProgress) -> Journal:
        rest = tuple(p for p in self.phases if p.step != phase.step)
        order = [s.name for s in self.steps]
        merged = sorted((*rest, phase), key=lambda p: order.index(p.step) if p.step in order else 0)
        return replace(self, phases=tuple(merged))

    @property
    def active(self) -> bool:
        return self.status in (OperationStatus.QUEUED, OperationStatus.RUNNING)


# -- serialisation ---------------------------------------------------------------------------


def _time(value: datetime | None) -> str | None:
    if value is None:
        return None
    if value.tzinfo is None:
        raise ValueError("journal times must be timezone-aware")
    return value.astimezone(UTC).isoformat()


def _parse_time(value: Any) -> datetime | None:
    if value is None:
        return None
    if isinstance(value, datetime):  # a YAML timestamp someone wrote by hand
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    return datetime.fromisoformat(str(value)).astimezone(UTC)


def _effect(e: Effect | None) -> dict[str, Any] | None:
    if e is None:
        return None
    return {"helm_revision": e.helm_revision, "description": e.description, "commit": e.commit}


def to_dict(j: Journal) -> dict[str, Any]:
    """The journal as plain data, keys in a fixed order."""
    return {
        "format": FORMAT,
        "op_id": j.op_id,
        "kind": str(j.kind),
        "cluster": j.cluster,
        "desired_sha": j.desired_sha,
        "base_sha": j.base_sha,
        "pr_number": j.pr_number,
        "created_at": _time(j.created_at),
        "status": str(j.status),
        "failure": j.failure,
        "reverts_op": j.reverts_op,
        "remediation": j.remediation,
        "queue": {
            "queued_until": _time(j.queue.queued_until),
            "superseded_by": j.queue.superseded_by,
            **({"behind": j.queue.behind} if j.queue.behind else {}),
        },
        "rollback_point": None
        if j.rollback_point is None
        else {
            "helm_revision": j.rollback_point.helm_revision,
            "chart_version": j.rollback_point.chart_version,
            "values_digest": j.rollback_point.values_digest,
            "crd_bundle_digest": j.rollback_point.crd_bundle_digest,
            "images": {
                pool: dict(sorted(comps.items()))
                for pool, comps in sorted(j.rollback_point.images.items())
            },
        },
        "steps": [
            {
                "name": s.name,
                "kind": str(s.kind),
                "state": str(s.state),
                "pool": s.pool,
                "component": None if s.component is None else str(s.component),
                "attempts": s.attempts,
                "started_at": _time(s.started_at),
                "finished_at": _time(s.finished_at),
                "detail": s.detail,
                "effect": _effect(s.effect),
            }
            for s in j.steps
        ],
        "phases": [
            {
                "step": p.step,
                "state": str(p.state),
                "started_at": _time(p.started_at),
                "opened_at": _time(p.opened_at),
                "open_seconds": p.open_seconds,
                "progress": p.progress,
                "last_progress_at": _time(p.last_progress_at),
                "halt_reason": p.halt_reason,
                "canary_done": p.canary_done,
                **_phase_view_fields(p),
            }
            for p in j.phases
        ],
        # Written only when present: journals without verdicts keep their exact bytes.
        **({"verdicts": list(j.verdicts)} if j.verdicts else {}),
        **_command_fields(j),
        **({"chart_archive": j.chart_archive} if j.chart_archive else {}),
        **({"chart_manifest": j.chart_manifest} if j.chart_manifest else {}),
    }


def _command_fields(j: Journal) -> dict[str, Any]:
    """Written only when set: journals without comment commands keep their exact bytes."""
    out: dict[str, Any] = {}
    if j.holds:
        out["holds"] = dict(sorted(j.holds.items()))
    if j.approved:
        out["approved"] = list(j.approved)
    if j.comment_cursor:
        out["comment_cursor"] = j.comment_cursor
    if j.commands:
        out["commands"] = list(j.commands)
    return out


def _phase_view_fields(p: PhaseProgress) -> dict[str, Any]:
    """The display fields, written only when set: journals of phases recorded before them
    (or never opened) keep their exact bytes."""
    out: dict[str, Any] = {}
    if p.batch_percentage:
        out["batch_percentage"] = p.batch_percentage
    if p.batch_interval_seconds:
        out["batch_interval_seconds"] = p.batch_interval_seconds
    if p.total:
        out["total"] = p.total
    if p.window_closes_at is not None:
        out["window_closes_at"] = _time(p.window_closes_at)
    if p.max_duration_seconds is not None:
        out["max_duration_seconds"] = p.max_duration_seconds
    if p.marks:
        out["marks"] = [{"progress": m.progress, "at": _time(m.at)} for m in p.marks]
    if p.paused_by:
        out["paused_by"] = p.paused_by
    if p.batches != BatchRecord():
        out["batches"] = batch_record.to_data(p.batches)
    if p.nodes:
        out["nodes"] = node_states.to_data(p.nodes)
    if p.canary is not None:
        out["canary"] = canary_record.to_data(p.canary)
    return out


def _created(d: Mapping[str, Any]) -> datetime:
    created = _parse_time(d["created_at"])
    if created is None:
        raise ValueError("journal: created_at is required")
    return created


def from_dict(d: Mapping[str, Any]) -> Journal:
    """Inverse of ``to_dict``. ValueError / KeyError name the missing or bad field."""
    if d.get("format") != FORMAT:
        raise ValueError(f"journal: format is {d.get('format')!r}, expected {FORMAT!r}")
    rp = d.get("rollback_point")
    q = d.get("queue") or {}
    return Journal(
        op_id=str(d["op_id"]),
        kind=OperationKind(d["kind"]),
        cluster=str(d["cluster"]),
        desired_sha=str(d["desired_sha"]),
        base_sha=str(d.get("base_sha", "")),
        pr_number=None if d.get("pr_number") is None else int(d["pr_number"]),
        created_at=_created(d),
        status=OperationStatus(d["status"]),
        failure=str(d.get("failure", "")),
        reverts_op=str(d.get("reverts_op", "")),
        remediation=str(d.get("remediation", "")),
        queue=QueueState(
            queued_until=_parse_time(q.get("queued_until")),
            superseded_by=str(q.get("superseded_by", "")),
            behind=str(q.get("behind", "")),
        ),
        rollback_point=None
        if rp is None
        else RollbackPoint(
            helm_revision=int(rp["helm_revision"]),
            chart_version=str(rp["chart_version"]),
            values_digest=str(rp.get("values_digest", "")),
            crd_bundle_digest=str(rp.get("crd_bundle_digest", "")),
            images={
                str(pool): {str(c): str(i) for c, i in comps.items()}
                for pool, comps in (rp.get("images") or {}).items()
            },
        ),
        steps=tuple(_step(s) for s in d.get("steps") or ()),
        phases=tuple(
            PhaseProgress(
                step=str(p["step"]),
                state=PhaseState(p["state"]),
                started_at=_parse_time(p.get("started_at")),
                opened_at=_parse_time(p.get("opened_at")),
                open_seconds=int(p.get("open_seconds", 0)),
                progress=int(p.get("progress", 0)),
                last_progress_at=_parse_time(p.get("last_progress_at")),
                halt_reason=str(p.get("halt_reason", "")),
                canary_done=bool(p.get("canary_done", False)),
                batch_percentage=int(p.get("batch_percentage", 0)),
                batch_interval_seconds=int(p.get("batch_interval_seconds", 0)),
                total=int(p.get("total", 0)),
                window_closes_at=_parse_time(p.get("window_closes_at")),
                max_duration_seconds=None
                if p.get("max_duration_seconds") is None
                else int(p["max_duration_seconds"]),
                marks=tuple(
                    ProgressMark(int(m["progress"]), _created({"created_at": m["at"]}))
                    for m in p.get("marks") or ()
                ),
                paused_by=str(p.get("paused_by", "")),
                batches=batch_record.from_data(p.get("batches")),
                nodes=node_states.from_data(p.get("nodes")),
                canary=canary_record.from_data(p.get("canary")),
            )
            for p in d.get("phases") or ()
        ),
        verdicts=tuple(str(v) for v in d.get("verdicts") or ()),
        holds={str(k): str(v) for k, v in (d.get("holds") or {}).items()},
        approved=tuple(str(v) for v in d.get("approved") or ()),
        comment_cursor=int(d.get("comment_cursor") or 0),
        commands=tuple(str(v) for v in d.get("commands") or ()),
        chart_archive=str(d.get("chart_archive") or ""),
        chart_manifest=str(d.get("chart_manifest") or ""),
    )


def _step(s: Mapping[str, Any]) -> Step:
    e = s.get("effect")
    return Step(
        name=str(s["name"]),
        kind=StepKind(s["kind"]),
        state=StepState(s["state"]),
        pool=str(s.get("pool", "")),
        component=None if s.get("component") is None else Component(s["component"]),
        attempts=int(s.get("attempts", 0)),
        started_at=_parse_time(s.get("started_at")),
        finished_at=_parse_time(s.get("finished_at")),
        detail=str(s.get("detail", "")),
        effect=None
        if e is None
        else Effect(
            helm_revision=int(e.get("helm_revision", 0)),
            description=str(e.get("description", "")),
            commit=str(e.get("commit", "")),
        ),
    )


class _Collect:
    """A write-only text sink for ruamel (core may not import io)."""

    def __init__(self) -> None:
        self.parts: list[str] = []

    def write(self, text: str | bytes) -> None:
        self.parts.append(text.decode() if isinstance(text, bytes) else text)


def dump_yaml(data: Any) -> str:
    """Deterministic block YAML for plain data (dict order kept, no aliases)."""
    yaml = YAML(typ="safe", pure=True)
    yaml.default_flow_style = False
    # keep our fixed key order
    yaml.sort_base_mapping_type_on_output = False  # type: ignore[assignment]
    # No folding: ruamel folds escaped double-quoted scalars lossily (found by Hypothesis).
    yaml.width = 1 << 30
    # Escape non-ASCII: ruamel 0.19 writes a lone U+0085 in single quotes, where a reader
    # folds it to a space (found by the round-trip property test).
    yaml.allow_unicode = False
    yaml.representer.ignore_aliases = lambda _data: True
    sink = _Collect()
    yaml.dump(data, sink)
    return "".join(sink.parts)


def load_yaml(text: str, source: str = "<state>") -> Any:
    """One document through the project's YAML reader (bounded); ValueError when refused."""
    try:
        return located_yaml.load(text, source)
    except FleetError as exc:
        raise ValueError(str(exc)) from None


def load_all_yaml(text: str, source: str = "<state>") -> list[Any]:
    """Every document of a multi-document YAML text (empty documents dropped); ValueError
    when refused."""
    try:
        return located_yaml.load_all(text, source)
    except FleetError as exc:
        raise ValueError(str(exc)) from None


def dumps(j: Journal) -> str:
    return dump_yaml(to_dict(j))


def loads(text: str) -> Journal:
    data = load_yaml(text)
    if not isinstance(data, Mapping):
        raise ValueError("journal: the document is not a mapping")
    return from_dict(data)


def new_steps(names_kinds: Iterable[tuple[str, StepKind]]) -> tuple[Step, ...]:
    return tuple(Step(name=n, kind=k) for n, k in names_kinds)
