"""Tells the listeners what each recorded transition means (``core.notices.happenings.changes``).

The announcer remembers the journal it last announced per cluster. After a restart it knows
nothing: the reconciler calls ``seen`` with the running operation it re-posts, so a restart
does not tell the steps already told again; a transition recorded just before a kill and
never announced is lost (at most once, see ``ports.observers``).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable

from gitopsbot.core.notices.happenings import Happening, changes
from gitopsbot.core.records.journal import Journal
from gitopsbot.ports.observers import Listener, PassListener, PassStartListener

log = logging.getLogger(__name__)


class Announcer:
    def __init__(
        self, listeners: Iterable[Listener] = (), pass_listeners: Iterable[PassListener] = ()
    ) -> None:
        self.listeners = list(listeners)
        self.pass_listeners = list(pass_listeners)
        self._last: dict[str, Journal] = {}
        self._lock = threading.Lock()  # passes of several clusters run side by side

    def seen(self, journal: Journal) -> None:
        """``journal`` is what the listeners already know (re-posted after a restart)."""
        with self._lock:
            self._last[journal.cluster] = journal

    def latest(self) -> dict[str, Journal]:
        """Each cluster's journal as last announced (or seen): what ``run``'s live view
        draws (``bot.live_board``)."""
        with self._lock:
            return dict(self._last)

    def announce(self, journal: Journal) -> tuple[Happening, ...]:
        """Tell every listener what changed since the journal last announced; returns it."""
        with self._lock:
            before = self._last.get(journal.cluster)
            self._last[journal.cluster] = journal
        happenings = changes(before, journal)
        for happening in happenings:
            for listener in self.listeners:
                try:
                    listener.happened(happening)
                except Exception:  # a listener never fails a pass
                    log.exception(
                        "%s: listener %s failed", journal.cluster, type(listener).__name__
                    )
        return happenings

    def pass_started(self, cluster: str) -> None:
        for listener in self.pass_listeners:
            if not isinstance(listener, PassStartListener):
                continue
            try:
                listener.pass_started(cluster)
            except Exception:
                log.exception("%s: pass listener %s failed", cluster, type(listener).__name__)

    def pass_finished(
        self, cluster: str, *, action: str, detail: str, error: str, seconds: float
    ) -> None:
        for listener in self.pass_listeners:
            try:
                listener.pass_finished(
                    cluster, action=action, detail=detail, error=error, seconds=seconds
                )
            except Exception:
                log.exception("%s: pass listener %s failed", cluster, type(listener).__name__)
