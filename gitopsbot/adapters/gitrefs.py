"""A FileTree over one commit of a Git repository (``--from`` / ``--to`` of ``gitopsbot plan``).

Deliberately tiny: the full Git adapter (``adapters.git``) owns everything else.
"""

from __future__ import annotations

from pathlib import Path

import pygit2

from gitopsbot.errors import GitFailed, SymlinkRefused
from gitopsbot.ports.files import FileTree

_LINK = 0o120000  # a tree entry's file mode for a symbolic link


class GitRefTree(FileTree):
    """Files of ``ref`` (branch, tag, sha, ``HEAD~1``) under ``subdir`` of the repository that
    contains ``path``."""

    def __init__(self, path: Path, ref: str) -> None:
        found = pygit2.discover_repository(str(path))
        if found is None:
            raise GitFailed(f"{path}: not inside a Git repository")
        self._repo = pygit2.Repository(found)
        try:
            obj = self._repo.revparse_single(ref)
            commit = obj.peel(pygit2.Commit)
        except (KeyError, ValueError, pygit2.GitError):
            raise GitFailed(f"{path}: no such Git ref {ref!r}") from None
        self._commit = commit
        workdir = Path(self._repo.workdir or found).resolve()
        rel = Path(path).resolve().relative_to(workdir).as_posix()
        self._prefix = "" if rel == "." else rel.strip("/") + "/"
        self._label = f"{ref}@{str(commit.id)[:8]}"

    @property
    def label(self) -> str:
        return self._label

    @property
    def sha(self) -> str:
        """The commit ``ref`` names."""
        return str(self._commit.id)

    def _entry(self, path: str) -> pygit2.Object | None:
        full = (self._prefix + path).strip("/")
        if not full:
            return self._commit.tree
        try:
            return self._commit.tree[full]
        except KeyError:
            return None

    def read(self, path: str) -> bytes | None:
        entry = self._entry(path)
        if entry is None or entry.type_str != "blob":
            return None
        if entry.filemode == _LINK:
            raise SymlinkRefused(path)
        return bytes(entry.read_raw())

    def list(self, directory: str) -> list[str]:
        entry = self._entry(directory)
        if entry is None or entry.type_str != "tree":
            return []
        tree = self._repo.get(entry.id)
        return sorted(str(e.name) for e in tree) if isinstance(tree, pygit2.Tree) else []
