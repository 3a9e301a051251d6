"""Drawing a live view on a terminal, with rich (the library behind pip's progress bars).

``LiveScreen`` keeps one region of the terminal and redraws it in place at each ``draw``:
text lines as they are, and each block of steps as a table whose pool phases carry rich's
progress bar next to their batch summary (``core.rollouts.phase_view.StepRow``). It is for
terminals only;
callers print plain lines elsewhere (``bot.report.change_lines``), so logs and CI get one
line per change and no escape codes.

rich is confined here: commands hand over text and rows, never rich objects.
"""

from __future__ import annotations

from collections.abc import Sequence
from types import TracebackType
from typing import TextIO

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from gitopsbot.core.rollouts.phase_view import StepRow
from gitopsbot.ports.screen import Frame, Screen

_STATE_STYLE = {
    "succeeded": "green",
    "running": "cyan",
    "failed": "bold red",
    "skipped": "dim",
    "pending": "dim",
}


def _steps(rows: Sequence[StepRow]) -> RenderableType:
    """Each step on a line (icon, name, state, times); a pool phase adds a line with the
    progress bar and the batch summary, a detail a dim line of its own."""
    parts: list[RenderableType] = []
    for row in rows:
        style = _STATE_STYLE.get(str(row.state), "")
        line = Text("  ")
        line.append(row.icon, style=style)
        line.append(f" {row.name:<32} ")
        line.append(f"{row.state!s:<9}", style=style)
        line.append(f" {row.times}", style="dim")
        parts.append(line)
        if row.progress is not None:
            grid = Table.grid(padding=(0, 1))
            grid.add_column(width=4)
            grid.add_column(no_wrap=True)
            grid.add_column(no_wrap=True)
            grid.add_column(overflow="fold")
            bar = ProgressBar(total=100, completed=row.progress, width=24)
            grid.add_row("", bar, f"{row.progress:>3}% {row.phase_state}", row.summary)
            parts.append(grid)
        if row.node_line:  # per-node counts of a hypervisor phase (issue #18)
            parts.append(Text(f"      {row.node_line}", overflow="fold"))
        if row.detail:
            parts.append(Text(f"      {row.detail}", style="dim", overflow="fold"))
    return Group(*parts)


def renderable(frame: Frame) -> RenderableType:
    parts: list[RenderableType] = []
    for item in frame:
        if isinstance(item, str):
            parts.append(Text(item))
        else:
            parts.append(_steps(item))
    return Group(*parts)


class LiveScreen(Screen):
    """A region of the terminal redrawn in place. Use as a context manager; on exit the
    last frame stays on screen."""

    def __init__(self, out: TextIO, *, below_output: bool = False) -> None:
        """``below_output``: what the process prints to standard output and error (``run``'s
        own lines and its log) scrolls above the region instead of breaking it."""
        self._console = Console(file=out, force_terminal=True, highlight=False)
        self._live = Live(
            console=self._console,
            auto_refresh=False,
            transient=False,
            redirect_stdout=below_output,
            redirect_stderr=below_output,
        )

    def __enter__(self) -> LiveScreen:
        self._live.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._live.stop()

    def draw(self, frame: Frame) -> None:
        self._live.update(renderable(frame), refresh=True)
