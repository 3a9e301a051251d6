"""A change held by waves is judged again on later passes, and starts once it may.

A change the ``WAVES`` deny blocked (and nothing else blocked: ``core.waves.promotion_gate.
held_only_by_waves``) lifts without a new commit for the cluster: when the earlier waves have
soaked, or when a person removes its ``failedVersions`` mark (a commit to gitopsbot.yaml,
which intake does not take as the cluster's change); a policy deny waits for a new commit. So
while it is the cluster's latest operation and nothing is queued, every pass judges it again
through the whole gate (policy rules and waves, against what is deployed now, with the waves
and marks of the watched branch's head); the pass comes back when the soak that holds it ends.

Crash-safe by construction: the BLOCKED journal on the state branch is all there is to
resume. A bot killed after judging and before recording the start judges again on its next
pass; the start is recorded in one commit with the backup, as for a new operation.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from datetime import datetime

from gitopsbot.bot.pass_base import PassBase, PassResult
from gitopsbot.core.records.journal import Journal, OperationStatus

log = logging.getLogger(__name__)


class Held:
    """Judges a change held by waves again and starts it once it may (module docstring)."""

    def __init__(self, ctx: PassBase) -> None:
        self.ctx = ctx

    def retry_held(self, held: Journal, now: datetime) -> PassResult:
        cluster = held.cluster
        spec = self.ctx.spec_at(held.desired_sha, cluster)
        if spec is None:
            return PassResult(cluster, "idle")
        fresh = replace(held, status=OperationStatus.RUNNING, failure="", verdicts=())
        judged = self.ctx.judged(fresh, spec, self.ctx.read_deployed(spec))
        if judged.status is OperationStatus.BLOCKED:
            if (judged.failure, judged.verdicts) != (held.failure, held.verdicts):
                # Why it waits changed (a cluster got the version, a soak began): recorded and
                # shown on the pull request, not announced again (it was, when blocked).
                self.ctx.store.save(judged, f"{judged.op_id} still {judged.failure}"[:300])
                self.ctx.repost(judged)
            return PassResult(
                cluster, "held", judged.failure, next_at=self.ctx.held_until.get(cluster)
            )
        started, files = self.ctx.backed_up(judged, spec, now)
        message = f"{started.kind} {started.op_id} started: no longer held by waves"
        if files:
            message += "; backup succeeded"
        self.ctx.save(started, message, files=files)
        log.info("%s: %s", cluster, message)
        return PassResult(cluster, "started", started.op_id, next_at=now)
