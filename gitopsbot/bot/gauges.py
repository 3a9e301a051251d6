"""After each pass: the gauges no happening carries, for the metrics (``ports.metrics``).

A pass listener: told on the pass's thread right after a pass of the cluster ended (its
Lease still held), it reads what the pass left (the queued merge, the operation's commit)
and asks ``core.rollouts.windows.open_by_pool`` which pools may roll now. The windows are those of
the cluster's files at the running (else queued) operation's commit, else at the watched
branch's head: the rollout follows the windows of the commit it applies.

It also counts the nodes of each pool phase of the running (or last) operation per state
(``core.records.node_states``, recorded with the phase in the journal: issue #18).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from gitopsbot.bot.reconciler import Reconciler
from gitopsbot.core.records import node_states
from gitopsbot.core.records.journal import Journal, StepKind
from gitopsbot.core.records.node_states import NodeState
from gitopsbot.core.rollouts import phase_view, windows
from gitopsbot.errors import GitOpsBotError
from gitopsbot.ports.metrics import FleetGauges

log = logging.getLogger(__name__)


def node_counts(journal: Journal | None) -> dict[tuple[str, str], Mapping[NodeState, int]]:
    """(pool, component) → nodes per state, for each pool phase of ``journal`` with
    per-node records (the hypervisor's: core.node_states)."""
    out: dict[tuple[str, str], Mapping[NodeState, int]] = {}
    if journal is None:
        return out
    for step in journal.steps:
        if step.kind is not StepKind.POOL_PHASE or step.component is None:
            continue
        records = phase_view.phase_nodes(journal.phase(step.name))
        if records:
            out[(step.pool, str(step.component))] = node_states.counts(records)
    return out


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
            # Zeros only while the operation runs: an ended one's states no longer move.
            running = current is not None and current.active
            self._gauges.rollout_nodes(cluster, node_counts(current), zeros=running)
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
