"""How an operation is shown to people: the pull-request comment, the status line, and
``gitopsbot status``. Text only; no secrets ever reach a journal, so none reach here."""

from __future__ import annotations

from datetime import datetime

from gitopsbot.core.forge.forge_types import CommitState
from gitopsbot.core.planning import gantt
from gitopsbot.core.records.journal import Journal, OperationStatus, PhaseState, StepState
from gitopsbot.core.rollouts import phase_view
from gitopsbot.core.rollouts.phase_view import ICON as ICON  # re-exported: status, live board
from gitopsbot.core.rollouts.phase_view import StepRow
from gitopsbot.core.rollouts.phase_view import step_rows as step_rows
from gitopsbot.core.rollouts.phase_view import step_times as step_times
from gitopsbot.core.waves import promotion_gate

APPLY_CONTEXT = "gitopsbot/apply"


def marker(journal: Journal) -> str:
    """One comment per operation on the pull request, edited at every transition."""
    return f"apply/{journal.cluster}/{journal.op_id}"


def commit_state(journal: Journal) -> CommitState:
    return {
        OperationStatus.SUCCEEDED: CommitState.SUCCESS,
        OperationStatus.FAILED: CommitState.FAILURE,
        OperationStatus.BLOCKED: CommitState.FAILURE,
        OperationStatus.SUPERSEDED: CommitState.ERROR,
    }.get(journal.status, CommitState.PENDING)


def headline(journal: Journal) -> str:
    """≤ 140 characters: forges cut status descriptions."""
    running = next((s for s in journal.steps if s.state is StepState.RUNNING), None)
    if journal.status is OperationStatus.QUEUED and journal.queue.queued_until:
        text = f"queued until {journal.queue.queued_until:%Y-%m-%d %H:%M %Z}"
    elif journal.status is OperationStatus.RUNNING and running is not None:
        text = f"running {running.name}"
    elif journal.status in (OperationStatus.FAILED, OperationStatus.BLOCKED):
        text = f"{journal.status}: {journal.failure}"
    else:
        text = str(journal.status)
    return f"{journal.kind} {text}"[:140]


def bar(progress: int, width: int = 20) -> str:
    filled = max(0, min(width, round(progress * width / 100)))
    return "█" * filled + "░" * (width - filled)


def change_lines(journal: Journal, now: datetime, seen: dict[str, str]) -> list[str]:
    """The lines of ``journal`` that changed since ``seen`` (updated): its status, and each
    step whose state or progress moved, with the batch summary. For logs and CI, where a
    redrawn screen would repeat everything at every refresh."""
    out = []
    head = f"{journal.cluster}/{journal.op_id}"
    status = f"{journal.kind} {journal.status}"
    if seen.get(head) != status:
        seen[head] = status
        out.append(f"{head}: {status}" + (f": {journal.failure}" if journal.failure else ""))
    for row in step_rows(journal, now):
        key = f"{head}/{row.name}"
        if seen.get(key) == row.change:
            continue
        first = key not in seen
        seen[key] = row.change
        was_held = seen.get(f"{key}/held", "")
        seen[f"{key}/held"] = row.held
        if first and row.state is StepState.PENDING and not row.held:
            continue  # not started: nothing happened yet
        text = f"{head}: {row.icon} {row.name} {row.state}"
        if row.summary:
            text += f" · {row.phase_state} · {row.summary}"
        elif row.times:
            text += f" {row.times}"
        if row.node_line:
            text += f" · {row.node_line}"
        text += "".join(f" · {note}" for note in row.batch_notes)
        if row.held and row.held != was_held:
            text += f" · paused: {row.held}"
        elif was_held and not row.held:
            text += " · resumed"
        out.append(text)
    return out


def head_lines(journal: Journal) -> list[str]:
    out = [
        f"{journal.cluster}: {journal.kind} {journal.op_id} — {journal.status}"
        + (f" (PR #{journal.pr_number})" if journal.pr_number else ""),
        f"  desired commit {journal.desired_sha[:12]}",
    ]
    if journal.queue.queued_until and journal.status is OperationStatus.QUEUED:
        out.append(f"  expected start {journal.queue.queued_until.isoformat()}")
    if journal.queue.superseded_by:
        out.append(f"  superseded by {journal.queue.superseded_by}")
    return out


def tail_lines(journal: Journal) -> list[str]:
    out = []
    if journal.failure:
        out.append(f"  failure: {journal.failure}")
    if journal.remediation:
        out.append(f"  remediation: {journal.remediation}")
    if journal.verdicts:
        out.append("  policy at apply:")
        out.extend(f"    {line}" for line in journal.verdicts)
    return out


