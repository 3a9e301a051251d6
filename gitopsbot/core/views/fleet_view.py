"""What the fleet page shows (docs/fleet-page.md): the fleet by wave, and one cluster's
operation, built from what ``gitopsbot status`` reads (the state branch's records per
cluster and the fleet at the watched branch's head) and "now". Pure: records in, rows out.

Every text here is plain: the page's template escapes it (autoescape), so a cluster or pool
name with markup shows as text. The numbers and lines are ``core.rollouts.phase_view``'s and
``bot.report``'s own (via ``StepRow``), so the page, ``status`` and the pull request comment
never disagree. Journals carry no secrets (masked before they are written), so none reach
here; the page's canary test holds that.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from gitopsbot.core.drift.record import DriftRecord
from gitopsbot.core.fleet.model import Fleet, ForgeSettings, PoolPolicy
from gitopsbot.core.notices.notifications import pull_request_url
from gitopsbot.core.operations.manual_revision import ManualRevision
from gitopsbot.core.records import node_states
from gitopsbot.core.records.journal import Journal, OperationStatus, PhaseState, Step, StepState
from gitopsbot.core.records.load_failure import LoadFailure
from gitopsbot.core.records.pass_failure import PassFailure
from gitopsbot.core.rollouts import phase_view, timeline
from gitopsbot.core.rollouts.phase_view import StepRow
from gitopsbot.core.waves import promotion, promotion_gate
from gitopsbot.core.waves.promotion import ClusterEvidence


@dataclass(frozen=True, slots=True)
class ClusterRecords:
    """What the state branch holds for one cluster, as ``status`` reads it; ``error``: the
    records could not be read (a journal that does not parse, Git failing): said in place."""

    name: str
    current: Journal | None = None
    queued: Journal | None = None
    not_loaded: LoadFailure | None = None
    pass_failure: PassFailure | None = None
    drift: DriftRecord | None = None
    manual: ManualRevision | None = None
    error: str = ""


@dataclass(frozen=True, slots=True)
class FleetSnapshot:
    """One read of the state branch and the fleet (``bot.fleet_reads``). ``problem``: why
    nothing (or only part) could be read, shown at the top of the page."""

    source: str  # which ref was read, as ``status`` says it
    state_branch: str
    state_head: str | None  # None: the branch is absent
    clusters: tuple[ClusterRecords, ...] = ()
    fleet: Fleet | None = None  # the fleet at the watched branch's head
    evidence: Mapping[str, ClusterEvidence] = field(default_factory=dict)
    problem: str = ""


@dataclass(frozen=True, slots=True)
class Hold:
    kind: str  # window | pause | approval | wave | canary mark | waits
    reason: str
    until: str = ""  # "" when open-ended


@dataclass(frozen=True, slots=True)
class Links:
    """Web pages on the forge; "" where it is not known (a git-only fleet)."""

    pull_request: str = ""
    merge_commit: str = ""
    journal: str = ""


@dataclass(frozen=True, slots=True)
class ClusterRow:
    """One cluster on the fleet overview."""

    name: str
    deployed: str  # the chart version it runs ("" never applied by the bot)
    desired: str  # the chart version the watched branch names
    operation: str  # "upgrade op-1 — running" or ""
    step: str  # the running (or last) step and its phase line
    holds: tuple[Hold, ...]
    warnings: tuple[str, ...]  # drift, pass failures, a commit not loaded, a manual revision
    status: str  # the operation's status, for styling ("" none)
    links: Links = Links()


@dataclass(frozen=True, slots=True)
class WaveGroup:
    heading: str
    clusters: tuple[ClusterRow, ...]


@dataclass(frozen=True, slots=True)
class FleetPageView:
    source: str
    problem: str
    waves: tuple[WaveGroup, ...]
    as_of: str


@dataclass(frozen=True, slots=True)
class NodeRow:
    name: str
    state: str
    batch: str
    since: str
    detail: str


@dataclass(frozen=True, slots=True)
class PhaseRow:
    """A pool phase: its batch line and numbers (``core.rollouts.phase_view``), held or waiting."""

    step: str
    pool: str
    state: str
    progress: int
    batch: str  # "batch 2/3 of 2 nodes", "canary batch of 1 node", ""
    units: str  # "2/4 nodes done"
    eta: str
    window_closes: str
    deadline_left: str
    elapsed: str  # since the switch first opened
    held: str
    notes: tuple[str, ...]
    nodes: tuple[NodeRow, ...]


@dataclass(frozen=True, slots=True)
class StepLine:
    icon: str
    name: str
    state: str
    started: str
    finished: str
    took: str
    detail: str


@dataclass(frozen=True, slots=True)
class Bar:
    """One bar of the Gantt chart, in seconds from the chart's start."""

    row: str
    kind: str  # planned | done | running | halted | paused | eta
    start: float
    end: float
    label: str


