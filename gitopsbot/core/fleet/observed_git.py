"""Commits as read from Git: plain values, shared by the Repo port, the adapter and the core."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime


@dataclass(frozen=True, slots=True)
class CommitInfo:
    """One commit as read from Git. ``time`` is the committer time, timezone-aware."""

    sha: str
    parents: tuple[str, ...]
    author: str  # "Name <email>"
    message: str
    time: datetime

    @property
    def summary(self) -> str:
        """The first line of the message."""
        return self.message.split("\n", 1)[0]

    @property
    def is_merge(self) -> bool:
        return len(self.parents) > 1
