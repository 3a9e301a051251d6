"""Fault injection, switchable at runtime: latency, error answers (5xx, 409, 429 with
Retry-After) and dropped watches, each for requests whose path matches a glob pattern.

    rule = server.faults.error(503, path="/api/v1/namespaces/*/secrets*", times=2)
    server.faults.latency(0.2, path="/apis/apps/*")
    server.faults.error(429, retry_after=1, method="PATCH")
    server.faults.drop_watches(path="*/pods*", after=0.5)
    server.faults.remove(rule); server.faults.clear()

``times`` limits how many requests a rule hits (None = until removed); ``rule.hits`` counts.
"""

from __future__ import annotations

import fnmatch
import threading
from dataclasses import dataclass, field


@dataclass(slots=True)
class FaultRule:
    action: str  # "latency" | "error" | "drop_watch"
    path: str = "*"
    method: str | None = None
    seconds: float = 0.0
    status: int = 0
    retry_after: int | None = None
    times: int | None = None
    hits: int = 0
    watch_only: bool = False
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def _take(self, method: str, path: str, watch: bool) -> bool:
        if self.method and self.method.upper() != method:
            return False
        if self.watch_only and not watch:
            return False
        if not fnmatch.fnmatchcase(path, self.path):
            return False
        with self._lock:
            if self.times is not None and self.hits >= self.times:
                return False
            self.hits += 1
        return True


class Faults:
    """The fault rules of one server; safe to change while requests are in flight."""

    def __init__(self) -> None:
        self._rules: list[FaultRule] = []
        self._lock = threading.Lock()

    def _add(self, rule: FaultRule) -> FaultRule:
        with self._lock:
            self._rules = [*self._rules, rule]
        return rule

    def latency(
        self,
        seconds: float,
        *,
        path: str = "*",
        method: str | None = None,
        times: int | None = None,
    ) -> FaultRule:
        return self._add(FaultRule("latency", path, method, seconds=seconds, times=times))

    def error(
        self,
        status: int,
        *,
        path: str = "*",
        method: str | None = None,
        times: int | None = None,
        retry_after: int | None = None,
    ) -> FaultRule:
        if status not in (409, 429) and not 500 <= status < 600:
            raise ValueError(f"fault status must be 409, 429 or 5xx, not {status}")
        return self._add(
            FaultRule("error", path, method, status=status, retry_after=retry_after, times=times)
        )

    def drop_watches(
        self, *, path: str = "*", after: float = 0.0, times: int | None = None
    ) -> FaultRule:
        """Watches on matching paths are cut (connection closed mid-stream) after ``after`` s."""
        return self._add(
            FaultRule("drop_watch", path, None, seconds=after, times=times, watch_only=True)
        )

    def remove(self, rule: FaultRule) -> None:
        with self._lock:
            self._rules = [r for r in self._rules if r is not rule]

    def clear(self) -> None:
        with self._lock:
            self._rules = []

    def matching(self, method: str, path: str, *, watch: bool) -> list[FaultRule]:
        return [r for r in self._rules if r._take(method, path, watch)]
