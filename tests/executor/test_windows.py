"""Maintenance windows: open/closed at the edges, next opening, closing time, time zones
(including a DST change), overlap, and bad input."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from gitopsbot.core.fleet.model import MaintenanceWindow
from gitopsbot.core.rollouts import windows

NIGHTLY = windows.Window.of(MaintenanceWindow("0 2 * * *", 3600), UTC)


def at(h: int, m: int = 0, s: int = 0, day: int = 10) -> datetime:
    return datetime(2026, 6, day, h, m, s, tzinfo=UTC)


@pytest.mark.parametrize(
    ("now", "open_"),
    [
        (at(1, 59, 59), False),
        (at(2, 0, 0), True),  # opens at the cron match itself
        (at(2, 30), True),
        (at(2, 59, 59), True),
        (at(3, 0, 0), False),  # duration is a half-open interval
        (at(12), False),
    ],
    ids=str,
)
def test_is_open_at_the_edges(now: datetime, open_: bool) -> None:
    assert windows.is_open(NIGHTLY, now) is open_


def test_no_window_is_always_open() -> None:
    assert windows.is_open(None, at(12))
    assert windows.next_open(None, at(12)) == at(12)
    assert windows.closes_at(None, at(12)) is None


@pytest.mark.parametrize(
    ("now", "expected"),
    [
        (at(1), at(2)),
        (at(3), at(2, day=11)),
        (at(2, 30), at(2, 30)),  # already open: now
    ],
    ids=str,
)
def test_next_open(now: datetime, expected: datetime) -> None:
    assert windows.next_open(NIGHTLY, now) == expected


def test_closes_at() -> None:
    assert windows.closes_at(NIGHTLY, at(2, 10)) == at(3)
    assert windows.closes_at(NIGHTLY, at(4)) is None


def test_time_zone_is_the_windows_own() -> None:
    berlin = ZoneInfo("Europe/Berlin")
    w = windows.Window.of(MaintenanceWindow("0 2 * * *", 1800, "Europe/Berlin"), berlin)
    # 02:00 in Berlin in June is 00:00 UTC.
    assert windows.is_open(w, at(0, 10))
    assert not windows.is_open(w, at(2, 10))
    assert windows.next_open(w, at(1)) == at(0, day=11)


def test_across_a_dst_change() -> None:
    # 2026-10-25 Europe/Berlin goes from UTC+2 to UTC+1 at 03:00 local.
    berlin = ZoneInfo("Europe/Berlin")
    w = windows.Window.of(MaintenanceWindow("0 4 * * *", 3600), berlin)
    before = datetime(2026, 10, 24, 2, 30, tzinfo=UTC)  # 04:30 CEST
    after = datetime(2026, 10, 25, 3, 30, tzinfo=UTC)  # 04:30 CET
    assert windows.is_open(w, before)
    assert windows.is_open(w, after)
    assert not windows.is_open(w, datetime(2026, 10, 25, 2, 30, tzinfo=UTC))


def test_long_windows_overlap() -> None:
    w = windows.Window.of(MaintenanceWindow("0 * * * *", 7200), UTC)
    assert windows.is_open(w, at(5, 59))
    assert windows.closes_at(w, at(5, 59)) == at(7, 0)


@pytest.mark.parametrize(
    "bad", [MaintenanceWindow("not a cron", 60), MaintenanceWindow("0 2 * * *", 0)], ids=str
)
def test_bad_windows_are_refused(bad: MaintenanceWindow) -> None:
    with pytest.raises(ValueError, match="maintenance window"):
        windows.Window.of(bad, UTC)


def test_naive_now_is_refused() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        windows.is_open(NIGHTLY, datetime(2026, 1, 1) + timedelta(0))  # noqa: DTZ001
