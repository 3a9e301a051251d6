"""A clock for the bot that runs faster than real time (ports.clock.Clock).

``ScaledClock(60)``: one real second is a minute of the bot's time, so a maintenance window of
five minutes (cron has minute granularity) lasts five real seconds, and a rollout that spans
windows can be watched in a test or a rehearsal. ``now()`` starts at ``start`` (default: the
real time when the clock is made) and advances ``scale`` times as fast as the real clock;
``monotonic()`` advances at the same rate and ``sleep(s)`` sleeps ``s / scale`` real seconds,
so the bot's time stays consistent whichever it reads. ``to_real(when)`` is the real time at
which ``now()`` reads ``when``: what a scheduler running on real time waits for when the bot
asks to come back at ``when``. ``rescale`` changes the rate from now on without a jump.

Whatever else runs on real time (the controller simulator, helm, Git) does not speed up: a
batch that takes 2 real seconds takes 2 minutes of the bot's time.
"""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta


class ScaledClock:
    def __init__(self, scale: float, start: datetime | None = None) -> None:
        if scale <= 0:
            raise ValueError(f"scale must be positive, not {scale}")
        self._lock = threading.Lock()
        self._scale = float(scale)
        self._real = time.monotonic()  # the real monotonic time of the anchor
        self._wall = datetime.now(UTC)  # the real wall time of the anchor
        self._bot = (start or self._wall).astimezone(UTC)  # the bot's time at the anchor
        self._bot_mono = self._real  # the bot's monotonic time at the anchor

    @property
    def scale(self) -> float:
        return self._scale

    def _elapsed(self) -> tuple[float, float, datetime, float, datetime]:
        with self._lock:
            real = time.monotonic() - self._real
            return real, self._scale, self._bot, self._bot_mono, self._wall

    def now(self) -> datetime:
        real, scale, bot, _, _ = self._elapsed()
        return bot + timedelta(seconds=real * scale)

    def monotonic(self) -> float:
        real, scale, _, mono, _ = self._elapsed()
        return mono + real * scale

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            time.sleep(seconds / self._scale)

    def real_seconds(self, bot_seconds: float) -> float:
        """How many real seconds ``bot_seconds`` of the bot's time take."""
        return bot_seconds / self._scale

    def to_real(self, when: datetime) -> datetime:
        """The real (UTC) time at which ``now()`` reads ``when`` (at the current scale)."""
        with self._lock:
            ahead = (when - self._bot).total_seconds() / self._scale
            return self._wall + timedelta(seconds=ahead)

    def rescale(self, scale: float) -> None:
        """From now on run ``scale`` times as fast as real time; ``now()`` does not jump."""
        if scale <= 0:
            raise ValueError(f"scale must be positive, not {scale}")
        with self._lock:
            real_now = time.monotonic()
            real = real_now - self._real
            self._bot += timedelta(seconds=real * self._scale)
            self._bot_mono += real * self._scale
            self._wall += timedelta(seconds=real)
            self._real = real_now
            self._scale = float(scale)
