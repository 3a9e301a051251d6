"""The fleet page's wiring (docs/fleet-page.md): ``adapters.fleet_page`` over
``bot.fleet_reads``, reading what ``status`` reads from the running bot's own state branch."""

from __future__ import annotations

from gitopsbot.adapters.fleet_page import FleetPages
from gitopsbot.bot import fleet_reads
from gitopsbot.bot.reconciler import Reconciler
from gitopsbot.core.fleet.model import Fleet
from gitopsbot.core.views.fleet_view import FleetSnapshot


def fleet_pages(reconciler: Reconciler, watched: str) -> FleetPages:
    """The page over the bot's state branch (its mirror's head: the records it just wrote
    included, no fetch per request) and the fleet at the watched branch's head, parsed once
    per commit (``Reconciler.fleet_at``)."""
    store = reconciler.store

    def fleet() -> Fleet | None:
        head = reconciler.repo.head(watched)
        return None if head is None else reconciler.fleet_at(head)

    def read() -> FleetSnapshot:
        source = f"state: {store.branch} as gitopsbot run holds it (watching {watched})"
        return fleet_reads.snapshot(store, fleet, source)

    return FleetPages(read, reconciler.clock.now)
