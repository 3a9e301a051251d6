"""The fleet repository as the bot sees it: read any commit, write its own commits, push safely.

Implemented by ``gitopsbot.adapters.git.GitRepo`` (pygit2, bare local mirror). Branch names
are short names (``main``, ``gitopsbot/state``); a ``ref_or_sha`` is a short branch name
(resolved as ``head`` resolves it), a full ref name (``refs/...``), or a commit sha (full or
abbreviated). Errors are ``gitopsbot.errors`` GitErrors; none carries a credential.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from gitopsbot.core.fleet.observed_git import CommitInfo
from gitopsbot.ports.files import FileTree

__all__ = ["CommitInfo", "Repo"]


class Repo(Protocol):
    """A Git repository with one remote (``origin``), seen through a local mirror."""

    def fetch(self) -> None:
        """Bring remote-tracking refs up to date. GitAuthError / GitUnavailable on failure."""
        ...

    def head(self, branch: str) -> str | None:
        """Sha of the branch's tip on the remote as of the last fetch, or of the local
        branch when the bot has committed to it and not pushed yet; None when absent."""
        ...

    def branches(self, prefix: str = "") -> list[str]:
        """Sorted short names of the branches (remote as of the last fetch, plus local ones)
        starting with ``prefix``."""
        ...

    def read(self, ref_or_sha: str, path: str) -> bytes | None:
        """A file's bytes at a commit (no work tree); None when the path is not a file there.
        GitFailed when the ref or sha does not resolve."""
        ...

    def tree(self, ref_or_sha: str) -> FileTree:
        """The whole commit as a read-only FileTree (label ``<ref>@<short sha>``)."""
        ...

    def log(self, branch: str, since_sha: str | None, limit: int) -> list[CommitInfo]:
        """Commits reachable from ``branch`` and not from ``since_sha``, oldest first, at most
        ``limit`` (the newest ``limit`` when more). ``since_sha`` None: the last ``limit``."""
        ...

    def commit_files(
        self,
        branch: str,
        files: Mapping[str, bytes | None],
        message: str,
        *,
        parent: str | None,
    ) -> str:
        """Create a commit on the local ``branch`` with the configured author and return its sha.

        ``files`` maps a path to new content, or None to delete it; other paths are kept from
        ``parent``. ``parent`` None means: the current head of ``branch`` (local, else remote),
        or an orphan root commit when the branch does not exist anywhere. The branch is created
        when absent. Nothing leaves the machine until ``push``.
        """
        ...

    def push(self, branch: str) -> str:
        """Push the local ``branch`` to origin; return the sha the remote now has.

        On non-fast-forward: fetch, replay the bot's own unpushed commits on top of the new
        remote head (the humans' commits are kept as they are), push again, a bounded number
        of times; then NonFastForward. A replay that conflicts raises GitFailed. A push the
        remote refuses by policy (a protected branch, a hook declining) raises PushRefused
        with the remote's reason, and the local branch is reset to the remote's head so later
        commits are not built on the refused one.
        """
        ...

    def is_ancestor(self, ancestor: str, descendant: str) -> bool:
        """True when ``ancestor`` is reachable from ``descendant`` (a commit is its own)."""
        ...

    def diff_paths(self, a: str, b: str) -> list[str]:
        """Sorted paths whose content differs between the two commits (added, removed, changed)."""
        ...

    def revert_commit(self, branch: str, sha: str, message: str) -> str:
        """Create on the local ``branch`` a commit undoing ``sha`` (for a merge: against its
        first parent) on top of the branch's head; return its sha. Push separately.
        GitFailed when the revert conflicts with later changes."""
        ...
