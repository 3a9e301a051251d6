"""Failures a test injects into a fake: the next ``times`` calls of an operation raise ``error``."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class _Injected:
    error: Exception
    times: int


class InjectedFailures:
    """The ``fail(operation, error, times)`` of FakeCluster, FakeHelm and FakeLeases: per
    operation a queue of errors, each raised by the next ``times`` calls, in the order given."""

    def __init__(self) -> None:
        self._queues: dict[str, list[_Injected]] = {}

    def add(self, operation: str, error: Exception, times: int) -> None:
        self._queues.setdefault(operation, []).append(_Injected(error, times))

    def raise_next(self, operation: str) -> None:
        """Raise the error queued first for ``operation``, if any."""
        queue = self._queues.get(operation)
        if queue:
            injected = queue[0]
            injected.times -= 1
            if injected.times <= 0:
                queue.pop(0)
            raise injected.error
