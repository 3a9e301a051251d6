"""Waiting for the story's bot: the state branch fetched until its journal shows what a
test or the demo waits for."""

from __future__ import annotations

import time
from collections.abc import Callable

from gitopsbot.bot.journal_store import JournalStore
from gitopsbot.core.records.journal import Journal, OperationKind, OperationStatus
from gitopsbot.sandbox.story import STATE_BRANCH, StoryError, StoryWorld
from gitopsbot.sandbox.story_fleet import CLUSTER


def state_reader(world: StoryWorld) -> JournalStore:
    """A read-only view of the state branch through its own mirror."""
    return JournalStore(world.git_repo("reader"), branch=STATE_BRANCH, push=False)


def wait_for(
    world: StoryWorld,
    predicate: Callable[[JournalStore], Journal | None],
    *,
    what: str,
    timeout: float,
    interval: float = 0.5,
) -> Journal:
    """Fetch the state branch until ``predicate`` returns a journal."""
    reader = state_reader(world)
    deadline = time.monotonic() + timeout
    while True:
        reader.refresh()
        found = predicate(reader)
        if found is not None:
            return found
        if time.monotonic() > deadline:
            current = reader.current(CLUSTER)
            raise StoryError(
                f"timed out after {timeout:.0f}s waiting for {what}; the journal says: "
                + (f"{current.kind} {current.status} {current.failure}" if current else "nothing")
            )
        time.sleep(interval)


def finished_op(
    kind: OperationKind, *, after: str = ""
) -> Callable[[JournalStore], Journal | None]:
    """The current operation, once it is of ``kind`` and finished (not ``after``'s id)."""

    def check(store: JournalStore) -> Journal | None:
        j = store.current(CLUSTER)
        if j is None or j.kind is not kind or j.op_id == after:
            return None
        return j if j.status in (OperationStatus.SUCCEEDED, OperationStatus.FAILED) else None

    return check


def wait_baseline(world: StoryWorld, timeout: float = 60) -> None:
    reader = state_reader(world)
    deadline = time.monotonic() + timeout
    while reader.seen(CLUSTER) is None:
        if time.monotonic() > deadline:
            raise StoryError("the bot recorded no baseline")
        time.sleep(0.2)
        reader.refresh()
