"""FakeEvents: the Kubernetes Events port in memory."""

from __future__ import annotations

import builtins
import copy
import hashlib
import time
from dataclasses import replace
from datetime import datetime
from typing import Any

from gitopsbot.core.notices import kube_events as ke
from gitopsbot.errors import (
    KubeInvalid,
    KubeNotFound,
)
from gitopsbot.ports.events import Events


class FakeEvents(Events):
    """Events in memory. ``add`` makes an object Events may regard (with a
    uid); ``fail(error)`` makes the next emits raise it; ``delay`` makes each emit take that
    long (a hung API server)."""

    def __init__(self, *, instance: str = "fake-replica") -> None:
        self.instance = instance
        self.uids: dict[tuple[str, str, str], str] = {}
        self.events: dict[tuple[str, str], dict[str, Any]] = {}  # (namespace, name) → body
        self.failures: list[Exception] = []
        self.delay = 0.0
        self.calls = 0
        self._series = ke.Series()
        self._last_nanos = 0

    def add(self, kind: str, name: str, namespace: str = "", uid: str = "") -> str:
        uid = uid or hashlib.sha256(f"{kind}/{namespace}/{name}".encode()).hexdigest()[:16]
        self.uids[(kind, namespace, name)] = uid
        return uid

    def fail(self, error: Exception, times: int = 1) -> None:
        self.failures.extend([error] * times)

    def close(self) -> None:
        pass

    def emit(self, regarding: ke.ObjectRef, event: ke.EventSpec, *, at: datetime) -> None:
        self.calls += 1
        if self.delay:
            time.sleep(self.delay)
        if self.failures:
            raise self.failures.pop(0)
        uid = self.uids.get((regarding.kind, regarding.namespace, regarding.name))
        if uid is None:
            raise KubeNotFound(f"{regarding.kind} {regarding.name}: HTTP 404 NotFound")
        ref = replace(regarding, uid=uid)
        ns = ref.event_namespace
        previous = self._series.previous(ref, event)
        if previous is not None and (ns, previous[0]) in self.events:
            name, count = previous
            self.events[(ns, name)].update(ke.series_patch(count + 1, at))
            self._series.posted(ref, event, name, count + 1)
            return
        self._last_nanos = max(ke.nanos_of(at), self._last_nanos + 1)
        name = ke.event_name(ref, self._last_nanos)
        body = ke.event_body(
            ref, event, name=name, at=at, controller=ke.REPORTING_CONTROLLER,
            instance=self.instance,
        )  # fmt: skip
        if len(event.note.encode()) > ke.NOTE_LIMIT:
            raise KubeInvalid(f"Event {name}: note: Too long: may not be more than 1024 bytes")
        self.events[(ns, name)] = body
        self._series.posted(ref, event, name)

    def recorded(self, regarding: ke.ObjectRef) -> builtins.list[ke.RecordedEvent]:
        found = [ke.recorded_of(copy.deepcopy(b)) for b in self.events.values()]
        found = [e for e in found if ke.is_about(e, regarding)]
        return sorted(found, key=lambda e: (e.event_time, e.name))
