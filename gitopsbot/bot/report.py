"""How an operation is shown to people: the pull-request comment, the status line, and
``gitopsbot status``. Text only; no secrets ever reach a journal, so none reach here."""

from __future__ import annotations

from datetime import datetime

from gitopsbot.core import rollout
from gitopsbot.core.forge_types import CommitState
from gitopsbot.core.journal import Journal, OperationStatus, PhaseState, StepState

ICON = {
    StepState.PENDING: "·",
    StepState.RUNNING: "▶",
    StepState.SUCCEEDED: "✓",
    StepState.FAILED: "✗",
    StepState.SKIPPED: "–",
}

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


def lines(journal: Journal, now: datetime | None = None) -> list[str]:
    """Plain-text lines for a terminal."""
    out = [
        f"{journal.cluster}: {journal.kind} {journal.op_id} — {journal.status}"
        + (f" (PR #{journal.pr_number})" if journal.pr_number else ""),
        f"  desired commit {journal.desired_sha[:12]}",
    ]
    if journal.queue.queued_until and journal.status is OperationStatus.QUEUED:
        out.append(f"  expected start {journal.queue.queued_until.isoformat()}")
    if journal.queue.superseded_by:
        out.append(f"  superseded by {journal.queue.superseded_by}")
    for step in journal.steps:
        text = f"  {ICON[step.state]} {step.name:<32} {step.state}"
        phase = journal.phase(step.name)
        if phase.state is not PhaseState.PENDING:
            text += f"  {bar(phase.progress)} {phase.progress:>3}% {phase.state}"
            if now is not None and phase.started_at is not None:
                text += f" open {int(rollout.active_seconds(phase, now))}s"
        if step.detail:
            text += f"  {step.detail}"
        out.append(text)
    if journal.failure:
        out.append(f"  failure: {journal.failure}")
    if journal.remediation:
        out.append(f"  remediation: {journal.remediation}")
    if journal.verdicts:
        out.append("  policy at apply:")
        out.extend(f"    {line}" for line in journal.verdicts)
    return out


def markdown(journal: Journal) -> str:
    rows = ["| step | state | detail |", "|---|---|---|"]
    for step in journal.steps:
        phase = journal.phase(step.name)
        detail = step.detail.replace("|", "\\|").replace("\n", " ")
        if phase.state is not PhaseState.PENDING:
            detail = f"{phase.progress}% ({phase.state}) {detail}"
        rows.append(f"| `{step.name}` | {ICON[step.state]} {step.state} | {detail} |")
    head = f"### gitopsbot: {journal.kind} of `{journal.cluster}` — **{journal.status}**"
    extra = []
    if journal.status is OperationStatus.QUEUED and journal.queue.queued_until:
        extra.append(f"Expected start: {journal.queue.queued_until.isoformat()} (window).")
    if journal.failure:
        extra.append(f"Failure: {journal.failure}")
    if journal.remediation:
        extra.append(f"Remediation: {journal.remediation}")
    if journal.status is OperationStatus.BLOCKED:
        extra.append(
            "Nothing was applied. A newer commit for this cluster (a fix, an acknowledgement "
            "in `rollout.yaml`, or a revert) replaces this operation."
        )
    if journal.verdicts:
        listed = "\n".join(f"- `{line}`" for line in journal.verdicts)
        extra.append(f"Policy at apply:\n{listed}")
    return "\n\n".join([head, f"Operation `{journal.op_id}`", *extra, "\n".join(rows)])
