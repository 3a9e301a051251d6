"""How every command's log lines look: the format chosen and the pass's fields on each line."""

from __future__ import annotations

from collections.abc import Callable

from gitopsbot.adapters import logs as log_output
from gitopsbot.bot import log_context


def configure_logging(
    fmt: str, *, root_level: int, levels: dict[str, int] | None = None
) -> Callable[[], None] | None:
    """Log lines in ``fmt`` (``text``/``json``) to standard error, each naming the cluster,
    operation and step of the pass that emitted it (docs/logging.md). None when the embedding
    program configured logging already; else how to undo it."""
    return log_output.configure(
        fmt, root_level=root_level, levels=levels, filters=[log_context.RecordFields()]
    )
