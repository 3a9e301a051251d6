"""What a long ``gitopsbot run`` says at the default level: passes and step transitions.

A listener on the announcer (``bot.announcer``, wired in ``gitopsbot.app``), logging to
``gitopsbot.progress``:

- each happening (``core.notices.happenings``): its ``summary()``, at WARNING when it is one
  (``Happening.warning``: blocked, halted, a failed step or operation, a rollback), else INFO;
- ``pass started`` and ``pass finished: ACTION DETAIL (1.2 s)`` per cluster, at INFO, except
  while nothing changes: a cluster that stays idle, or waits for the same thing (a window,
  the controller) pass after pass, would add two lines every poll interval that say nothing.
  A pass that finishes as the one before it (same action and detail) is at DEBUG, and so is
  the start of the pass after it. A failed pass is at INFO: the scheduler (or ``run --once``)
  reports the error itself.

Lines are emitted on the pass's thread, inside its ``bot.log_context``: each carries the
cluster, and a happening's line carries its own operation and step.
"""

from __future__ import annotations

import logging
import threading

from gitopsbot.core.notices.happenings import Happening

log = logging.getLogger("gitopsbot.progress")

IDLE = "idle"


class ProgressLog:
    """``ports.observers.Listener``, ``PassListener`` and ``PassStartListener``."""

    def __init__(self, logger: logging.Logger = log) -> None:
        self._log = logger
        # cluster → its last pass's (action, detail) (action "" failed), and whether that pass
        # repeated the one before it.
        self._last: dict[str, tuple[str, str]] = {}
        self._repeated: dict[str, bool] = {}
        self._lock = threading.Lock()

    def happened(self, happening: Happening) -> None:
        level = logging.WARNING if happening.warning else logging.INFO
        fields = {"cluster": happening.cluster, "operation": happening.op_id}
        if happening.step:
            fields["step"] = happening.step
        self._log.log(level, "%s", happening.summary(), extra=fields)

    def pass_started(self, cluster: str) -> None:
        with self._lock:
            last = self._last.get(cluster)
            repeated = self._repeated.get(cluster, False)
        # Nothing was going on: the finish line tells if that changed.
        quiet = last is not None and (last[0] == IDLE or repeated)
        self._log.log(logging.DEBUG if quiet else logging.INFO, "pass started")

    def pass_finished(
        self, cluster: str, *, action: str, detail: str, error: str, seconds: float
    ) -> None:
        with self._lock:
            last = self._last.get(cluster)
            self._last[cluster] = (action, detail)
            same = not error and last == (action, detail)
            self._repeated[cluster] = same
        took = f"({seconds:.1f} s)"
        if error:
            self._log.info("pass failed %s: %s", took, error)
            return
        level = logging.DEBUG if same else logging.INFO
        what = f"{action} {detail}".strip()
        self._log.log(level, "pass finished: %s %s", what, took)
