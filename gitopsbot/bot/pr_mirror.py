"""Showing each operation on its pull request: one edited comment and the apply status.

The journal on the state branch is the record; the pull request is a view of it. Forges pace
writes (GitHub's secondary limits: the provider spaces them about 0.75 s apart), so posting
from inside a pass would make every step wait on the forge: a merge would be taken in a
second late, and each pool pass of a rollout would lag by two writes. ``PullRequestMirror``
posts from a thread of its own instead, and coalesces: only the newest state of an operation
is posted, so a burst of transitions costs two writes, not two per transition.

``post`` is the synchronous form, for one-shot commands and tests that read the pull request
right after a pass.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict

from gitopsbot.bot import report
from gitopsbot.core.forge.forge_types import CommitStatus
from gitopsbot.core.records.journal import Journal, OperationStatus
from gitopsbot.errors import ForgeError, ForgeNotFound
from gitopsbot.ports.forge import Forge

log = logging.getLogger(__name__)


def post(forge: Forge, journal: Journal) -> None:
    """Write the operation's comment and status now. The forge being down never stops an
    upgrade: a failure is logged, and the next transition posts the newer state."""
    # A blocked operation marks its commit even without a pull request (a direct push): the
    # red status is where a person looking at the commit sees why nothing was applied.
    if journal.pr_number is None and journal.status is not OperationStatus.BLOCKED:
        return
    try:
        if journal.pr_number is not None:
            try:
                forge.upsert_comment(
                    journal.pr_number, marker=report.marker(journal), body=report.markdown(journal)
                )
            except ForgeNotFound as e:
                # The status below is on the commit, which the forge knows: still set it.
                _unknown_pull_request(forge, journal, journal.pr_number, e)
        status = CommitStatus(
            report.commit_state(journal), report.headline(journal), context=report.APPLY_CONTEXT
        )
        forge.set_status(journal.desired_sha, status)
    except ForgeError as e:
        log.warning("%s: could not mirror on PR #%s: %s", journal.cluster, journal.pr_number, e)


# Operations whose pull request the forge does not know (a "#3" in a merge message that is
# no pull request there): warned about once, then at DEBUG, since every transition of the
# operation is posted again. Keyed by the forge's id, with the forge as the value so that id
# is not reused while the entry lives; the oldest entries go first.
_UNKNOWN_MAX = 256
_unknown: OrderedDict[tuple[int, str, str, int], Forge] = OrderedDict()
_unknown_lock = threading.Lock()


def _unknown_pull_request(forge: Forge, journal: Journal, number: int, e: ForgeNotFound) -> None:
    key = (id(forge), journal.cluster, journal.op_id, number)
    with _unknown_lock:
        first = _unknown.get(key) is not forge
        _unknown[key] = forge
        _unknown.move_to_end(key)
        while len(_unknown) > _UNKNOWN_MAX:
            _unknown.popitem(last=False)
    if first:
        log.warning(
            "%s: could not mirror on PR #%s: %s; the forge does not know it (a number in the "
            "commit message that is no pull request?), so %s is not shown there "
            "(further attempts are logged at DEBUG)",
            journal.cluster,
            number,
            e,
            journal.op_id,
        )
    else:
        log.debug("%s: could not mirror on PR #%s: %s", journal.cluster, number, e)


class PullRequestMirror:
    """Posts journals on their pull requests from a background thread, newest state only."""

    def __init__(self, forge: Forge) -> None:
        self._forge = forge
        self._pending: OrderedDict[tuple[str, str], Journal] = OrderedDict()
        self._cond = threading.Condition()
        self._posting = False
        self._closed = False
        self._thread = threading.Thread(target=self._loop, name="pr-mirror", daemon=True)
        self._thread.start()

    def publish(self, journal: Journal) -> None:
        """Queue ``journal`` for posting; it replaces a queued older state of its operation."""
        if journal.pr_number is None and journal.status is not OperationStatus.BLOCKED:
            return
        key = (journal.cluster, journal.op_id)
        with self._cond:
            if self._closed:
                return
            self._pending.pop(key, None)
            self._pending[key] = journal
            self._cond.notify_all()

    def flush(self, timeout: float = 30.0) -> bool:
        """Wait until everything queued so far is posted. False if ``timeout`` passed first."""
        with self._cond:
            return self._cond.wait_for(
                lambda: not self._pending and not self._posting, timeout=timeout
            )

    def close(self, timeout: float = 30.0) -> bool:
        """Post what is queued (for at most ``timeout`` seconds), then stop the thread."""
        done = self.flush(timeout)
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._thread.join(timeout=max(timeout, 1.0))
        if not done:
            log.warning("pull-request mirror: %d update(s) not posted", len(self._pending))
        return done

    def _loop(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._pending or self._closed)
                if self._closed:
                    return
                _, journal = self._pending.popitem(last=False)
                self._posting = True
            try:
                post(self._forge, journal)
            except Exception:  # a bug here must not end the thread: the next state is posted
                log.exception("%s: mirroring on the pull request crashed", journal.cluster)
            finally:
                with self._cond:
                    self._posting = False
                    self._cond.notify_all()
