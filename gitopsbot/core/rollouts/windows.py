"""Maintenance windows: when may the bot let the controller roll a pool (R21)?

A window opens at every match of its cron expression, read in the window's time zone, and
stays open for ``duration_seconds``. Pure: the caller resolves the time zone name to a
``tzinfo`` (core must not read tz files) and passes "now" (an aware datetime).

Windows longer than the cron period overlap; the window is open while any opening's
duration has not run out, which is the same as "the latest opening at or before now".

Nothing here raises at run time for a window the fleet loader accepted: a cron that never
fires is refused at load (``core.fleet.rollout_file.fires``), and should croniter still find
no opening in its search (a match decades away) the window counts as closed, with its next
opening a year ahead so the pass looks again.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta, tzinfo

from croniter import CroniterError, croniter

from gitopsbot.core.fleet.model import MaintenanceWindow

# cron has minute granularity; a window is open at the very instant it opens.
_EPSILON = timedelta(seconds=1)
# Bound the search for the next opening (a cron like "0 0 30 2 *" never matches).
_MAX_SEARCH = 1000
# When croniter finds no opening: closed, and looked at again this much later.
_NO_OPENING_RETRY = timedelta(days=365)


@dataclass(frozen=True, slots=True)
class Window:
    """A maintenance window with its time zone resolved."""

    cron: str
    duration: timedelta
    tz: tzinfo

    @classmethod
    def of(cls, window: MaintenanceWindow, tz: tzinfo) -> Window:
        """``tz`` is ``window.timezone`` resolved by the caller (e.g. ``ZoneInfo(name)``)."""
        if not croniter.is_valid(window.cron):
            raise ValueError(f"maintenance window cron {window.cron!r} is not valid")
        if window.duration_seconds <= 0:
            raise ValueError("maintenance window duration must be positive")
        return cls(window.cron, timedelta(seconds=window.duration_seconds), tz)


def _aware(now: datetime) -> datetime:
    if now.tzinfo is None:
        raise ValueError("now must be timezone-aware")
    return now


def last_opening(window: Window, now: datetime) -> datetime | None:
    """The latest opening at or before ``now`` (in the window's time zone); None when croniter
    finds none."""
    local = _aware(now).astimezone(window.tz)
    try:
        opened: datetime = croniter(window.cron, local + _EPSILON).get_prev(datetime)
    except CroniterError:
        return None
    return opened


def is_open(window: Window | None, now: datetime) -> bool:
    """True inside the window. No window means always open."""
    if window is None:
        return True
    opened = last_opening(window, now)
    return opened is not None and now < opened + window.duration


def closes_at(window: Window | None, now: datetime) -> datetime | None:
    """When the window that is open at ``now`` closes; None when closed (or no window)."""
    if window is None:
        return None
    opened = last_opening(window, now)
    if opened is None:
        return None
    end = opened + window.duration
    return end if now < end else None


def next_open(window: Window | None, now: datetime) -> datetime:
    """``now`` when open, else the next opening (aware, in the window's time zone)."""
    if window is None or is_open(window, now):
        return now
    local = _aware(now).astimezone(window.tz)
    it = croniter(window.cron, local)
    try:
        for _ in range(_MAX_SEARCH):
            candidate: datetime = it.get_next(datetime)
            if candidate > now:
                return candidate
    except CroniterError:
        pass
    return local + _NO_OPENING_RETRY


def open_by_pool(pool_windows: Mapping[str, Window | None], now: datetime) -> dict[str, bool]:
    """Each pool's window open at ``now`` (a pool without a window is always open): the
    ``gitopsbot_pool_window_open`` gauge, computed after every pass (``bot.gauges``)."""
    return {pool: is_open(window, now) for pool, window in pool_windows.items()}
