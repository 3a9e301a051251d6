"""LeaseKeeper over the fake port with a hand-driven clock: two replicas, acquire, renew,
expiry, takeover, renew deadline, release. (tests/leases/test_lease_processes.py does the
same with real processes against real servers.)"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from gitopsbot.bot.lease_keeper import LeaseKeeper, LeaseTiming
from gitopsbot.errors import KubeConflict, KubeServerError
from gitopsbot.testing import FakeLeases

NS, NAME = "gitopsbot", "shard-0"
TIMING = LeaseTiming(duration_seconds=15, renew_deadline_seconds=10, retry_period_seconds=2)


class Clock:
    """Wall and monotonic time moved by hand, together (``skew`` shifts the wall only)."""

    def __init__(self, skew: float = 0.0) -> None:
        self.mono = 1000.0
        self.skew = skew

    def now(self) -> datetime:
        return datetime(2026, 12, 3, 12, tzinfo=UTC) + timedelta(seconds=self.mono + self.skew)

    def monotonic(self) -> float:
        return self.mono

    def sleep(self, seconds: float) -> None:
        self.mono += seconds


@pytest.fixture
def leases() -> FakeLeases:
    return FakeLeases()


def keeper(leases: FakeLeases, identity: str, clock: Clock) -> LeaseKeeper:
    return LeaseKeeper(leases, NS, NAME, identity, clock, TIMING)


def test_one_acquires_the_other_waits_while_it_renews(leases: FakeLeases) -> None:
    clock = Clock()
    a, b = keeper(leases, "a", clock), keeper(leases, "b", clock)
    assert a.try_acquire().held and a.held
    for _ in range(20):  # 40 s: far beyond the duration, but renewed all along
        clock.sleep(2)
        assert a.renew().held
        state = b.try_acquire()
        assert not state.held and not b.held and state.holder == "a"
    stored = leases.read(NS, NAME)
    assert stored is not None and stored.spec.transitions == 0


def test_takeover_only_after_the_duration_and_the_old_holder_learns_it_lost(
    leases: FakeLeases,
) -> None:
    clock = Clock()
    a, b = keeper(leases, "a", clock), keeper(leases, "b", clock)
    a.try_acquire()
    assert not b.try_acquire().held  # b sees a's record from now on
    last = leases.read(NS, NAME)
    assert last is not None and last.spec.renew_time is not None
    # a stops renewing (hung, partitioned). Before the duration has passed b waits.
    clock.sleep(10)
    assert not a.held  # a's own deadline (10 s) passed: it stopped counting on the lease
    clock.sleep(5)
    assert not b.try_acquire().held  # exactly at renewTime + duration: still a's
    clock.sleep(0.001)
    state = b.try_acquire()
    assert state.held and state.reason == "acquired"
    now = leases.read(NS, NAME)
    assert now is not None and now.spec.holder == "b" and now.spec.transitions == 1
    assert now.spec.acquire_time is not None
    assert now.spec.acquire_time > last.spec.renew_time + timedelta(seconds=15)
    # a comes back and tries to renew: it is told it lost, and does not take the lease back.
    lost = a.renew()
    assert lost.lost and not lost.held and not a.held


def test_a_holder_whose_renews_fail_stops_at_the_renew_deadline(leases: FakeLeases) -> None:
    clock = Clock()
    a = keeper(leases, "a", clock)
    a.try_acquire()
    leases.fail("replace", KubeServerError("5xx"), times=100)
    clock.sleep(2)
    assert a.renew().held  # a failed renew within the deadline: still ours
    clock.sleep(7.999)
    assert a.held
    clock.sleep(0.001)
    assert not a.held
    state = a.renew()
    assert state.lost and not state.held


def test_a_conflicting_renew_is_retried_and_the_lease_kept(leases: FakeLeases) -> None:
    clock = Clock()
    a = keeper(leases, "a", clock)
    a.try_acquire()
    leases.fail("replace", KubeConflict("409"))
    clock.sleep(2)
    state = a.renew()
    assert state.held and "another replica wrote" in state.reason
    clock.sleep(2)
    assert a.renew().reason == "renewed"


def test_a_clock_running_ahead_does_not_take_a_live_lease(leases: FakeLeases) -> None:
    clock, ahead = Clock(), Clock(skew=3600)
    a, b = keeper(leases, "a", clock), keeper(leases, "b", ahead)
    a.try_acquire()
    for _ in range(10):
        clock.sleep(2)
        ahead.sleep(2)
        assert a.renew().held
        assert not b.try_acquire().held  # every renewTime looks an hour old to b


def test_a_lease_expired_long_ago_is_still_watched_for_one_duration(leases: FakeLeases) -> None:
    """client-go's observedTime: a replica that just started does not trust an old renewTime
    against its own clock; it takes over once it has seen the record unchanged that long."""
    clock = Clock()
    keeper(leases, "a", clock).try_acquire()
    clock.sleep(3600)
    b = keeper(leases, "b", clock)
    assert not b.try_acquire().held
    clock.sleep(15.001)
    assert b.try_acquire().held


def test_release_hands_over_at_once(leases: FakeLeases) -> None:
    clock = Clock()
    a, b = keeper(leases, "a", clock), keeper(leases, "b", clock)
    a.try_acquire()
    assert not b.try_acquire().held
    assert a.release() and not a.held
    assert not a.release()  # nothing left to release
    state = b.try_acquire()
    assert state.held
    stored = leases.read(NS, NAME)
    assert stored is not None and stored.spec.holder == "b" and stored.spec.transitions == 1


def test_a_racing_acquire_has_one_winner(leases: FakeLeases) -> None:
    clock = Clock()
    a, b = keeper(leases, "a", clock), keeper(leases, "b", clock)
    # b's create lands between a's read and a's create.
    original_create = leases.create

    def create_after_b(namespace: str, name: str, spec: object) -> object:
        leases.create = original_create  # type: ignore[method-assign]
        assert b.try_acquire().held
        return original_create(namespace, name, spec)  # type: ignore[arg-type]

    leases.create = create_after_b  # type: ignore[method-assign]
    state = a.try_acquire()
    assert not state.held and "another replica wrote" in state.reason
    stored = leases.read(NS, NAME)
    assert stored is not None and stored.spec.holder == "b"


def test_a_deleted_lease_is_lost(leases: FakeLeases) -> None:
    clock = Clock()
    a = keeper(leases, "a", clock)
    a.try_acquire()
    leases.delete(NS, NAME)
    assert a.renew().lost


def test_timings_must_leave_room_for_the_others() -> None:
    with pytest.raises(ValueError):
        LeaseTiming(duration_seconds=10, renew_deadline_seconds=10)
    with pytest.raises(ValueError):
        LeaseTiming(duration_seconds=15, renew_deadline_seconds=2, retry_period_seconds=2)


def test_a_renew_that_returns_after_the_deadline_does_not_count(leases: FakeLeases) -> None:
    clock = Clock()
    a = keeper(leases, "a", clock)
    a.try_acquire()
    original_replace = leases.replace

    def slow_replace(current: Any, spec: Any) -> Any:
        clock.sleep(TIMING.renew_deadline_seconds)  # a request hung that long, then succeeded
        return original_replace(current, spec)

    leases.replace = slow_replace  # type: ignore[method-assign]
    clock.sleep(2)
    state = a.renew()
    assert state.lost and not a.held
    leases.replace = original_replace  # type: ignore[method-assign]
    # The Lease is still ours on the server: acquiring again keeps its history.
    assert a.try_acquire().held
    stored = leases.read(NS, NAME)
    assert stored is not None and stored.spec.transitions == 0
