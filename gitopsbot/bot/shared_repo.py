"""One fleet mirror shared by the scheduler's worker threads.

The Git adapter (libgit2 objects) must not be used from two threads at once, but passes for
different clusters should run side by side: their time goes to helm, the cluster and the
forge, not to Git. ``SharedRepo`` wraps any ``Repo`` and runs every call (and every read of a
tree it hands out) under one lock, so Git work is serialised and the rest runs in parallel.

It also coalesces fetches: a pass fetches so that it sees everything pushed before it began;
when another thread's fetch began after this request and has finished, that fetch already
brought it, so N clusters woken by one webhook cost one network round trip, not N. And with
``fresh_seconds`` (``run``: 1.5 poll intervals, the fleet poll fetching every interval) a fetch
that recent serves every pass until a webhook says the remote moved (``invalidate``): a fleet
of N clusters costs one fetch per poll interval (the fleet poll's), not N. A fetch under way
when a pass asks serves it too, once it completes, if it began since the last ``invalidate``:
it is newer than any fetch the freshness would accept (two passes a few milliseconds apart made
two fetches: an idle fleet fetched twice per poll round, #29). A fetch that began before an
``invalidate`` serves nobody asking after it, so what the webhook announced is fetched at once.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping

from gitopsbot.ports.files import DirIds, FileTree
from gitopsbot.ports.repo import CommitInfo, Repo


class SharedTree:
    """A FileTree whose reads take the shared repository's lock."""

    def __init__(self, tree: FileTree, lock: threading.RLock) -> None:
        self._tree = tree
        self._lock = lock
        self._ids = tree if isinstance(tree, DirIds) else None  # asked once, not per read

    @property
    def label(self) -> str:
        return self._tree.label

    def read(self, path: str) -> bytes | None:
        with self._lock:
            return self._tree.read(path)

    def list(self, directory: str) -> list[str]:
        with self._lock:
            return self._tree.list(directory)

    def dir_id(self, path: str) -> str | None:
        if self._ids is None:
            return None
        with self._lock:
            return self._ids.dir_id(path)


class SharedRepo:
    """``Repo`` for many threads: one call at a time, fetches coalesced."""

    def __init__(
        self,
        repo: Repo,
        *,
        fresh_seconds: float = 0.0,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._repo = repo
        self._lock = threading.RLock()
        self._count = threading.Lock()  # guards the counters below
        self._started = 0  # fetches begun so far
        self._finished = 0  # the number of the latest fetch that completed
        self.fetches = 0  # network fetches actually made (for tests and benchmarks)
        # A fetch this recent serves the next one (issue 29: one fetch per poll interval for
        # the whole fleet, not one per cluster pass); ``invalidate`` (a webhook) ends it.
        self._fresh_seconds = fresh_seconds
        self._monotonic = monotonic
        self._fetched_at: float | None = None  # when the latest fresh fetch began
        self._epoch = 0  # invalidations so far: a fetch begun before one is not fresh

    def invalidate(self) -> None:
        """The remote moved (a webhook said so): the next fetch goes to the network."""
        with self._count:
            self._fetched_at = None
            self._epoch += 1

    def _fresh(self, seconds: float) -> bool:
        at = self._fetched_at
        return at is not None and self._monotonic() - at < seconds

    def fetch(self, *, fresh_seconds: float | None = None) -> None:
        """Fetch unless a fetch began within ``fresh_seconds`` (default: the constructor's)
        and no ``invalidate`` since. The fleet poll (``bot.push_router``) asks with half its
        interval; passes with the constructor's longer freshness, so between polls they do
        not fetch."""
        fresh = self._fresh_seconds if fresh_seconds is None else fresh_seconds
        with self._count:
            begun_before_me = self._started
            if self._fresh(fresh):
                return  # fetched within the poll interval: what a poll would bring
        with self._lock:  # waits for a fetch under way, if any
            with self._count:
                if self._finished > begun_before_me:
                    return  # a fetch that began after this request has completed
                if self._fresh(fresh):
                    return  # the one under way when asked: fresh, begun since a webhook
                self._started += 1
                mine, epoch, began = self._started, self._epoch, self._monotonic()
            self._repo.fetch()
            self.fetches += 1
            with self._count:
                self._finished = max(self._finished, mine)
                if self._epoch == epoch:  # no webhook since it began: it serves until stale
                    self._fetched_at = began

    def head(self, branch: str) -> str | None:
        with self._lock:
            return self._repo.head(branch)

    def branches(self, prefix: str = "") -> list[str]:
        with self._lock:
            return self._repo.branches(prefix)

    def read(self, ref_or_sha: str, path: str) -> bytes | None:
        with self._lock:
            return self._repo.read(ref_or_sha, path)

    def tree(self, ref_or_sha: str) -> FileTree:
        with self._lock:
            return SharedTree(self._repo.tree(ref_or_sha), self._lock)

    def log(self, branch: str, since_sha: str | None, limit: int) -> list[CommitInfo]:
        with self._lock:
            return self._repo.log(branch, since_sha, limit)

    def commit_files(
        self,
        branch: str,
        files: Mapping[str, bytes | None],
        message: str,
        *,
        parent: str | None,
    ) -> str:
        with self._lock:
            return self._repo.commit_files(branch, files, message, parent=parent)

    def push(self, branch: str) -> str:
        with self._lock:
            return self._repo.push(branch)

    def is_ancestor(self, ancestor: str, descendant: str) -> bool:
        with self._lock:
            return self._repo.is_ancestor(ancestor, descendant)

    def diff_paths(self, a: str, b: str) -> list[str]:
        with self._lock:
            return self._repo.diff_paths(a, b)

    def revert_commit(self, branch: str, sha: str, message: str) -> str:
        with self._lock:
            return self._repo.revert_commit(branch, sha, message)

    def as_repo(self) -> Repo:
        """This wrapper as the port type (mypy checks it satisfies the Protocol)."""
        return self
