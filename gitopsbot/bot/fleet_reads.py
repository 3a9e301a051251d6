"""The fleet page's one read (docs/fleet-page.md): what ``gitopsbot status`` reads — each
cluster's records on the state branch through the same ``JournalStore``, and the fleet at the
watched branch's head for its waves and desired versions — as a ``core.views.fleet_view``
snapshot. Nothing here raises: a journal that does not parse, a branch that is absent or Git
failing is said in the snapshot, in place, and the page shows it."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from gitopsbot.bot import waves as bot_waves
from gitopsbot.bot.journal_store import JournalStore
from gitopsbot.core.fleet.model import Fleet
from gitopsbot.core.views.fleet_view import ClusterRecords, FleetSnapshot
from gitopsbot.errors import GitOpsBotError

T = TypeVar("T")

# What a read may meet: Git failing (GitOpsBotError), a file that does not parse
# (ValueError, KeyError from a journal's loader, UnicodeDecodeError is a ValueError).
UNREADABLE = (GitOpsBotError, ValueError, KeyError)


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def cluster_records(store: JournalStore, name: str) -> ClusterRecords:
    """One cluster's records, each read on its own: one unreadable file spoils only itself."""
    errors: list[str] = []

    def read(what: Callable[[str], T | None]) -> T | None:
        try:
            return what(name)
        except UNREADABLE as e:
            errors.append(_first_line(e))
            return None

    return ClusterRecords(
        name=name,
        current=read(store.current),
        queued=read(store.queued),
        not_loaded=read(store.load_failure),
        pass_failure=read(store.pass_failure),
        drift=read(store.drift),
        manual=read(store.manual_revision),
        error="; ".join(errors),
    )


def snapshot(
    store: JournalStore,
    fleet: Callable[[], Fleet | None],
    source: str = "",
) -> FleetSnapshot:
    """The state branch's records and the fleet now. ``fleet``: the fleet at the watched
    branch's head (None, or raising, when it cannot be read: the page then lists the
    clusters on the state branch without waves)."""
    where = source or f"state: {store.branch}"
    try:
        head = store.head()
        names = store.clusters() if head is not None else []
    except UNREADABLE as e:
        problem = f"the state branch {store.branch} cannot be read: {_first_line(e)}"
        return FleetSnapshot(where, store.branch, None, problem=problem)
    problems: list[str] = []
    try:
        found = fleet()
    except UNREADABLE as e:
        found = None
        problems.append(f"the fleet at the watched branch cannot be read: {_first_line(e)}")
    evidence = {}
    if head is not None and found is not None:
        try:
            evidence = bot_waves.read_evidence(store, found.clusters, store.version_of)
        except bot_waves.EvidenceUnreadable as e:
            problems.append(f"waves: the evidence cannot be read ({e})")
    return FleetSnapshot(
        source=where,
        state_branch=store.branch,
        state_head=head,
        clusters=tuple(cluster_records(store, n) for n in names),
        fleet=found,
        evidence=evidence,
        problem="; ".join(problems),
    )
