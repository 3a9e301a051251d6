"""Kubernetes Events about the objects of a cluster (``events.k8s.io/v1``): what
``bot.event_recorder`` posts for each happening. ``core.notices.kube_events`` says what an Event
contains; an implementation posts it, one request at a time, with a short timeout and no
retries (an Event is worth less than the pass it tells about)."""

from __future__ import annotations

from datetime import datetime
from typing import Protocol

from gitopsbot.core.notices.kube_events import EventSpec, ObjectRef, RecordedEvent


class Events(Protocol):
    def emit(self, regarding: ObjectRef, event: EventSpec, *, at: datetime) -> None:
        """Tell ``event`` about ``regarding`` (its uid is read from the server, remembered a
        while). The same Event again (object, reason, action, type and note) counts up the
        series of the one posted before instead of posting another. Raises ``KubeNotFound``
        when the object does not exist, ``KubeForbidden``, ``KubeInvalid``,
        ``KubeServerError`` (5xx, transport error, timeout)."""
        ...

    def recorded(self, regarding: ObjectRef) -> list[RecordedEvent]:
        """The Events about ``regarding`` (whoever reported them), oldest first."""
        ...

    def close(self) -> None: ...
