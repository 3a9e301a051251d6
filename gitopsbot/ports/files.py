"""A read-only tree of files: a directory on disk or a Git commit, same interface."""

from __future__ import annotations

from typing import Protocol


class FileTree(Protocol):
    """Files addressed by POSIX paths relative to the tree's root."""

    @property
    def label(self) -> str:
        """Human name for messages: a directory path or ``<ref>@<short sha>``."""
        ...

    def read(self, path: str) -> bytes | None:
        """The file's bytes, or None when it does not exist. A symbolic link (at ``path`` or
        on the way to it) is never followed: ``errors.SymlinkRefused`` names it."""
        ...

    def list(self, directory: str) -> list[str]:
        """Names (not paths) of the entries directly under ``directory``; [] when absent."""
        ...
