"""A job of ``gitopsbot run`` on its own daemon thread (the drift and proposal watches):
started once, its first round after a delay, told to stop by ``close``.

A subclass writes ``_run(first_after)``, its loop, waiting on ``_stop`` between rounds so that
``close`` ends it at once.
"""

from __future__ import annotations

import threading


class BackgroundJob:
    def __init__(self, name: str) -> None:
        self._name = name  # the thread's, in logs and dumps
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, first_after: float) -> None:
        if self._thread is not None:
            return
        self._thread = threading.Thread(
            target=self._run, args=(first_after,), name=self._name, daemon=True
        )
        self._thread.start()

    def close(self, timeout: float = 10.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def _run(self, first_after: float) -> None:
        raise NotImplementedError
