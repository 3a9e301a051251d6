"""A live region of a terminal: what ``status --watch`` and ``run`` redraw in place.

A frame is lines and blocks of step rows (``core.rollouts.phase_view.StepRow``), in order; the
adapter (``adapters.terminal``, rich) draws the rows with progress bars. Only for terminals:
elsewhere the callers print plain lines, one per change.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from gitopsbot.core.rollouts.phase_view import StepRow

Frame = Sequence[str | Sequence[StepRow]]


class Screen(Protocol):
    def draw(self, frame: Frame) -> None:
        """Replace what the region shows with ``frame``."""
        ...