@dataclass(frozen=True, slots=True)
class Gantt:
    bars: tuple[Bar, ...]
    span: float  # seconds the axis covers
    start: str  # the axis's origin, UTC
    rows: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class OperationView:
    cluster: str
    found: bool  # False: no such cluster on the state branch
    problem: str
    row: ClusterRow | None
    headline: str
    failure: str
    remediation: str
    verdicts: tuple[str, ...]
    steps: tuple[StepLine, ...]
    phases: tuple[PhaseRow, ...]
    gantt: Gantt | None
    queued: str
    as_of: str


def _stamp(t: datetime | None) -> str:
    return "" if t is None else f"{t.astimezone(UTC):%Y-%m-%d %H:%M:%S}Z"


def links(forge: ForgeSettings, state_branch: str, journal: Journal | None) -> Links:
    """The pull request, the merge commit and the journal on the state branch, on the
    forge's web pages (``core.notices.notifications.pull_request_url`` for the first)."""
    if journal is None or forge.kind == "git-only" or not forge.repository:
        return Links()
    web = _web_root(forge)
    if web and not web.startswith(("https://", "http://")):
        return Links()  # only web pages are linked (never a javascript: or file: URL)
    repo = forge.repository.strip("/")
    path = f"clusters/{journal.cluster}/journal.yaml"
    pr = pull_request_url(forge, journal.pr_number)
    if not web:
        return Links()
    if forge.kind == "gitlab":
        commit = f"{web}/{repo}/-/commit/{journal.desired_sha}"
        blob = f"{web}/{repo}/-/blob/{state_branch}/{path}"
    elif forge.kind == "gitea":
        commit = f"{web}/{repo}/commit/{journal.desired_sha}"
        blob = f"{web}/{repo}/src/branch/{state_branch}/{path}"
    else:
        commit = f"{web}/{repo}/commit/{journal.desired_sha}"
        blob = f"{web}/{repo}/blob/{state_branch}/{path}"
    return Links(pr, commit, blob)


def _web_root(forge: ForgeSettings) -> str:
    url = forge.url.rstrip("/")
    if forge.kind == "github":
        return (
            "https://github.com"
            if not url or "api.github.com" in url
            else url.removesuffix("/api/v3")
        )
    if forge.kind == "gitlab":
        return (url or "https://gitlab.com").removesuffix("/api/v4")
    return url.removesuffix("/api/v1")


