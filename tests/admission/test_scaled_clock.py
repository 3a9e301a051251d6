"""sandbox/scaled_clock: the bot's time runs ``scale`` times as fast as real time, now(),
monotonic() and sleep() agree, to_real maps a bot time back to real time, rescale does not
jump."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import pytest

from gitopsbot.ports.clock import Clock
from gitopsbot.sandbox.scaled_clock import ScaledClock

START = datetime(2026, 12, 4, 2, 0, tzinfo=UTC)


def test_runs_scale_times_as_fast_from_its_start() -> None:
    clock: Clock = ScaledClock(60, start=START)
    assert START <= clock.now() < START + timedelta(seconds=30)
    m0, t0 = clock.monotonic(), clock.now()
    time.sleep(0.2)
    moved = (clock.now() - t0).total_seconds()
    assert 11 <= moved <= 60  # 0.2 s real is 12 s of the bot's time (a loaded machine: more)
    assert abs((clock.monotonic() - m0) - moved) < 3


def test_starts_at_real_time_by_default() -> None:
    clock = ScaledClock(10)
    assert abs((clock.now() - datetime.now(UTC)).total_seconds()) < 1


def test_sleep_is_scaled() -> None:
    clock = ScaledClock(100)
    began = time.monotonic()
    clock.sleep(20)  # 0.2 s real
    assert 0.15 <= time.monotonic() - began < 1.5
    assert clock.real_seconds(300) == 3


def test_to_real_is_when_the_bot_clock_reads_it() -> None:
    clock = ScaledClock(60, start=START)
    real = clock.to_real(START + timedelta(minutes=5))
    assert abs((real - datetime.now(UTC)).total_seconds() - 5) < 0.5
    assert clock.to_real(START) <= datetime.now(UTC)


def test_rescale_keeps_the_time_and_changes_the_rate() -> None:
    clock = ScaledClock(60, start=START)
    time.sleep(0.05)
    before = clock.now()
    clock.rescale(1)
    after = clock.now()
    assert timedelta(0) <= after - before < timedelta(seconds=2)
    time.sleep(0.1)
    assert (clock.now() - after).total_seconds() < 1
    with pytest.raises(ValueError):
        clock.rescale(0)
    with pytest.raises(ValueError):
        ScaledClock(-1)
