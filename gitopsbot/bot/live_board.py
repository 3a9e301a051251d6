"""``gitopsbot run`` on a terminal: the operations it drives, redrawn in place.

Log lines scroll above the region as usual (the adapter keeps the region at the bottom);
the region shows, per cluster, the operation the bot last recorded (``Announcer.latest``)
with its steps, and for each pool phase the progress bar and the batch line
(``core.rollouts.phase_view``), refreshed every second so elapsed time and ETA move between
transitions. Finished operations stay until the next one starts.

It only reads what the announcer was told after each record, on its own thread: it never
touches the state branch or a cluster and cannot slow a pass.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping

from gitopsbot.bot import report
from gitopsbot.core.notices.happenings import Happening
from gitopsbot.core.records.journal import Journal
from gitopsbot.core.rollouts.phase_view import StepRow
from gitopsbot.ports.clock import Clock
from gitopsbot.ports.screen import Frame, Screen

REFRESH_SECONDS = 1.0
log = logging.getLogger(__name__)


def board_frame(journals: Mapping[str, Journal], clock: Clock) -> Frame:
    now = clock.now()
    out: list[str | list[StepRow]] = []
    for name in sorted(journals):
        j = journals[name]
        out.extend(report.head_lines(j))
        out.append(report.step_rows(j, now))
        out.extend(report.tail_lines(j))
    if not out:
        out.append("no operation yet: watching the fleet repository")
    return out


class LiveBoard:
    """Draws ``latest()`` on ``screen`` every REFRESH_SECONDS, and at once after each
    announced transition (it is a ``ports.observers.Listener``: a batch that lasts less than
    the refresh is still drawn), until ``stop``."""

    def __init__(
        self, latest: Callable[[], Mapping[str, Journal]], screen: Screen, clock: Clock
    ) -> None:
        self._latest = latest
        self._screen = screen
        self._clock = clock
        self._stop = threading.Event()
        self._nudge = threading.Event()
        self._thread = threading.Thread(target=self._run, name="live-board", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def happened(self, happening: Happening) -> None:
        self._nudge.set()  # on the pass's thread: only a flag, the drawing is the board's

    def stop(self) -> None:
        self._stop.set()
        self._nudge.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)

    def _run(self) -> None:
        while True:
            try:
                self._screen.draw(board_frame(self._latest(), self._clock))
            except Exception:  # a display never stops the bot: the log lines still flow
                log.exception("live view failed; the log goes on without it")
                return
            self._nudge.wait(REFRESH_SECONDS)
            self._nudge.clear()
            if self._stop.is_set():
                return