def holds(records: ClusterRecords, rows: Sequence[StepRow], now: datetime) -> tuple[Hold, ...]:
    """What keeps the cluster's change from going on, with why and until when: a wave or a
    canary mark (the blocked journal's verdict), a window (queued until it opens, or a phase
    paused with its switch closed), a person's pause or an approval awaited, and why the
    next batch waits."""
    out: list[Hold] = []
    for journal in (records.current, records.queued):
        if journal is None:
            continue
        held = promotion_gate.held_message(journal)
        if held:
            kind = "canary mark" if "GPU canary failed" in held else "wave"
            out.append(Hold(kind, held))
        until = journal.queue.queued_until
        if journal.status is OperationStatus.QUEUED and until is not None:
            out.append(Hold("window", f"{journal.op_id} queued for its window", _stamp(until)))
    current = records.current
    for row in rows:
        if current is None:
            break
        phase = current.phase(row.name)
        if row.held:
            kind = "approval" if "approv" in row.held.lower() else "pause"
            out.append(Hold(kind, f"{row.name}: {row.held}"))
        elif phase.state is PhaseState.PAUSED:
            closes = phase.window_closes_at
            out.append(
                Hold("window", f"{row.name}: switch closed (maintenance window)", _stamp(closes))
            )
        b = phase.batches
        if b.waiting and phase.state not in (PhaseState.DONE, PhaseState.HALTED):
            kind = "approval" if "approv" in b.waiting.lower() else "waits"
            out.append(Hold(kind, f"{row.name}: {b.waiting}", _stamp(b.waiting_until)))
    return tuple(out)


def _warnings(records: ClusterRecords) -> tuple[str, ...]:
    out = []
    if records.error:
        out.append(f"the records cannot be read: {records.error}")
    for found in (records.not_loaded, records.manual, records.drift, records.pass_failure):
        if found is not None:
            out.append(found.describe())
    return tuple(out)


def _step_line(journal: Journal, rows: Sequence[StepRow]) -> str:
    """The step that says where the operation is: the running one; in an operation still
    in flight with none running (a held pool waits), the next one to run; else the last that
    ran."""
    running = [r for r in rows if r.state is StepState.RUNNING]
    pending = [r for r in rows if r.state is StepState.PENDING]
    ran = [r for r in rows if r.state is not StepState.PENDING]
    in_flight = journal.status in (OperationStatus.RUNNING, OperationStatus.QUEUED)
    if running:
        row = running[0]
    elif in_flight and pending:
        row = pending[0]
    elif ran:
        row = ran[-1]
    else:
        return ""
    text = f"{row.name} {row.state}"
    if row.held:
        text += " (held: see holds)"
    return f"{text} · {row.summary}" if row.summary else text


def _took(start: datetime | None, end: datetime | None, now: datetime) -> str:
    if start is None:
        return ""
    seconds = max(int(((end or now) - start).total_seconds()), 0)
    return timeline.format_duration(seconds)


def cluster_row(records: ClusterRecords, snapshot: FleetSnapshot, now: datetime) -> ClusterRow:
    current = records.current
    rows = phase_view.step_rows(current, now) if current is not None else []
    spec = snapshot.fleet.clusters.get(records.name) if snapshot.fleet is not None else None
    evidence = snapshot.evidence.get(records.name)
    operation = ""
    if current is not None:
        operation = f"{current.kind} {current.op_id} — {current.status}"
    forge = snapshot.fleet.settings.forge if snapshot.fleet is not None else ForgeSettings()
    return ClusterRow(
        name=records.name,
        deployed=evidence.chart_version if evidence is not None else "",
        desired=spec.release.version if spec is not None else "",
        operation=operation,
        step=_step_line(current, rows) if current is not None else "",
        holds=holds(records, rows, now),
        warnings=_warnings(records),
        status=str(current.status) if current is not None else "",
        links=links(forge, snapshot.state_branch, current),
    )


def fleet_page(snapshot: FleetSnapshot, now: datetime) -> FleetPageView:
    """The overview: by wave when the fleet has ``waves:`` (each headed as ``status``
    heads it), else one group; clusters on the state branch but no longer in the fleet last."""
    by_name = {c.name: c for c in snapshot.clusters}
    groups: list[WaveGroup] = []
    fleet = snapshot.fleet
    placed: set[str] = set()
    if fleet is not None:
        members = promotion.fleet_by_wave(fleet.settings.waves, fleet.clusters.values())
        for m in members:
            heading = promotion_gate.wave_heading(m, snapshot.evidence, now)
            if not fleet.settings.waves:
                heading = "clusters"
            rows = tuple(
                cluster_row(by_name.get(n, ClusterRecords(n)), snapshot, now) for n in m.clusters
            )
            placed.update(m.clusters)
            groups.append(WaveGroup(heading, rows))
    rest = [c for c in snapshot.clusters if c.name not in placed]
    if rest:
        heading = "not in the fleet on the watched branch" if fleet is not None else "clusters"
        groups.append(WaveGroup(heading, tuple(cluster_row(c, snapshot, now) for c in rest)))
    return FleetPageView(snapshot.source, _problem(snapshot), tuple(groups), _stamp(now))