def row_lines(rows: list[StepRow], nodes_at: datetime | None = None) -> list[str]:
    """Text lines of the steps; under a pool phase with per-node records, their counts, and
    with ``nodes_at`` (``gitopsbot status``) one line per node as of that moment."""
    out = []
    for row in rows:
        out.append(f"  {row.icon} {row.name:<32} {row.state:<9} {row.times}".rstrip())
        if row.progress is not None:
            out.append(f"      {bar(row.progress)} {row.phase_state} · {row.summary}")
        if row.node_line:
            out.append(f"      {row.node_line}")
        out.extend(f"      {note}" for note in row.batch_notes)
        if nodes_at is not None:
            out.extend(f"        {line}" for line in phase_view.node_table(row.nodes, nodes_at))
        if row.detail:
            out.append(f"      {row.detail}")
    return out


def lines(journal: Journal, now: datetime | None = None) -> list[str]:
    """Plain-text lines for a terminal."""
    return [*head_lines(journal), *row_lines(step_rows(journal, now)), *tail_lines(journal)]


def as_of(journal: Journal) -> datetime:
    """The journal's last recorded moment: the comment is written right after that save,
    so its elapsed times and ETAs are as of then, and the text is the same for the same
    journal (no clock here; a re-post of an unchanged journal changes nothing)."""
    times = [journal.created_at]
    for s in journal.steps:
        times += [t for t in (s.started_at, s.finished_at) if t is not None]
    for p in journal.phases:
        times += [t for t in (p.started_at, p.opened_at, p.last_progress_at) if t is not None]
    return max(times)


def markdown(journal: Journal) -> str:
    now = as_of(journal)
    rows = ["| step | state | started | detail |", "|---|---|---|---|"]
    for step in journal.steps:
        phase = journal.phase(step.name)
        detail = step.detail.replace("|", "\\|").replace("\n", " ")
        if phase.state is not PhaseState.PENDING:
            shown = phase_view.view(phase, step, now).summary(now)
            nodes = phase_view.node_line(phase_view.phase_nodes(phase))
            shown += f" · {nodes}" if nodes else ""
            notes = " · ".join(phase_view.batch_notes(phase))
            notes = notes.replace("|", "\\|").replace("\n", " ")
            shown += f" · {notes}" if notes else ""
            detail = f"{phase.state}: {shown}" + (f" — {detail}" if detail else "")
        when = step_times(step, now)
        rows.append(f"| `{step.name}` | {ICON[step.state]} {step.state} | {when} | {detail} |")
    head = f"### gitopsbot: {journal.kind} of `{journal.cluster}` — **{journal.status}**"
    extra = []
    if journal.status is OperationStatus.QUEUED and journal.queue.queued_until:
        extra.append(f"Expected start: {journal.queue.queued_until.isoformat()} (window).")
    if journal.status is OperationStatus.QUEUED and journal.queue.behind:
        extra.append(
            f"Then: `{journal.queue.behind[:12]}`, merged after it, waits until it starts "
            "(a rotation runs alone, R17)."
        )
    if journal.failure:
        extra.append(f"Failure: {journal.failure}")
    if journal.remediation:
        extra.append(f"Remediation: {journal.remediation}")
    if journal.status is OperationStatus.BLOCKED:
        extra.append(_blocked_note(journal))
    if journal.verdicts:
        listed = "\n".join(f"- `{line}`" for line in journal.verdicts)
        extra.append(f"Policy at apply:\n{listed}")
    chart = gantt.actual(journal, now)
    table = "\n".join(rows)
    as_said = f"Operation `{journal.op_id}`, as of {now:%Y-%m-%d %H:%M:%S} UTC"
    return "\n\n".join([head, as_said, *extra, table, *([chart] if chart else [])])


def _blocked_note(journal: Journal) -> str:
    """What a blocked operation waits for. Held only by waves, it starts by itself (the bot
    judges it again every pass, ``bot.held``): asking for a newer commit would be wrong."""
    held = promotion_gate.held_message(journal)
    if held and promotion_gate.held_only_by_waves(journal.verdicts):
        return (
            "Nothing was applied yet. Held by waves, not refused: it starts by itself, "
            "without a newer commit, as soon as its wave is due (the bot judges it again at "
            f"every pass). Waiting for: {held}."
        )
    return (
        "Nothing was applied. A newer commit for this cluster (a fix, an acknowledgement "
        "in `rollout.yaml`, or a revert) replaces this operation."
    )
