"""A read-only tree of files: a directory on disk or a Git commit, same interface."""

from __future__ import annotations

from typing import Protocol, runtime_checkable


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


@runtime_checkable
class DirIds(Protocol):
    """A tree that can name a directory's whole content (a Git tree id): equal ids, equal
    files below. Readers of many small per-cluster files keep what they derived by it and
    read again only what changed (#29: a judgement over 1,000 clusters' state)."""

    def dir_id(self, path: str) -> str | None:
        """The id of the directory at ``path``, None when there is none."""
        ...