def _problem(snapshot: FleetSnapshot) -> str:
    if snapshot.problem:
        return snapshot.problem
    if snapshot.state_head is None:
        return f"no {snapshot.state_branch} branch yet: the bot has recorded nothing"
    return ""


def operation_page(snapshot: FleetSnapshot, cluster: str, now: datetime) -> OperationView:
    """One cluster's current (or last) operation: steps with times, each pool phase with its
    batch line, numbers, notes and nodes, and the Gantt chart of plan against what
    happened."""
    records = next((c for c in snapshot.clusters if c.name == cluster), None)
    if records is None:
        known = ", ".join(c.name for c in snapshot.clusters) or "none yet"
        return OperationView(
            cluster, False, _problem(snapshot) or f"no record on the state branch (known: {known})",
            None, "", "", "", (), (), (), None, "", _stamp(now),
        )  # fmt: skip
    row = cluster_row(records, snapshot, now)
    current = records.current
    queued = records.queued
    queued_text = f"{queued.kind} {queued.op_id} — {queued.status}" if queued else ""
    if current is None:
        return OperationView(
            cluster, True, _problem(snapshot), row, "no operation yet", "", "", (), (), (),
            None, queued_text, _stamp(now),
        )  # fmt: skip
    return OperationView(
        cluster=cluster,
        found=True,
        problem=_problem(snapshot),
        row=row,
        headline=row.operation + (f" (PR #{current.pr_number})" if current.pr_number else ""),
        failure=current.failure,
        remediation=current.remediation,
        verdicts=current.verdicts,
        steps=tuple(_steps(current, now)),
        phases=tuple(_phases(current, now)),
        gantt=gantt(current, now, _pools(snapshot, cluster)),
        queued=queued_text,
        as_of=_stamp(now),
    )


def _steps(journal: Journal, now: datetime) -> list[StepLine]:
    return [
        StepLine(
            phase_view.ICON[s.state],
            s.name,
            str(s.state),
            _stamp(s.started_at),
            _stamp(s.finished_at),
            _took(s.started_at, s.finished_at, now),
            s.detail,
        )
        for s in journal.steps
    ]


def _phases(journal: Journal, now: datetime) -> list[PhaseRow]:
    out = []
    for step in journal.steps:
        if not step.pool:
            continue
        phase = journal.phase(step.name)
        v = phase_view.view(phase, step, now)
        batch = ""
        if v.canary:
            batch = f"canary batch of {v.batch_size} {v.unit}"
        elif v.batches:
            batch = f"batch {v.batch}/{v.batches}"
        live = not v.finished and phase.state is not PhaseState.PENDING
        closes = v.window_closes_at if live and v.window_closes_at else None
        out.append(
            PhaseRow(
                step=step.name,
                pool=step.pool,
                state=str(phase.state),
                progress=phase.progress,
                batch=batch,
                units=f"{v.done}/{v.total} {v.unit} done" if v.total else "",
                eta=timeline.format_duration(v.eta_seconds)
                if v.eta_seconds is not None and live
                else "",
                window_closes=_stamp(closes),
                deadline_left=timeline.format_duration(v.deadline_left_seconds)
                if v.deadline_left_seconds is not None and live
                else "",
                elapsed=timeline.format_duration(v.elapsed_seconds)
                if v.elapsed_seconds is not None
                else "",
                held=phase.paused_by,
                notes=phase_view.batch_notes(phase),
                nodes=tuple(_node(r, now) for r in phase_view.phase_nodes(phase)),
            )
        )
    return out


