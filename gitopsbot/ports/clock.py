"""Time, injected: the core never reads the clock itself."""

from __future__ import annotations

from datetime import datetime
from typing import Protocol


class Clock(Protocol):
    def now(self) -> datetime:
        """An aware datetime in UTC."""
        ...

    def sleep(self, seconds: float) -> None: ...

    def monotonic(self) -> float: ...
