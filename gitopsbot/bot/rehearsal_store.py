"""Rehearsals on the state branch (docs/rehearsal.md).

- ``rehearsals/<cluster>/<desired-sha>.yaml``: what ``gitopsbot rehearse --record`` predicted
  for the fleet commit ``desired-sha`` (core.rehearsal.to_record);
- ``rehearsals/<cluster>/<desired-sha>.compared.yaml``: once the bot's operation for that
  commit has finished, the predicted rolling time per pool against the measured one.

``plan_section`` is what the plan comment appends when ``rehearsal.attachToPlan`` is on in
gitopsbot.yaml: the stored rehearsal of the pull request's head, compressed.

``compare_finished`` is what the bot calls when an operation finishes (succeeded or
failed: ``PassBase.compare_rehearsal``) and what ``rehearse --compare OP`` calls by hand:
nothing when the commit was never rehearsed (one read) or the comparison is already kept.
"""

from __future__ import annotations

from gitopsbot.bot.journal_store import JournalStore
from gitopsbot.core import rehearsal as rh
from gitopsbot.core.fleet.model import BotSettings
from gitopsbot.core.records.journal import Journal, OperationStatus


def save(store: JournalStore, rehearsal: rh.Rehearsal) -> str:
    """Commit the rehearsal's predictions; returns the state-branch commit."""
    path = rh.record_path(rehearsal.cluster, rehearsal.desired_sha)
    text = rh.dumps(rh.to_record(rehearsal))
    return store.commit(
        {path: text.encode()},
        f"{rehearsal.cluster}: rehearsal of {rehearsal.desired_sha[:12] or 'the work tree'}",
    )


def _read(store: JournalStore, path: str) -> dict[str, object] | None:
    head = store.repo.head(store.branch)
    data = None if head is None else store.repo.read(head, path)
    return None if data is None else rh.loads(data.decode("utf-8", "replace"))


def load(store: JournalStore, cluster: str, desired_sha: str) -> dict[str, object] | None:
    return _read(store, rh.record_path(cluster, desired_sha))


def compare_finished(
    store: JournalStore, journal: Journal, *, commit: bool = True, push: bool = True
) -> rh.MeasuredComparison | None:
    """The comparison for ``journal`` (a finished operation) when its desired commit was
    rehearsed; kept next to the rehearsal unless already there (or ``commit`` is off).
    ``push`` False leaves the commit in the mirror for the next push (the bot's pass)."""
    if journal.status not in (OperationStatus.SUCCEEDED, OperationStatus.FAILED):
        return None
    record = load(store, journal.cluster, journal.desired_sha)
    if record is None:
        return None
    found = rh.against_operation(record, journal)
    path = rh.comparison_path(journal.cluster, journal.desired_sha)
    if commit and _read(store, path) is None:
        store.commit(
            {path: rh.dumps(found.to_record()).encode()},
            f"{journal.cluster}: rehearsal vs {journal.op_id}",
            push=push,
        )
    return found


def plan_section(store: JournalStore, settings: BotSettings, cluster: str, sha: str) -> str:
    """The rehearsal section for the plan comment of ``cluster`` at ``sha``: "" when the
    team has not turned it on, or that commit was not rehearsed with ``--record``."""
    if not settings.rehearsal.attach_to_plan:
        return ""
    return rh.section(load(store, cluster, sha))
