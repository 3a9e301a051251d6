"""A verified push to the watched branch wakes the clusters it touched (issue 29).

Before, every delivery woke every cluster's job, so the merged cluster's pass waited behind a
pass for each of the others. Now the webhook's thread only hands the push over (it answers at
once); one routing thread fetches, diffs the watched branch's head as last routed with the
new one, and wakes the clusters whose files changed (``core.fleet.push_scope``). When that cannot be
told (the first push since the start, a change outside ``clusters/<name>/``, Git failing),
every cluster is woken, as before.

The same routing is the **fleet poll** (``poll``, every poll interval from the scheduler):
one fetch for the whole fleet (none if one began within half an interval), then the clusters
the new commits touched are woken. Clusters at rest have no periodic pass of their own
(``bot.scheduler``, docs/decisions.md#resting-clusters): the poll is how they see a push when
no webhook comes; the others still pass every interval besides.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Collection
from concurrent.futures import ThreadPoolExecutor

from gitopsbot.core.fleet import push_scope
from gitopsbot.errors import GitOpsBotError
from gitopsbot.ports.repo import Repo

log = logging.getLogger(__name__)


class PushRouter:
    def __init__(
        self,
        repo: Repo,
        *,
        watched: Callable[[], str],
        clusters: Callable[[], Collection[str]],
        nudge: Callable[[str | None], None],
        invalidate: Callable[[], None] | None = None,
        poll_fetch: Callable[[], None] | None = None,
        answered: Callable[[bool], None] | None = None,
    ) -> None:
        self._repo = repo
        # The poll's fetch (``SharedRepo.fetch`` with half an interval's freshness): None,
        # the repository's own.
        self._poll_fetch = poll_fetch or repo.fetch
        self._answered = answered  # told whether Git answered each routing (``/readyz``)
        # The mirror's "fetched recently enough" ends with a push (``SharedRepo.invalidate``).
        self._invalidate = invalidate
        self._watched = watched
        self._clusters = clusters
        self._nudge = nudge
        self._last: str | None = None  # the watched head as of the last routed push
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="push-router")
        # What each recent push or poll woke (None: all); bounded, the poll runs forever.
        self.woken: deque[frozenset[str] | None] = deque(maxlen=64)
        self.polls = 0

    def push(self) -> None:
        """A push to the watched branch was delivered: route it off the caller's thread."""
        self._pool.submit(self._route)

    def poll(self) -> None:
        """The fleet poll's turn (the scheduler, every interval): off the caller's thread."""
        self._pool.submit(self._route, True)

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)

    def route(self, polled: bool = False) -> frozenset[str] | None:
        """Fetch, then wake the clusters the push touched; returns them (None: all).
        ``polled``: the fleet poll's turn, no push announced: a recent fetch serves."""
        branch = self._watched()
        scope: frozenset[str] | None
        try:
            if polled:
                self.polls += 1
                self._poll_fetch()
            else:
                if self._invalidate is not None:
                    self._invalidate()
                self._repo.fetch()
            after = self._repo.head(branch)
            before, self._last = self._last, after
            if before is None or after is None:
                scope = None  # the first push seen: what it changed is not known
            elif before == after:
                scope = frozenset()  # already routed (a pass fetched it): nothing new
            else:
                scope = push_scope.touched(self._repo.diff_paths(before, after), self._clusters())
        except GitOpsBotError as e:
            what = "fleet poll" if polled else "webhook"
            log.warning("%s: could not tell which clusters the push touched: %s", what, e)
            scope = None
            if self._answered is not None:
                self._answered(False)
        else:
            if self._answered is not None:
                self._answered(True)
        if scope is None:
            self._nudge(None)
        else:
            for name in sorted(scope):
                self._nudge(name)
        self.woken.append(scope)
        return scope

    def _route(self, polled: bool = False) -> None:
        try:
            self.route(polled)
        except Exception:  # the routing thread never dies; polling stays the safety net
            log.exception("webhook: routing a push failed")
            self._nudge(None)
