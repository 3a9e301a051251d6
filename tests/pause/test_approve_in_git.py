"""Approval in Git (docs/pause.md, issue 28 item 10): ``approve: <operation id>`` in
rollout.yaml, at the top or per pool, beside ``/gitopsbot approve``. Bound to the operation
it names, so an approval left in the file never approves a later change; read from the
watched branch's head each pass (an approve-only commit starts no operation); recorded as a
comment's approval is. Its located errors are in ``tests/fleet/test_hostile_input.py``."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

from gitopsbot.core.fleet.model import Component, PoolPolicy, RolloutPolicy
from gitopsbot.core.operations import pause
from gitopsbot.core.records.journal import (
    Journal,
    OperationKind,
    OperationStatus,
    PhaseProgress,
    PhaseState,
    Step,
    StepKind,
    StepState,
)
from tests.executor.conftest import Env
from tests.executor.test_reconciler_upgrade import drive
from tests.pause.test_pause_git import M
from tests.pause.test_pr_commands import PR, _approval_files

AT = datetime(2026, 12, 4, 18, 0, tzinfo=UTC)
OP = "lab-3f1c2a9b7d10"
STEP_A = "pool/a/hypervisor"
ROLLOUT = "clusters/lab/rollout.yaml"


def _awaiting_a() -> tuple[Journal, RolloutPolicy]:
    """An operation whose pool a passed its canary batch and awaits approval."""
    policy = RolloutPolicy(
        pools=(
            PoolPolicy("a", canary_batch_percentage=25, require_approval="canary-batch"),
            PoolPolicy("b"),
        )
    )
    steps = tuple(
        Step(f"pool/{p}/hypervisor", StepKind.POOL_PHASE, StepState.RUNNING, pool=p,
             component=Component.HYPERVISOR)
        for p in ("a", "b")
    )  # fmt: skip
    phase = PhaseProgress(STEP_A, PhaseState.PAUSED, progress=25, canary_done=True)
    journal = Journal(OP, OperationKind.UPGRADE, "lab", "3f1c2a9b7d10", AT, steps=steps)
    return journal.with_phase(phase), policy


def test_only_an_approve_naming_this_operation_approves() -> None:
    journal, policy = _awaiting_a()
    assert list(pause.awaiting(journal, policy)) == [STEP_A]

    def head(top: str = "", a: str = "", b: str = "") -> RolloutPolicy:
        pools = (replace(policy.pools[0], approve=a), replace(policy.pools[1], approve=b))
        return replace(policy, approve=top, pools=pools)

    assert pause.approved_in_git(journal, policy, head()) == []
    assert pause.approved_in_git(journal, policy, head(a=OP)) == [STEP_A]
    assert pause.approved_in_git(journal, policy, head(top=OP)) == [STEP_A]
    # Stale (an earlier operation's), or another pool's: nothing.
    assert pause.approved_in_git(journal, policy, head(top="lab-000000000000")) == []
    assert pause.approved_in_git(journal, policy, head(a="lab-000000000000")) == []
    assert pause.approved_in_git(journal, policy, head(b=OP)) == []
    # Approved already: awaited no more, so nothing to give again.
    done = replace(journal, approved=(STEP_A,))
    assert pause.approved_in_git(done, policy, head(a=OP)) == []
    # The hold says both ways to approve.
    why = pause.approval_holds(journal, policy).reason("a")
    assert why.endswith(f"comment /gitopsbot approve to go on (or approve: {OP} in rollout.yaml)")


def test_an_approve_edit_alone_starts_no_operation() -> None:
    before = RolloutPolicy(pools=(PoolPolicy("a"),))
    assert pause.pause_only(before, replace(before, approve=OP))
    assert pause.pause_only(before, replace(before, pools=(PoolPolicy("a", approve=OP),)))
    assert not pause.pause_only(before, replace(before, pools=(PoolPolicy("a", nodes=3),)))


def _commit_rollout(env: Env, message: str, text: str) -> str:
    env.human.pull()
    return env.human.commit(message, {ROLLOUT: text})


def test_approval_in_git_after_the_canary_batch(env: Env) -> None:
    env.world.nodes["a"] = 4
    files = _approval_files()
    rec = env.reconciler()
    rec.reconcile("lab")
    sha = env.merge_pr(PR, "lab: hv:2", files)
    op = f"lab-{sha[:12]}"
    for _ in range(60):
        rec.reconcile("lab")
        env.world.tick()
        env.clock.t += M
        j = rec.store.current("lab")
        if j.phase(STEP_A).paused_by:
            break
    assert j.op_id == op and j.phase(STEP_A).state is PhaseState.PAUSED
    assert f"approve: {op} in rollout.yaml" in j.step(STEP_A).detail

    # An approval of another operation (left from an earlier change) approves nothing.
    text = files[ROLLOUT]
    stale = text.replace("  a:\n", "  a:\n    approve: lab-0123456789ab\n", 1)
    _commit_rollout(env, "lab: stale approval", stale)
    for _ in range(3):
        rec.reconcile("lab")
        env.clock.t += M
    j = rec.store.current("lab")
    assert j.approved == () and not env.world.switch("a")
    assert j.phase(STEP_A).state is PhaseState.PAUSED

    # This operation's id under pool a: approved at the next pass, recorded with where.
    head = _commit_rollout(env, "lab: approve the canary", text.replace(
        "  a:\n", f"  a:\n    approve: {op}\n", 1))  # fmt: skip
    rec.reconcile("lab")
    j = rec.store.current("lab")
    assert j.approved == (STEP_A,) and env.world.switch("a")
    assert j.commands[-1] == (f"{ROLLOUT} at {head[:12]}: approve {op}: approved {STEP_A}"), (
        j.commands
    )
    assert rec.store.queued("lab") is None  # approve-only edits start no operation
    done = drive(env, rec)
    assert done.op_id == op and done.status is OperationStatus.SUCCEEDED, done.failure
