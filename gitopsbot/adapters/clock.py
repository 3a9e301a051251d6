"""The system clock (the one place that reads real time)."""

from __future__ import annotations

import time
from datetime import UTC, datetime

from gitopsbot.ports.clock import Clock


class SystemClock(Clock):
    def now(self) -> datetime:
        return datetime.now(UTC)

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            time.sleep(seconds)

    def monotonic(self) -> float:
        return time.monotonic()
