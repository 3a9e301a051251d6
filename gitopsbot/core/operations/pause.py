"""Holds: a person's pause of a cluster's or a pool's rollout (docs/pause.md).

A hold keeps a pool's switch closed: at the next batch boundary the bot closes it (the
controller finishes the batch in flight, R22) and the phase is recorded PAUSED with the
hold's reason; when the hold goes, the bot opens the switch again. Held time never counts
toward ``maxDuration`` (``phase_clock.active_seconds`` counts open time and an unheld canary
verify only).

Holds come from ``rollout.yaml`` (``paused:`` at the top or per pool), read from the
watched branch's head each pass, not from the operation's commit: a pause must reach the
running operation, not queue behind it. So do approvals in Git (``approve: <operation
id>``, ``approved_in_git``). A commit that changes only those fields therefore starts no
operation of its own (``pause_only``).

Pure: policies in, values out.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from gitopsbot.core.fleet.model import RolloutPolicy
from gitopsbot.core.records.journal import Journal, OperationKind, StepKind, StepState

CLUSTER = "*"  # the key of a comment's hold on the whole cluster (core.pr_commands)


@dataclass(frozen=True, slots=True)
class Holds:
    """Who holds what: ``cluster`` (every pool) and ``pools`` (pool name → reason); an
    empty reason is no hold."""

    cluster: str = ""
    pools: Mapping[str, str] = field(default_factory=dict)

    def reason(self, pool: str) -> str:
        """Why ``pool`` is held ("" when it is not): every hold on it, the cluster's first,
        so lifting one never reveals another that was held all along."""
        return "; ".join(r for r in (self.cluster, self.pools.get(pool, "")) if r)

    def __bool__(self) -> bool:
        return bool(self.cluster or any(self.pools.values()))


NONE = Holds()


def from_policy(policy: RolloutPolicy, where: str) -> Holds:
    """The holds ``rollout.yaml`` asks for; ``where`` names the file and commit, so the
    record says where the pause came from (``git log`` of that file says who)."""
    cluster = f"paused in Git ({where})" if policy.paused else ""
    pools = {p.name: f"paused in Git ({where}, pool {p.name})" for p in policy.pools if p.paused}
    return Holds(cluster, pools)


def merged(*holds: Holds) -> Holds:
    """Every hold of ``holds``: a pool is held while any source holds it."""
    cluster = "; ".join(dict.fromkeys(h.cluster for h in holds if h.cluster))
    pools: dict[str, str] = {}
    for h in holds:
        for pool, why in h.pools.items():
            if why and why not in pools.get(pool, "").split("; "):  # the same hold once
                pools[pool] = f"{pools[pool]}; {why}" if pool in pools else why
    return Holds(cluster, pools)


def _unpaused(policy: RolloutPolicy) -> RolloutPolicy:
    return replace(
        policy,
        paused=False,
        approve="",
        pools=tuple(replace(p, paused=False, approve="") for p in policy.pools),
    )


def pause_only(before: RolloutPolicy, after: RolloutPolicy) -> bool:
    """Whether ``after`` differs from ``before`` in its ``paused`` and ``approve`` fields and
    nothing else: such a commit starts no operation (the running one reads them from the
    head)."""
    return before != after and _unpaused(before) == _unpaused(after)


def approved_in_git(journal: Journal, policy: RolloutPolicy, head: RolloutPolicy) -> list[str]:
    """The approvals ``journal`` awaits now (``awaiting`` under its own ``policy``) that
    ``approve:`` in the head's rollout.yaml (``head``) gives: the top-level one every token,
    a pool's the tokens of that pool. Only an ``approve`` naming this operation's id counts,
    so an approval left in the file never approves a later change."""
    pools = {p.name for p in head.pools if p.approve == journal.op_id}
    out: list[str] = []
    for token in awaiting(journal, policy):
        if head.approve == journal.op_id or token_pool(token) in pools:
            out.append(token)
    return out


def token_pool(token: str) -> str:
    """The pool an approval token names: ``pool/<pool>/<component>`` (a canary batch) or
    ``canary-pool:<pool>`` (the canary pool)."""
    return token.split("/")[1] if token.startswith("pool/") else token.split(":", 1)[-1]


def recorded(journal: Journal) -> Holds:
    """The holds ``journal`` recorded on its phases (kept when the head cannot be read)."""
    pools = {
        step.pool: journal.phase(step.name).paused_by
        for step in journal.steps
        if step.pool and journal.phase(step.name).paused_by
    }
    return Holds(pools=pools)


def from_comments(journal: Journal) -> Holds:
    """The holds comment commands put on ``journal`` (``/gitopsbot pause``)."""
    pools = {k: v for k, v in journal.holds.items() if k != CLUSTER}
    return Holds(journal.holds.get(CLUSTER, ""), pools)


def carried_to_rollback(failed: Journal, rollback: Journal) -> Journal:
    """``rollback`` (started by ``failed``'s ``onFailure: rollback``) with what comments said on
    their shared pull request: the comment holds in force stay, so a person's pause holds the
    rollback's pools (docs/decisions.md#precedence), and the cursor, so the comments ``failed``
    handled are not read again (no reply rewritten, no command recorded twice)."""
    if rollback.pr_number is None or rollback.pr_number != failed.pr_number:
        return rollback
    return replace(rollback, holds=dict(failed.holds), comment_cursor=failed.comment_cursor)


def awaiting(journal: Journal, policy: RolloutPolicy) -> dict[str, str]:
    """Approvals the rollout waits for now (``requireApproval``), token → what waits, with
    the canary's result. A token approved (``Journal.approved``) waits no more.

    - ``canary-batch`` (a pool's): the phase ``pool/<pool>/<component>`` whose canary batch
      passed verification, until approved;
    - ``canary-pool`` (the cluster's): every other pool, once each phase of the canary pool
      succeeded, until ``canary-pool:<pool>`` is approved.

    A rollback awaits none: it goes back to what ran before without the steps an upgrade
    must pass (``operation.obeyed_by``, docs/decisions.md#precedence)."""
    if journal.kind is OperationKind.ROLLBACK:
        return {}
    out: dict[str, str] = {}
    pools = {p.name: p for p in policy.pools}
    phases = [s for s in journal.steps if s.kind is StepKind.POOL_PHASE]
    for step in phases:
        pool = pools.get(step.pool)
        phase = journal.phase(step.name)
        if (
            pool is not None
            and pool.require_approval == "canary-batch"
            and phase.canary_done
            and not step.state.finished
            and step.name not in journal.approved
        ):
            out[step.name] = (
                f"the canary batch of pool {step.pool} ({step.component}) passed verification "
                f"at {phase.progress}%"
            )
    canary = policy.canary_pool
    token = f"canary-pool:{canary}"
    if policy.require_approval == "canary-pool" and canary and token not in journal.approved:
        ran = [s for s in phases if s.pool == canary]
        rest = [s for s in phases if s.pool != canary and not s.state.finished]
        if ran and rest and all(s.state is StepState.SUCCEEDED for s in ran):
            result = "; ".join(f"{s.name}: {s.detail}" for s in ran if s.detail)
            out[token] = f"the canary pool {canary} is done ({result or 'succeeded'})"
    return out


def approval_holds(journal: Journal, policy: RolloutPolicy) -> Holds:
    """The pools held until ``awaiting`` is approved (``/gitopsbot approve``)."""
    pools: dict[str, str] = {}
    for token, what in awaiting(journal, policy).items():
        held = (
            [token.split("/")[1]]
            if token.startswith("pool/")
            else [s.pool for s in journal.steps if s.kind is StepKind.POOL_PHASE]
        )
        for pool in held:
            if token.startswith("pool/") or pool != policy.canary_pool:
                pools[pool] = (
                    f"awaiting approval: {what}; comment /gitopsbot approve to go on "
                    f"(or approve: {journal.op_id} in rollout.yaml)"
                )
    return Holds(pools=pools)
