"""The drift checks' schedule (``core.drift.schedule``, #29): each cluster at its own offset
in ``drift.interval``, stable across restarts; never the whole fleet at once, neither at
start, nor after a restart, nor when a cluster is added."""

from __future__ import annotations

from collections import Counter

from gitopsbot.core.drift import schedule as ds

HOUR = 3600.0
START = 1_800_000_000.0  # some instant, seconds since the epoch
FLEET = [f"cluster-{i:04d}" for i in range(1000)]


def busiest_second(times: list[float]) -> int:
    return max(Counter(int(t) for t in times).values())


def rounds(schedule: dict[str, float], until: float) -> list[float]:
    """Every check instant the schedule makes before ``until``, as the watch runs them."""
    made: list[float] = []
    while True:
        now = min(schedule.values())
        if now >= until:
            return made
        due = ds.due(schedule, now)
        made += [now] * len(due)
        schedule = ds.after_check(schedule, due, HOUR, now)


def test_the_fleet_is_spread_over_the_interval_not_checked_at_once() -> None:
    schedule = ds.plan(FLEET, {}, interval=HOUR, now=START, not_before=START + 60)
    times = list(schedule.values())
    assert all(START + 60 <= t < START + 60 + HOUR for t in times)
    # 1,000 clusters over 3,600 s: a handful in the busiest second, not 1,000 at once.
    assert busiest_second(times) <= 6
    # And every tenth of the interval holds about a tenth of the fleet.
    tenths = Counter(int((t - START - 60) // (HOUR / 10)) for t in times)
    assert all(60 <= n <= 140 for n in tenths.values()), tenths


def test_each_cluster_is_checked_once_per_interval_at_its_own_offset() -> None:
    schedule = ds.plan(FLEET[:50], {}, interval=HOUR, now=START, not_before=START)
    made = rounds(schedule, START + 3 * HOUR)
    assert len(made) == 150  # three checks each
    assert busiest_second(made) <= 3
    for name in FLEET[:50]:
        at = ds.next_check(name, HOUR, START)
        assert (at - ds.offset(name, HOUR)) % HOUR == 0  # on its own instants


def test_the_offset_is_stable_and_a_restart_makes_no_burst() -> None:
    assert ds.offset("lab", HOUR) == ds.offset("lab", HOUR)
    assert 0 <= ds.offset("lab", HOUR) < HOUR
    assert ds.offset("lab", HOUR) != ds.offset("lab-2", HOUR)
    before = ds.plan(FLEET, {}, interval=HOUR, now=START, not_before=START)
    # A restart 17 minutes in: a fresh schedule (nothing known), the first checks after a
    # minute; each cluster keeps its instant in the interval, nobody is checked at once.
    later = START + 17 * 60
    after = ds.plan(FLEET, {}, interval=HOUR, now=later, not_before=later + 60)
    assert busiest_second(list(after.values())) <= 6
    for name in FLEET:
        assert (after[name] - before[name]) % HOUR == 0
        assert later + 60 <= after[name] < later + 60 + HOUR


def test_a_new_cluster_waits_for_its_instant_and_a_removed_one_is_dropped() -> None:
    schedule = ds.plan(FLEET[:10], {}, interval=HOUR, now=START, not_before=START)
    now = START + 600
    added = ds.plan(FLEET[1:11], schedule, interval=HOUR, now=now, not_before=START)
    assert FLEET[0] not in added
    assert {n: added[n] for n in FLEET[1:10]} == {n: schedule[n] for n in FLEET[1:10]}
    assert added[FLEET[10]] == ds.next_check(FLEET[10], HOUR, now)
    assert ds.due(added, now) == sorted(n for n in FLEET[1:10] if schedule[n] <= now)


def test_the_watch_sleeps_until_the_next_due_check_within_bounds() -> None:
    schedule = {"a": START + 30.0, "b": START + 90.0}
    assert ds.wake_in(schedule, START, least=1.0, most=60.0) == 30.0
    assert ds.wake_in(schedule, START + 29.9, least=1.0, most=60.0) == 1.0
    assert ds.wake_in({}, START, least=1.0, most=60.0) == 60.0
