"""After each pass: the gauges no happening carries, for the metrics (``ports.metrics``).

A pass listener: told on the pass's thread right after a pass of the cluster ended (its
Lease still held), it reads what the pass left (the queued merge, the operation's commit)
and asks ``core.windows.open_by_pool`` which pools may roll now. The windows are those of the
cluster's files at the running (else queued) operation's commit, else at the watched
branch's head: the rollout follows the windows of the commit it applies.
"""

from __future__ import annotations

import logging

from gitopsbot.bot.reconciler import Reconciler
from gitopsbot.core import windows
from gitopsbot.errors import GitOpsBotError
from gitopsbot.ports.metrics import FleetGauges

log = logging.getLogger(__name__)


class PassGauges:
    def __init__(self, reconciler: Reconciler, gauges: FleetGauges) -> None:
        self._rec = reconciler
        self._gauges = gauges

    def pass_finished(
        self, cluster: str, *, action: str, detail: str, error: str, seconds: float
    ) -> None:
        rec = self._rec
        try:
            queued = rec.store.queued(cluster)
            self._gauges.queued_merges(cluster, 0 if queued is None else 1)
            current = rec.store.current(cluster)
            if current is not None and current.active:
                sha: str | None = current.desired_sha
            elif queued is not None:
                sha = queued.desired_sha
            else:
                sha = rec.repo.head(rec.settings.watched_branch)
            spec = rec.spec_at(sha, cluster) if sha else None
            found = rec.pool_windows(spec) if spec is not None else None
        except (GitOpsBotError, ValueError, KeyError) as e:  # the pass said it already
            log.debug("%s: gauges not updated: %s", cluster, e)
            return
        if found is not None:
            self._gauges.pool_windows(cluster, windows.open_by_pool(found, rec.clock.now()))
