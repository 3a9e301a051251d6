"""A halted rollout and what ``onFailure`` does about it (issue 5 parts 3 and 5).

One GPU node's new hypervisor never becomes ready, so its GPUNode stays Pending and the
controller's rollout stops there for good (F4). The bot sees no progress for
``stallTimeout``, closes the switch, fails the operation naming the Pending node, then:

- ``onFailure: rollback``: commits ``git revert`` of the merge to main (Git stays the truth)
  and rolls back (here after a person repaired the node);
- ``onFailure: revert-pr``: opens a pull request with that revert for a person to merge.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace

import pytest

from gitopsbot.bot.reconciler import PassResult
from gitopsbot.core.records.journal import Journal, OperationKind, OperationStatus, StepState
from gitopsbot.sandbox.story import StoryWorld, git
from gitopsbot.sandbox.story_bot import BotRunner
from gitopsbot.sandbox.story_fleet import CLUSTER
from gitopsbot.sandbox.story_waits import finished_op, wait_for
from tests.e2e.conftest import NS, OLD_IMAGE, RELEASE, helm_history

pytestmark = pytest.mark.slow

BROKEN = "tensor-fusion-shared-gpu-001"


def _break(world: StoryWorld, node: str) -> None:
    assert world.sandbox is not None and world.sandbox.sim is not None
    sim = world.sandbox.sim
    sim.config = replace(sim.config, broken_nodes=frozenset({node}))


def _repair(world: StoryWorld, node: str) -> None:
    """A person fixes the node and deletes its stuck pod; the controller makes a new one."""
    assert world.sandbox is not None and world.sandbox.sim is not None
    sim = world.sandbox.sim
    sim.config = replace(sim.config, broken_nodes=frozenset())
    world.store().delete("v1", "Pod", NS, f"hypervisor-{node}")


def _halted_upgrade(world: StoryWorld) -> tuple[str, str]:
    """Propose, merge, wait until the upgrade fails; returns (merge sha, op id)."""
    proposal = world.propose()
    merge_sha = world.merge(proposal.number)
    op_id = f"{CLUSTER}-{merge_sha[:12]}"
    failed = wait_for(
        world,
        lambda store: (
            j if (j := store.history(CLUSTER, op_id)) is not None and not j.active else None
        ),
        what="the halt",
        timeout=120,
    )
    assert failed.status is OperationStatus.FAILED
    step = failed.step("pool/shared/hypervisor")
    assert step.state is StepState.FAILED
    assert "no progress for" in failed.failure and BROKEN in failed.failure, failed.failure
    assert failed.step("pool/pool-2/hypervisor").state is StepState.PENDING  # never started
    # The switch was closed again (R22): the controller rolls nothing more.
    tfc = world.store().get("tensor-fusion.ai/v1", "TensorFusionCluster", None, "tensor-fusion")
    assert tfc is not None
    for pool in tfc["spec"]["gpuPools"]:
        rolling = pool["specTemplate"]["nodeManagerConfig"]["nodePoolRollingUpdatePolicy"]
        assert rolling.get("autoUpdateHypervisor") is False, pool["name"]
    assert failed.op_id == op_id
    return merge_sha, op_id


def test_halt_then_automatic_rollback_committed_as_a_revert(
    make_world: Callable[..., StoryWorld], make_bot: Callable[..., BotRunner]
) -> None:
    world = make_world(window_lead_seconds=None, stall_timeout="4s", on_failure="rollback")
    _break(world, BROKEN)
    repaired: list[str] = []

    def repair_once_failed(result: PassResult, journal: Journal | None) -> None:
        # Runs on the bot's thread between two passes: the node is fixed as soon as the
        # upgrade has failed, before the rollback reaches the pool.
        failed = journal is not None and journal.status is OperationStatus.FAILED
        if not repaired and (
            failed or (journal is not None and journal.kind is OperationKind.ROLLBACK)
        ):
            repaired.append(result.action)
            _repair(world, BROKEN)

    make_bot(world, on_pass=repair_once_failed)
    merge_sha, op_id = _halted_upgrade(world)

    # Git stays the truth: the bot's revert of the merge is on main.
    git("fetch", "--quiet", "origin", cwd=world.human)
    head_message = git("log", "-1", "--format=%an%n%B", "origin/main", cwd=world.human)
    assert head_message.startswith("gitopsbot\n"), head_message
    assert f"This reverts commit {merge_sha}" in head_message

    rollback = wait_for(
        world, finished_op(OperationKind.ROLLBACK), what="the rollback", timeout=120
    )
    assert repaired
    assert (rollback.status, rollback.failure) == (OperationStatus.SUCCEEDED, "")
    assert rollback.reverts_op == op_id
    history = helm_history(world)
    assert history[-1]["chart"] == "tensor-fusion-1.8.0"
    assert history[-1]["description"] == f"gitopsbot op={rollback.op_id} step=helm-upgrade"
    images = world.hypervisor_images()
    assert images == {node: [OLD_IMAGE] for node in images}


def test_halt_then_revert_pull_request(
    make_world: Callable[..., StoryWorld], make_bot: Callable[..., BotRunner]
) -> None:
    world = make_world(window_lead_seconds=None, stall_timeout="4s", on_failure="revert-pr")
    _break(world, BROKEN)
    make_bot(world)
    merge_sha, op_id = _halted_upgrade(world)

    deadline = time.monotonic() + 30
    assert world.forge is not None
    while True:
        with world.forge.lock:
            reverts = [
                p for p in world.forge.pulls.values() if p.head.startswith("gitopsbot/revert/")
            ]
        if reverts or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert len(reverts) == 1, "no revert pull request was opened"
    pr = reverts[0]
    assert pr.state == "open" and pr.base == "main"
    journal = wait_for(
        world,
        lambda s: j if (j := s.current(CLUSTER)) is not None and j.remediation else None,
        what="the remediation",
        timeout=30,
    )
    assert journal.op_id == op_id and journal.remediation == f"revert-pr:#{pr.number}"
    # The branch carries the revert; main is untouched until a person merges it.
    git("fetch", "--quiet", "origin", cwd=world.human)
    message = git("log", "-1", "--format=%B", f"origin/{pr.head}", cwd=world.human)
    assert f"This reverts commit {merge_sha}" in message
    assert git("rev-parse", "origin/main", cwd=world.human).strip() == merge_sha


def test_a_change_queued_behind_the_halted_upgrade_runs_after_the_rollback_without_it(
    make_world: Callable[..., StoryWorld], make_bot: Callable[..., BotRunner]
) -> None:
    """docs/decisions.md, rollback × a queued change, with real helm: a person pushes two
    controller replicas while the upgrade to 1.8.7 runs (queued behind it). The upgrade halts
    and is rolled back by revert; the queued change's own commit still says 1.8.7, so it never
    runs from it: what Git holds at the revert (1.8.0 with two replicas) runs after the
    rollback. Before, the queued change brought 1.8.7 back once the node was repaired."""
    world = make_world(window_lead_seconds=None, stall_timeout="4s", on_failure="rollback")
    _break(world, BROKEN)
    pushed: list[str] = []
    repaired: list[str] = []

    def meanwhile(result: PassResult, journal: Journal | None) -> None:
        # On the bot's thread between two passes: push once the upgrade runs, repair once
        # it has failed (so the rollback and what follows can roll the pool).
        if not pushed and journal is not None and journal.kind is OperationKind.UPGRADE:
            pushed.append(
                _edit_values(world, lambda t: t.replace("replicaCount: 1", "replicaCount: 2"))
            )
        ended = journal is not None and (
            journal.status is OperationStatus.FAILED or journal.kind is OperationKind.ROLLBACK
        )
        if pushed and not repaired and ended:
            repaired.append(result.action)
            _repair(world, BROKEN)

    make_bot(world, on_pass=meanwhile)
    _halted_upgrade(world)
    rollback = wait_for(
        world, finished_op(OperationKind.ROLLBACK), what="the rollback", timeout=120
    )
    assert rollback.status is OperationStatus.SUCCEEDED, rollback.failure
    after = wait_for(
        world,
        lambda store: (
            j
            if (j := store.history(CLUSTER, f"{rollback.op_id}-after")) is not None and not j.active
            else None
        ),
        what="what Git holds at the revert, after the rollback",
        timeout=120,
    )
    assert after.status is OperationStatus.SUCCEEDED, after.failure
    assert after.desired_sha == rollback.desired_sha
    queued = wait_for(
        world,
        lambda store: store.history(CLUSTER, f"{CLUSTER}-{pushed[0][:12]}"),
        what="the queued change's record",
        timeout=30,
    )
    assert queued.status is OperationStatus.SUPERSEDED
    assert queued.queue.superseded_by == after.op_id
    history = helm_history(world)
    assert [h["chart"] for h in history[-2:]] == ["tensor-fusion-1.8.0"] * 2  # never 1.8.7 again
    values = world.helm("get", "values", RELEASE, "--namespace", NS, "--output", "json")
    assert '"replicaCount":2' in values.replace(" ", ""), values
    images = world.hypervisor_images()
    assert images == {node: [OLD_IMAGE] for node in images}


def _edit_values(world: StoryWorld, edit: Callable[[str], str]) -> str:
    """A person commits an edit of values.yaml to main and pushes it."""
    h = world.human
    git("fetch", "--quiet", "origin", cwd=h)
    git("checkout", "--quiet", "main", cwd=h)
    git("merge", "--quiet", "--ff-only", "origin/main", cwd=h)
    path = h / "clusters" / CLUSTER / "values.yaml"
    path.write_text(edit(path.read_text()))
    git("commit", "--quiet", "-am", "two controller replicas", cwd=h)
    git("push", "--quiet", "origin", "main", cwd=h)
    return git("rev-parse", "HEAD", cwd=h).strip()
