"""Holding one named Lease: acquire it, keep renewing it, give it up, and know when it is lost.

The rules of who may write what are ``core.replicas.lease``'s; this module reads, asks the core, and
writes through the ``Leases`` port. It never loops or sleeps: the caller calls
``try_acquire`` until it holds the Lease, then ``renew`` every ``retry_period_seconds``, and
checks ``held`` before each piece of work the Lease guards.

Timing is client-go's: the holder counts itself holder only until ``renew_deadline_seconds``
after its last successful renew *began* (its own monotonic clock), and the deadline is shorter
than the duration, so it has stopped before any other replica may take over, even if its
renews failed silently. A renew that fails (conflict, timeout, 5xx) is retried on the next
call until that deadline; a Lease found held by another, or gone, is lost at once.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass

from gitopsbot.core.replicas.lease import Action, LeaseRecord, decide, released
from gitopsbot.errors import KubeConflict, KubeError
from gitopsbot.ports.clock import Clock
from gitopsbot.ports.leases import Leases

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class LeaseTiming:
    """client-go's duration (15 s) and renew deadline (10 s); a 4 s retry period (client-go:
    2 s) so that 3 replicas and 12 shard Leases write (3 + 12) / 4 = 3.75 Leases/s in all
    (docs/leases.md#how-many-writes), still two renews before the deadline."""

    duration_seconds: int = 15
    renew_deadline_seconds: float = 10.0
    retry_period_seconds: float = 4.0

    def __post_init__(self) -> None:
        if not 0 < self.retry_period_seconds < self.renew_deadline_seconds:
            raise ValueError("the retry period must be positive and below the renew deadline")
        if self.renew_deadline_seconds >= self.duration_seconds:
            raise ValueError("the renew deadline must be shorter than the lease duration")


@dataclass(frozen=True, slots=True)
class LeaseState:
    """The outcome of one call. ``holder`` as last read ("" nobody or unknown); ``lost``: we
    held the Lease before this call and no longer do; ``reason`` one line for a log."""

    held: bool
    holder: str
    reason: str
    lost: bool = False


class LeaseKeeper:
    def __init__(
        self,
        leases: Leases,
        namespace: str,
        name: str,
        identity: str,
        clock: Clock,
        timing: LeaseTiming = LeaseTiming(),
        labels: Mapping[str, str] | None = None,
    ) -> None:
        if not identity:
            raise ValueError("a lease identity must not be empty")
        self._leases = leases
        self._namespace = namespace
        self._name = name
        self.identity = identity
        self._clock = clock
        self.timing = timing
        self.name = name
        self._labels = dict(labels or {})  # set when this keeper creates the Lease
        self._valid_until: float | None = None  # monotonic; None while not holding
        # The record last seen and since when (monotonic): client-go's observedTime.
        self._seen_version = ""
        self._seen_since = 0.0

    @property
    def held(self) -> bool:
        """Whether work guarded by the Lease may go on now."""
        return self._valid_until is not None and self._clock.monotonic() < self._valid_until

    def observe(self, current: LeaseRecord | None) -> float | None:
        """Note the Lease as read by someone else (a list of every Lease each period), so the
        time it has been seen unchanged counts from then: a replica that watches a Lease all
        along takes it over one duration after its holder stopped, not two. Returns the
        seconds it has been seen unchanged (None: absent), for
        ``core.replicas.lease.is_expired``."""
        return self._unchanged_for(current, self._clock.monotonic())

    def try_acquire(self) -> LeaseState:
        """Take the Lease if it is absent, released or expired (renew it if ours)."""
        return self._attempt(renewing=self._valid_until is not None)

    def renew(self) -> LeaseState:
        """Renew the Lease we hold; ``lost`` when it is no longer ours."""
        if self._valid_until is None:
            return LeaseState(False, "", "not held")
        if not self.held:
            return self._lose("renew deadline passed before this renew", "")
        return self._attempt(renewing=True)

    def release(self) -> bool:
        """Give the Lease up on a clean stop, so another replica takes over at once rather than
        after the duration. True when it was released; False when it was not ours (any more)
        or the write failed (it then simply expires)."""
        if self._valid_until is None:
            return False
        self._valid_until = None  # guarded work stops before the write, whatever happens
        try:
            current = self._leases.read(self._namespace, self._name)
            if current is None or current.spec.holder != self.identity:
                return False
            self._leases.replace(current, released(current.spec, self._clock.now()))
        except KubeError as e:
            log.warning("lease %s: release failed, it will expire instead: %s", self._ref, e)
            return False
        log.info("lease %s: released by %s", self._ref, self.identity)
        return True

    # -- one read, one decision, at most one write -----------------------------------------

    def _attempt(self, *, renewing: bool) -> LeaseState:
        began = self._clock.monotonic()
        now = self._clock.now()
        try:
            current = self._leases.read(self._namespace, self._name)
        except KubeError as e:
            return self._failed(f"read failed: {e}", "")
        if renewing and (current is None or current.spec.holder != self.identity):
            # Someone else held it meanwhile: carrying on could overlap their work.
            holder = current.spec.holder if current is not None else ""
            return self._lose(f"now held by {holder!r}" if holder else "the lease is gone", holder)
        decision = decide(
            current.spec if current is not None else None,
            self.identity,
            now,
            self.timing.duration_seconds,
            unchanged_for=self._unchanged_for(current, began),
        )
        if decision.action is Action.WAIT or decision.spec is None:
            end = decision.expires_at
            until = f" until {end.isoformat(timespec='milliseconds')} at least" if end else ""
            return LeaseState(False, decision.holder, f"held by {decision.holder}{until}")
        try:
            if current is None:
                if self._labels:
                    self._leases.create(self._namespace, self._name, decision.spec, self._labels)
                else:
                    self._leases.create(self._namespace, self._name, decision.spec)
            else:
                self._leases.replace(current, decision.spec)
        except KubeConflict:
            return self._failed("another replica wrote the lease first", decision.holder)
        except KubeError as e:
            return self._failed(f"write failed: {e}", decision.holder)
        self._valid_until = began + self.timing.renew_deadline_seconds
        if not self.held:  # the write itself outlasted the deadline: too late to count on
            return self._lose("the write took longer than the renew deadline", self.identity)
        if decision.action is Action.RENEW and renewing:
            return LeaseState(True, self.identity, "renewed")
        log.info("lease %s: acquired by %s (was %r)", self._ref, self.identity, decision.holder)
        return LeaseState(True, self.identity, "acquired")

    def _unchanged_for(self, current: LeaseRecord | None, at: float) -> float | None:
        if current is None:
            return None
        if current.resource_version != self._seen_version:
            self._seen_version, self._seen_since = current.resource_version, at
        return at - self._seen_since

    def _failed(self, reason: str, holder: str) -> LeaseState:
        if self._valid_until is None:
            return LeaseState(False, holder, reason)
        if self.held:
            return LeaseState(True, self.identity, f"not renewed yet: {reason}")
        return self._lose(f"renew deadline passed: {reason}", holder)

    def _lose(self, reason: str, holder: str) -> LeaseState:
        self._valid_until = None
        log.warning("lease %s: lost by %s: %s", self._ref, self.identity, reason)
        return LeaseState(False, holder, f"lost: {reason}", lost=True)

    @property
    def _ref(self) -> str:
        return f"{self._namespace}/{self._name}"
