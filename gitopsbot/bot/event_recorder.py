"""Kubernetes Events for every happening: a ``ports.observers.Listener`` (docs/events.md).

``happened`` only puts the happening on a bounded queue (the oldest is dropped, with a log
line, when it is full); one background thread turns each into Events
(``core.notices.kube_events``) on the cluster's TensorFusionCluster, and for a pool's happening on
its GPUPool too, and posts them through the cluster's ``ports.events.Events``. A failure (403,
404, 409, 5xx, a timeout) is logged once per cluster and kind of failure and the Event is
dropped: an Event never slows, fails or repeats a pass.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable
from datetime import datetime

from gitopsbot.core.fleet.model import ClusterSpec
from gitopsbot.core.notices import kube_events as ke
from gitopsbot.core.notices.happenings import Happening
from gitopsbot.errors import GitOpsBotError
from gitopsbot.ports.events import Events

log = logging.getLogger(__name__)

CAPACITY = 256


class EventRecorder:
    """``spec_for(cluster, sha)``: the cluster's spec at the operation's commit (for the
    TensorFusionCluster's and the GPUPools' names); ``events_for(spec)``: the cluster's Events
    client (built on first use, None: no Events for it); ``now``: the Events' time, when
    they are posted (a moment after the transition; the journal keeps its own time)."""

    def __init__(
        self,
        spec_for: Callable[[str, str], ClusterSpec | None],
        events_for: Callable[[ClusterSpec], Events | None],
        *,
        now: Callable[[], datetime],
        capacity: int = CAPACITY,
    ) -> None:
        self._spec_for = spec_for
        self._events_for = events_for
        self._now = now
        self._queue: deque[Happening] = deque()
        self._capacity = capacity
        self._cond = threading.Condition()
        self._busy = False
        self._closed = False
        self._told: set[tuple[str, str]] = set()  # (cluster, failure) already logged
        self.dropped = 0  # happenings dropped because the queue was full
        self._thread = threading.Thread(target=self._run, name="kube-events", daemon=True)
        self._thread.start()

    # -- the listener (the pass's thread) --------------------------------------------------

    def happened(self, happening: Happening) -> None:
        with self._cond:
            if self._closed:
                return
            if len(self._queue) >= self._capacity:
                lost = self._queue.popleft()
                self.dropped += 1
                log.warning(
                    "%s: Events queue full (%d): dropped %s of %s",
                    lost.cluster, self._capacity, lost.reason, lost.op_id,
                )  # fmt: skip
            self._queue.append(happening)
            self._cond.notify_all()

    # -- lifecycle -------------------------------------------------------------------------

    def flush(self, timeout: float = 10.0) -> bool:
        """Wait until every queued happening was posted (or dropped); False on timeout."""
        with self._cond:
            return self._cond.wait_for(lambda: not self._queue and not self._busy, timeout)

    def close(self, timeout: float = 5.0) -> None:
        """Post what is queued for at most ``timeout`` seconds, then stop."""
        self.flush(timeout)
        with self._cond:
            self._closed = True
            self._queue.clear()
            self._cond.notify_all()
        self._thread.join(timeout)

    # -- the background thread -------------------------------------------------------------

    def _run(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: bool(self._queue) or self._closed)
                if self._closed:
                    return
                happening = self._queue.popleft()
                self._busy = True
            try:
                self._post(happening)
            except Exception:  # never let the thread die
                log.exception("%s: posting an Event failed", happening.cluster)
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()

    def _post(self, happening: Happening) -> None:
        cluster = happening.cluster
        try:
            spec = self._spec_for(cluster, happening.desired_sha)
            events = self._events_for(spec) if spec is not None else None
        except GitOpsBotError as e:
            self._once(cluster, type(e).__name__, f"no Events: {e}")
            return
        if events is None or spec is None:
            return
        event = ke.event_of(happening)
        at = self._now()
        for ref in ke.regarding(happening, spec):
            try:
                events.emit(ref, event, at=at)
            except GitOpsBotError as e:
                self._once(cluster, type(e).__name__, f"Event {event.reason} dropped: {e}")

    def _once(self, cluster: str, failure: str, message: str) -> None:
        key = (cluster, failure)
        if key in self._told:
            log.debug("%s: %s", cluster, message)
            return
        self._told.add(key)
        log.warning("%s: %s (further %s failures are logged at debug)", cluster, message, failure)
