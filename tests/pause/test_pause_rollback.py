"""A person's pause and the automatic rollback (docs/decisions.md, "A failure is remediated
first ... the pause then holds the rollback's pools"; issue 28 item 3), through the reconciler
with the in-memory forge.

The automatic rollback runs on the failed upgrade's pull request: a ``/gitopsbot pause`` there
holds the rollback's pools, and a comment hold in force when the upgrade failed still holds
the rollback (it goes on from the same request). Comments the upgrade already handled are
not read again: no reply is rewritten, no command applied twice."""

from __future__ import annotations

from collections.abc import Callable

from gitopsbot.bot.reconciler import Reconciler
from gitopsbot.core.forge.forge_types import find_marker
from gitopsbot.core.records.journal import Journal, OperationKind, OperationStatus, PhaseState
from tests.executor.conftest import Env, fleet_files
from tests.executor.test_reconciler_upgrade import drive
from tests.pause.test_pause_git import M

PR = 4


def _replies(env: Env) -> dict[int, str]:
    out = {}
    for c in env.forge.comments.get(PR, []):
        tag = find_marker(c.body)
        if tag is not None and tag.marker.startswith("cmd-"):
            out[int(tag.marker[4:])] = c.body
    return out


def _until_rollback(env: Env, rec: Reconciler) -> Journal:
    """Pool a's upgrade goes to the end, pool b's does one batch (one of its two nodes), then
    the controller stops until b's 3-minute maxDuration halts it and the rollback starts."""
    beats = 0
    for _ in range(30):
        rec.reconcile("lab")
        if env.world.switch("a") or (beats == 0 and env.world.switch("b")):
            beats += env.world.switch("b")
            env.world.tick()
        env.clock.t += M
        j = rec.store.current("lab")
        if j is not None and j.kind is OperationKind.ROLLBACK:
            return j
    raise AssertionError(rec.store.current("lab"))


def _passes(env: Env, rec: Reconciler, until: Callable[[Journal], bool]) -> Journal:
    """Passes, one controller beat and a minute each, until ``until(journal)``."""
    for _ in range(20):
        rec.reconcile("lab")
        env.world.tick()
        env.clock.t += M
        j = rec.store.current("lab")
        if j is not None and until(j):
            return j
    raise AssertionError(rec.store.current("lab"))


def _upgrade(env: Env) -> Reconciler:
    env.forge.writers.add("alice")
    rec = env.reconciler()
    rec.reconcile("lab")
    env.merge_pr(PR, "lab: hv:2", fleet_files("1.0.0", "hv:2", max_duration="3m"))
    return rec


def test_a_pause_by_comment_on_the_failed_upgrades_request_holds_the_rollback(env: Env) -> None:
    rec = _upgrade(env)
    back = _until_rollback(env, rec)
    assert back.pr_number == PR
    said = env.forge.say(PR, "alice", "/gitopsbot pause")
    j = _passes(env, rec, lambda j: bool(j.phase("pool/a/hypervisor").paused_by))
    assert j.op_id == back.op_id and j.status is OperationStatus.RUNNING
    assert j.holds == {"*": f"paused by @alice (comment {said.id})"}
    assert j.phase("pool/a/hypervisor").state is PhaseState.PENDING  # nothing opened
    assert not env.world.switch("a") and not env.world.switch("b")
    assert "@alice: paused" in _replies(env)[said.id]
    env.forge.say(PR, "alice", "/gitopsbot resume")
    done = drive(env, rec)
    assert done.op_id == back.op_id and done.status is OperationStatus.SUCCEEDED, done.failure
    assert env.world.images() == {"hv:1"}


def test_a_comment_hold_in_force_when_the_upgrade_failed_holds_its_rollback_read_once(
    env: Env,
) -> None:
    rec = _upgrade(env)
    for _ in range(10):  # pool a's upgrade, to the end
        rec.reconcile("lab")
        if rec.store.current("lab").step("pool/a/hypervisor").state.finished:
            break
        if env.world.switch("a"):
            env.world.tick()
        env.clock.t += M
    ignored = env.forge.say(PR, "mallory", "/gitopsbot pause")
    # Pool a is done when alice holds it; pool b runs into its maxDuration.
    said = env.forge.say(PR, "alice", "/gitopsbot pause a")
    rec.reconcile("lab")
    upgrade = rec.store.current("lab")
    assert upgrade is not None and upgrade.holds == {"a": f"paused by @alice (comment {said.id})"}
    replies = _replies(env)
    back = _until_rollback(env, rec)
    j = _passes(env, rec, lambda j: j.step("backup").state.finished)
    assert j.op_id == back.op_id and j.status is OperationStatus.RUNNING
    # The hold goes on from the same pull request: pool a of the rollback waits for it.
    assert j.holds == {"a": f"paused by @alice (comment {said.id})"}
    assert j.comment_cursor == said.id
    j = _passes(env, rec, lambda j: bool(j.phase("pool/a/hypervisor").paused_by))
    assert j.phase("pool/a/hypervisor").paused_by == f"paused by @alice (comment {said.id})"
    assert j.phase("pool/a/hypervisor").state is PhaseState.PENDING
    assert not env.world.switch("a")
    # Nothing the upgrade handled is handled again: the replies stay, no command is replayed.
    assert _replies(env) == replies and ignored.id in replies
    assert j.commands == ()
    env.forge.say(PR, "alice", "/gitopsbot resume a")
    done = drive(env, rec)
    assert done.op_id == back.op_id and done.status is OperationStatus.SUCCEEDED, done.failure
    assert len(done.commands) == 1 and env.world.images() == {"hv:1"}
