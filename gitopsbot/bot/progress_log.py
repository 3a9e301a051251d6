"""What a long ``gitopsbot run`` says at the default level: passes and step transitions.

A listener on the announcer (``bot.announcer``, wired in ``gitopsbot.app``), logging to
``gitopsbot.progress``:

- each happening (``core.happenings``): its ``summary()``, at WARNING when it is one
  (``Happening.warning``: blocked, halted, a failed step or operation, a rollback), else INFO;
- ``pass started`` and ``pass finished: ACTION DETAIL (1.2 s)`` per cluster, at INFO, except
  while the cluster stays idle: every poll interval would add two lines that say nothing. A
  pass that starts after an idle one says so at DEBUG; an idle pass is at INFO only when it
  is the first (after a start) or the first after a pass that did something. A failed pass
  is at INFO: the scheduler (or ``run --once``) reports the error itself.

Lines are emitted on the pass's thread, inside its ``bot.log_context``: each carries the
cluster, and a happening's line carries its own operation and step.
"""

from __future__ import annotations

import logging
import threading

from gitopsbot.core.happenings import Happening

log = logging.getLogger("gitopsbot.progress")

IDLE = "idle"


class ProgressLog:
    """``ports.observers.Listener``, ``PassListener`` and ``PassStartListener``."""

    def __init__(self, logger: logging.Logger = log) -> None:
        self._log = logger
        self._last: dict[str, str] = {}  # cluster → its last pass's action ("" failed)
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
        quiet = last == IDLE  # nothing was going on: the finish line tells if that changed
        self._log.log(logging.DEBUG if quiet else logging.INFO, "pass started")

    def pass_finished(
        self, cluster: str, *, action: str, detail: str, error: str, seconds: float
    ) -> None:
        with self._lock:
            last = self._last.get(cluster)
            self._last[cluster] = action
        took = f"({seconds:.1f} s)"
        if error:
            self._log.info("pass failed %s: %s", took, error)
            return
        level = logging.DEBUG if action == IDLE and last == IDLE else logging.INFO
        what = f"{action} {detail}".strip()
        self._log.log(level, "pass finished: %s %s", what, took)