def _node(r: node_states.NodeRecord, now: datetime) -> NodeRow:
    ago = timeline.format_duration(max(int((now - r.since).total_seconds()), 0))
    return NodeRow(
        r.name, str(r.state), str(r.batch) if r.batch else "-", f"{_stamp(r.since)} ({ago} ago)",
        r.detail,
    )  # fmt: skip


def _pools(snapshot: FleetSnapshot, cluster: str) -> Mapping[str, PoolPolicy]:
    """The cluster's pools as the watched branch's head writes them (the plan's inputs)."""
    spec = snapshot.fleet.clusters.get(cluster) if snapshot.fleet is not None else None
    return {p.name: p for p in spec.rollout.pools} if spec is not None else {}


def gantt(
    journal: Journal, now: datetime, pools: Mapping[str, PoolPolicy] | None = None
) -> Gantt | None:
    """Plan against what happened: each step as it ran (a running one up to now); a pool
    phase also gets its planned span (its batches at the plan's time per batch,
    ``phase_view.step_seconds``, from when its switch first opened), the progress marks it
    went through, and what is left as the ETA predicts it. A pool phase not started yet is
    drawn as the plan estimates it (``rollouts.timeline``, from ``pools``: the watched
    branch's rollout policy), one after another from the last bar's end. None before
    anything started."""
    started = [s.started_at for s in journal.steps if s.started_at is not None]
    if not started:
        return None
    origin = min(started)

    def at(t: datetime) -> float:
        return max((t - origin).total_seconds(), 0.0)

    bars: list[Bar] = []
    rows: list[str] = []
    ahead: list[Step] = []  # pool phases not started, drawn after what happened
    for s in journal.steps:
        if s.started_at is None:
            if s.pool and s.component is not None and pools and s.pool in pools:
                ahead.append(s)
            continue
        rows.append(s.name)
        phase = journal.phase(s.name)
        kind = {
            StepState.SUCCEEDED: "done",
            StepState.FAILED: "halted",
            StepState.RUNNING: "running",
        }.get(s.state, "done")
        if s.pool and phase.started_at is not None and phase.batch_percentage > 0:
            planned = timeline.progress_steps(phase.batch_percentage) * phase_view.step_seconds(
                phase, s.component
            )
            begin = at(phase.started_at)
            bars.append(Bar(s.name, "planned", begin, begin + planned, "plan"))
        end = at(s.finished_at or now)
        if phase.state is PhaseState.PAUSED:
            kind = "paused"
        elif phase.state is PhaseState.HALTED:
            kind = "halted"
        bars.append(Bar(s.name, kind, at(s.started_at), max(end, at(s.started_at) + 1), kind))
        for m in phase.marks:
            if m.progress > 0:
                bars.append(Bar(s.name, "mark", at(m.at), at(m.at), f"{m.progress}%"))
        shown = phase_view.view(phase, s, now) if s.pool else None
        running = shown is not None and not shown.finished and phase.state is not PhaseState.PAUSED
        if running and shown is not None and shown.eta_seconds:
            bars.append(Bar(s.name, "eta", at(now), at(now) + shown.eta_seconds, "ETA"))
    cursor = max(max((b.end for b in bars), default=0.0), at(now))
    for later in ahead:
        assert pools is not None and later.component is not None
        pool = pools[later.pool]
        ready = timeline.DEFAULT_READINESS_SECONDS.get(later.component, 60)
        estimate = timeline.phase_timeline(
            pool, later.component, pool.nodes, readiness_seconds=ready
        ).estimate_seconds
        if estimate <= 0:
            continue
        rows.append(later.name)
        bars.append(Bar(later.name, "planned", cursor, cursor + estimate, "plan"))
        cursor += estimate
    span = max(max(b.end for b in bars), 1.0)
    return Gantt(tuple(bars), span, _stamp(origin), tuple(rows))
