"""One reconcile pass for one cluster: observe → decide → execute one step → record.

The pass (style-research §6.3):

1. **Intake** (``bot.intake``): new commits on the watched branch touching
   ``clusters/<name>/`` become an operation, placed by the merge queue.
2. **Decide** (pure): ``core.operation.next_step(journal, observations, now)``.
3. **Execute** one step, or the pool switch changes, through ``bot.steps.executor``
   (``bot.driving``).
4. **Record**: a commit on the state branch for every transition, mirrored on the pull
   request (one comment per operation, edited, and the ``gitopsbot/apply`` status).

On failure (a step FAILED, a rollout halted), ``bot.reverts`` remediates as
``rollout.on_failure`` says. What the parts share (ports, caches, ``save``) is in
``bot.pass_base``; ``Reconciler`` puts the parts together and runs the pass.
"""

from __future__ import annotations

from gitopsbot.bot.driving import DrivingMixin
from gitopsbot.bot.intake import IntakeMixin
from gitopsbot.bot.pass_base import LOG_LIMIT, SPEC_CACHE, PassResult
from gitopsbot.bot.reverts import (
    PR_NOT_OPENED,
    REFUSED_PUSH,
    REVERT_PR_RETRY,
    REVERTING,
    RevertsMixin,
)
from gitopsbot.core import merge_queue
from gitopsbot.core.journal import OperationKind, OperationStatus

__all__ = [
    "LOG_LIMIT",
    "PR_NOT_OPENED",
    "REFUSED_PUSH",
    "REVERTING",
    "REVERT_PR_RETRY",
    "SPEC_CACHE",
    "PassResult",
    "Reconciler",
]


class Reconciler(IntakeMixin, DrivingMixin, RevertsMixin):
    """Drives every cluster's operations. Ports are injected; ``executor_for`` builds the
    executor of a cluster (its Cluster and Helm ports) from the cluster's spec."""

    # -- the pass -------------------------------------------------------------------------

    def reconcile(self, cluster: str) -> PassResult:
        now = self.clock.now()
        if self.fetch:
            self.repo.fetch()
        if cluster not in self._shown:
            # After a restart: the last transition may have been recorded but not yet posted.
            self._shown.add(cluster)
            running = self.store.current(cluster)
            if running is not None and running.active:
                self.mirror(running)
        intake = self.intake(cluster, now)
        if intake is not None:
            return intake
        current = self.store.current(cluster)
        if current is not None and current.kind is OperationKind.ROLLBACK:
            self._retry_revert_pr(current, now)
        if current is None or not current.active:
            queued = self.store.queued(cluster)
            if queued is None:
                return PassResult(cluster, "idle")
            spec = self.spec_at(queued.desired_sha, cluster)
            wins = list(self.pool_windows(spec).values()) if spec else []
            promoted = merge_queue.promote(queued, now=now, pool_windows=wins)
            if promoted.status is OperationStatus.QUEUED:
                if promoted != queued:
                    self.save(promoted, "queued until the window opens")
                return PassResult(cluster, "queued", next_at=promoted.queue.queued_until)
            self.store.start(promoted, f"{promoted.kind} {promoted.op_id} started")
            self.mirror(promoted)
            return PassResult(cluster, "started", promoted.op_id, next_at=now)
        return self.advance(current, now)
