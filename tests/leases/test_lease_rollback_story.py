"""A Lease lost in the middle of an automatic rollback (issue 28 item 3, lease lost ×
rollback; docs/leases.md, docs/decisions.md "A replica without the Lease changes nothing"),
in the sandbox with real helm 4, git over HTTP, the API emulator and the controller
simulator.

The gate of pool shared fails after the first batch; ``onFailure: rollback`` starts the
rollback on replica ``bot-a``. Its Lease (``LeaseKeeper`` over the in-memory Leases, on a
hand-moved clock: the adapter edge) is lost while the ``rollback`` step's helm runs, after the
step's start was recorded: bot-a records nothing more, though it goes on passing. Replica
``bot-b`` (its own mirror, nothing in memory) takes the Lease and the cluster, recognises the
Helm revision written after the step's start, and finishes: one Helm revision for the
rollback, every step recorded once as succeeded, Helm on the old chart, every hypervisor on
the old image."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from gitopsbot.bot.lease_keeper import LeaseKeeper, LeaseTiming
from gitopsbot.core.records.journal import (
    Journal,
    OperationKind,
    OperationStatus,
    PhaseState,
    StepState,
)
from gitopsbot.core.replicas.sharding import cluster_lease
from gitopsbot.sandbox.prometheus import PromServer
from gitopsbot.sandbox.story import StoryWorld, git
from gitopsbot.sandbox.story_bot import BotRunner
from gitopsbot.sandbox.story_fleet import CLUSTER
from gitopsbot.sandbox.story_waits import finished_op, wait_for
from gitopsbot.testing import FakeLeases
from tests.e2e.conftest import (  # noqa: F401  (fixtures; _needs_git, _uses_binaries: autouse)
    NS,
    OLD_IMAGE,
    RELEASE,
    Watch,
    _needs_git,
    _uses_binaries,
    helm_history,
    make_bot,
    make_world,
)
from tests.gates.test_gates_story import (  # noqa: F401  (prom: a fixture)
    QUERY,
    ROLLOUT,
    STEP,
    after_first_batch,
    gates_yaml,
    prom,
    shared_switch,
    story,
)
from tests.leases.test_lease_keeper import Clock

pytestmark = pytest.mark.slow

TIMING = LeaseTiming(duration_seconds=15, renew_deadline_seconds=10, retry_period_seconds=2)
HELM_SECRET = f"sh.helm.release.v1.{RELEASE}.v"


def helm_revisions(world: StoryWorld) -> int:
    """Helm's revisions of the release, counted from its storage (Secrets) in the emulator:
    cheap enough to ask at every lease check."""
    return sum(
        1
        for s in world.store().list("v1", "Secret", NS)
        if s["metadata"]["name"].startswith(HELM_SECRET)
    )


@pytest.mark.parametrize("lost_in", ["rollback-step", "pool-phase"])
def test_a_lease_lost_during_the_rollback_is_finished_once_by_the_next_holder(
    make_world: Callable[..., StoryWorld],  # noqa: F811  (the imported fixture)
    make_bot: Callable[..., BotRunner],  # noqa: F811
    prom: PromServer,  # noqa: F811
    lost_in: str,
) -> None:
    """``rollback-step``: lost while the ``rollback`` step's helm runs (its start recorded);
    ``pool-phase``: lost in the pass that opened the rollback's pool switch."""
    t0 = time.monotonic()
    prom.vector(QUERY, ({"job": "tf"}, 0.01))
    world = story(make_world, batch_interval="3s", on_failure="rollback")
    h = world.human
    git("pull", "--quiet", "origin", "main", cwd=h)
    path = h / ROLLOUT
    text = f"prometheus:\n  url: {prom.url}\n  timeout: 2s\n" + path.read_text()
    path.write_text(text.replace("  shared:\n", "  shared:\n" + gates_yaml(), 1))
    git("commit", "--quiet", "-am", "gates for pool shared", cwd=h)
    git("push", "--quiet", "origin", "HEAD:main", cwd=h)

    clock = Clock()  # the Leases' clock, moved by hand
    leases = FakeLeases()
    name = cluster_lease(CLUSTER)
    lease_a = LeaseKeeper(leases, "gitopsbot", name, "bot-a", clock, TIMING)
    lease_b = LeaseKeeper(leases, "gitopsbot", name, "bot-b", clock, TIMING)
    assert lease_a.try_acquire().held
    assert not lease_b.try_acquire().held  # bot-b watches the Lease from now on
    before = helm_revisions(world)  # the install
    lost: list[str] = []
    since: list[int] = []

    def lose() -> None:
        # bot-a stops renewing (partitioned): its renew deadline and the duration pass.
        clock.sleep(TIMING.duration_seconds + 1)
        lost.append(lost_in)
        since.append(len(bot_a.passes))  # the passes from the one that lost it on

    def may_act_a(cluster: str) -> bool:
        # The revision after the upgrade's is the rollback's: written while its step runs.
        if lost_in == "rollback-step" and not lost and helm_revisions(world) >= before + 2:
            lose()
        return lease_a.held

    watch = Watch()
    bad = after_first_batch(watch, lambda _j: prom.vector(QUERY, ({"job": "tf"}, 0.93)))

    def on_pass(result: Any, journal: Journal | None) -> None:
        bad(result, journal)
        opened = (
            journal is not None
            and journal.kind is OperationKind.ROLLBACK
            and any(p.step == STEP for p in journal.phases)
            and journal.phase(STEP).state is PhaseState.ROLLING
        )
        if lost_in == "pool-phase" and not lost and opened:
            lose()

    bot_a = make_bot(world, name="bot-a", on_pass=on_pass, may_act=may_act_a)
    saved_after_loss: list[str] = []
    real_save = bot_a.store.save

    def save(journal: Journal, message: str, **kw: Any) -> None:
        if lost:
            saved_after_loss.append(message)
        real_save(journal, message, **kw)

    bot_a.store.save = save  # type: ignore[method-assign]
    proposal = world.propose()
    op = f"{CLUSTER}-{world.merge(proposal.number)[:12]}"

    def running_rollback(store: Any) -> Journal | None:
        j = store.current(CLUSTER)
        return j if j is not None and j.kind is OperationKind.ROLLBACK else None

    if lost_in == "rollback-step":
        # The upgrade fails at the gate, the rollback starts, its step runs helm, and the
        # Lease is gone when helm returns: "lease lost during rollback", nothing recorded.
        found = watch.until(
            "bot-a losing the Lease during the rollback step",
            lambda r, _j: r.detail == "lease lost during rollback",
            timeout=240,
        )
        assert found[0].action == "paused"
        stuck = wait_for(world, running_rollback, what="the rollback recorded", timeout=30)
        step = stuck.step("rollback")
        assert step.state is StepState.RUNNING and step.started_at is not None  # start recorded
    else:
        watch.until("bot-a losing the Lease in the pool phase", lambda _r, _j: bool(lost), 240)
        stuck = wait_for(world, running_rollback, what="the rollback recorded", timeout=30)
        assert stuck.step("rollback").state is StepState.SUCCEEDED
    assert not lease_a.held
    assert stuck.reverts_op == op and stuck.status is OperationStatus.RUNNING
    time.sleep(4)  # bot-a goes on passing: each one changes nothing
    after = bot_a.passes[since[0] :]
    assert len(after) >= 2 and all(p.detail.startswith("lease ") for p in after), after

    # bot-b takes the Lease and the cluster (as its ShardKeeper would: the scheduler gets the
    # cluster once it holds it), and finishes the rollback.
    assert lease_b.try_acquire().held
    make_bot(world, name="bot-b", may_act=lambda cluster: lease_b.held)
    done = wait_for(
        world, finished_op(OperationKind.ROLLBACK, after=op), what="the rollback", timeout=180
    )
    assert done.op_id == stuck.op_id
    assert done.status is OperationStatus.SUCCEEDED, done.failure
    assert all(s.state is StepState.SUCCEEDED and s.attempts == 1 for s in done.steps), done.steps
    if lost_in == "rollback-step":
        assert "already made by this operation" in done.step("rollback").detail, done.steps
    history = helm_history(world)
    mine = f"gitopsbot op={done.op_id} step=helm-upgrade"
    ours = [h for h in history if h["description"] == mine]
    assert len(ours) == 1 and ours[0] == history[-1], history  # exactly one rollback revision
    assert len(history) == before + 2, history  # the install, the upgrade, the rollback
    assert history[-1]["chart"] == "tensor-fusion-1.8.0" and history[-1]["status"] == "deployed"
    effect = done.step("rollback").effect
    assert effect is not None and effect.helm_revision == history[-1]["revision"]
    images = world.hypervisor_images()
    assert images and all(got == [OLD_IMAGE] for got in images.values()), images
    assert not shared_switch(world)
    assert done.phase(STEP).state is PhaseState.DONE
    # bot-a, still passing, never recorded anything after the loss.
    assert saved_after_loss == []
    print(f"lease lost in the {lost_in} x rollback: {time.monotonic() - t0:.1f}s")
