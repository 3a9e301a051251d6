"""One commit's files read through pygit2: the ``FileTree`` the fleet's readers walk.

Directories are parsed once per commit and shared by every reader of it (#29); a symlink is
never read as a file (SymlinkRefused).
"""

from __future__ import annotations

import threading

import pygit2
from pygit2.enums import FileMode, ObjectType

from gitopsbot.errors import SymlinkRefused


class CommitTree:
    """``FileTree`` over one commit of a pygit2 repository."""

    def __init__(self, repo: pygit2.Repository, commit: pygit2.Commit, label: str) -> None:
        self._repo = repo
        self._commit = commit
        self._tree = commit.tree
        self._label = label
        self.sha = str(commit.id)
        # Directories by path, parsed once (#29): a path lookup from the root parses every
        # tree on the way, and ``clusters/`` of 1,000 clusters costs about 0.3 ms a time.
        self._dirs: dict[str, pygit2.Tree | None] = {"": commit.tree}
        self._dirs_lock = threading.Lock()

    def named(self, label: str) -> CommitTree:
        """The same commit under another label, sharing the directories parsed so far."""
        twin = CommitTree(self._repo, self._commit, label)
        twin._dirs, twin._dirs_lock = self._dirs, self._dirs_lock
        return twin

    @property
    def label(self) -> str:
        return self._label

    def _dir(self, path: str) -> pygit2.Tree | None:
        with self._dirs_lock:
            if path in self._dirs:
                return self._dirs[path]
        parent, _, name = path.rpartition("/")
        up = self._dir(parent)
        found: pygit2.Tree | None = None
        if up is not None:
            try:
                entry = up[name]
            except KeyError:
                entry = None
            if entry is not None and entry.type == ObjectType.TREE:
                found = entry.peel(pygit2.Tree)
        with self._dirs_lock:
            self._dirs[path] = found
        return found

    def dir_id(self, path: str) -> str | None:
        clean = "/".join(p for p in path.split("/") if p not in ("", "."))
        if ".." in clean.split("/"):
            return None
        found = self._dir(clean)
        return str(found.id) if found is not None else None

    def read(self, path: str) -> bytes | None:
        clean = "/".join(p for p in path.split("/") if p not in ("", "."))
        if not clean or ".." in clean.split("/"):
            return None
        directory, _, name = clean.rpartition("/")
        tree = self._dir(directory)
        return None if tree is None else _read_blob(self._repo, tree, name)

    def list(self, directory: str) -> list[str]:
        clean = "/".join(p for p in directory.split("/") if p not in ("", "."))
        if ".." in clean.split("/"):
            return []
        tree = self._dir(clean)
        if tree is None:
            return []
        return sorted(str(entry.name) for entry in tree)


def _read_blob(repo: pygit2.Repository, tree: pygit2.Tree, path: str) -> bytes | None:
    clean = "/".join(p for p in path.split("/") if p not in ("", "."))
    if not clean or ".." in clean.split("/"):
        return None
    try:
        obj = tree[clean]
    except KeyError:
        return None
    if obj.type != ObjectType.BLOB:
        return None
    if obj.filemode == FileMode.LINK:
        raise SymlinkRefused(clean)  # its content is the link's target: never read as a file
    return bytes(obj.peel(pygit2.Blob).data)
