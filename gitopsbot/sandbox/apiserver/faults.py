"""Fault injection, switchable at runtime: latency, error answers (5xx, 409, 429 with
Retry-After) and dropped watches, each for requests whose path matches a glob pattern.

    rule = server.faults.error(503, path="/api/v1/namespaces/*/secrets*", times=2)
    server.faults.latency(0.2, path="/apis/apps/*")
    server.faults.error(429, retry_after=1, method="PATCH")
    server.faults.drop_watches(path="*/pods*", after=0.5)
    server.faults.remove(rule); server.faults.clear()

``times`` limits how many requests a rule hits (None = until removed); ``rule.hits`` counts.

Out of process (e.g. against ``gitopsbot sandbox up``), the same rules are managed over HTTP;
paths under ``/sandbox/`` are never faulted::

    curl -X POST $URL/sandbox/v1/faults \\
         -d '{"action": "error", "status": 503, "path": "*/secrets*", "times": 2}'
    curl $URL/sandbox/v1/faults          # rules with their hits
    curl -X DELETE $URL/sandbox/v1/faults/1
    curl -X DELETE $URL/sandbox/v1/faults
"""

from __future__ import annotations

import fnmatch
import threading
from dataclasses import dataclass, field
from typing import Any


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
    id: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def describe(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": self.id,
            "action": self.action,
            "path": self.path,
            "method": self.method,
            "times": self.times,
            "hits": self.hits,
        }
        if self.action == "error":
            out.update(status=self.status, retryAfter=self.retry_after)
        elif self.action == "latency":
            out["seconds"] = self.seconds
        else:
            out["after"] = self.seconds
        return out

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
        self._next_id = 1

    def _add(self, rule: FaultRule) -> FaultRule:
        with self._lock:
            rule.id = self._next_id
            self._next_id += 1
            self._rules = [*self._rules, rule]
        return rule

    @property
    def rules(self) -> list[FaultRule]:
        return list(self._rules)

    def add_from_json(self, spec: dict[str, Any]) -> FaultRule:
        """A rule from its JSON form (the HTTP control API); ValueError names what is wrong."""
        if not isinstance(spec, dict):
            raise ValueError("a fault rule must be a JSON object")
        action = spec.get("action")
        common: dict[str, Any] = {"path": str(spec.get("path", "*")), "times": spec.get("times")}
        if action == "error":
            return self.error(
                int(spec.get("status", 0)),
                method=spec.get("method"),
                retry_after=spec.get("retryAfter"),
                **common,
            )
        if action == "latency":
            return self.latency(float(spec.get("seconds", 0)), method=spec.get("method"), **common)
        if action == "drop_watch":
            return self.drop_watches(after=float(spec.get("after", 0)), **common)
        raise ValueError(f"action must be error, latency or drop_watch, not {action!r}")

    def remove_id(self, rule_id: int) -> bool:
        with self._lock:
            before = len(self._rules)
            self._rules = [r for r in self._rules if r.id != rule_id]
            return len(self._rules) != before

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
        if path.startswith("/sandbox/"):
            return []
        return [r for r in self._rules if r._take(method, path, watch)]
