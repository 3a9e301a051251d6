"""The availability budget in the sandbox (issue 18, docs/rollout-gates.md): real helm 4,
git over HTTP, the API emulator and controller simulator, the local GitHub.

- A pool of five nodes with ``maxUnavailable: 2`` and ``batchPercentage: 40`` (two nodes),
  one node cordoned by a person: the batch the bot pins in the TensorFusionCluster shrinks
  to 20% (one node), the bot never touches the Node (no write to nodes reaches the API
  server; it is still cordoned at the end), and the per-node record shows it ``cordoned``,
  never counted as done.
- ``maxUnavailable: 1`` and one node NotReady: the pool waits, the reason naming the node,
  and goes on once the node is Ready again.
- ``maxUnavailable: 1`` with ``batchInterval: 0s`` (issue 28 item 7): the controller cannot
  start a batch the budget does not allow, however short the interval.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from gitopsbot.core.records.journal import Journal, OperationKind, OperationStatus, PhaseState
from gitopsbot.core.records.node_states import DONE, NodeState
from gitopsbot.core.rollouts.tf_objects import TF, node_out_of_service
from gitopsbot.sandbox.simulator.store_port import StorePort
from gitopsbot.sandbox.story import StoryWorld, git
from gitopsbot.sandbox.story_bot import BotRunner
from gitopsbot.sandbox.story_fleet import CLUSTER
from gitopsbot.sandbox.story_waits import finished_op, wait_for
from tests.e2e.conftest import (  # noqa: F401  (_needs_git, _uses_binaries: autouse)
    NEW_IMAGE,
    Watch,
    _needs_git,
    _uses_binaries,
    pool_policies,
)

pytestmark = pytest.mark.slow

ROLLOUT = f"clusters/{CLUSTER}/rollout.yaml"
STEP = "pool/shared/hypervisor"
NODE = "tensor-fusion-shared-gpu-{:03d}"


def merge_with(world: StoryWorld, pool_keys: str) -> str:
    """The proposal with ``pool_keys`` added to pool shared's rollout.yaml by a person before
    the merge; returns the operation id."""
    proposal = world.propose()
    h = world.human
    git("fetch", "--quiet", "origin", cwd=h)
    git("checkout", "--quiet", "-B", "budget", f"origin/{proposal.branch}", cwd=h)
    path = h / ROLLOUT
    path.write_text(path.read_text().replace("  shared:\n", "  shared:\n" + pool_keys, 1))
    git("commit", "--quiet", "-am", "availability budget for pool shared", cwd=h)
    git("push", "--quiet", "origin", f"budget:{proposal.branch}", cwd=h)
    sha = world.merge(proposal.number)
    return f"{CLUSTER}-{sha[:12]}"


def story(make_world: Callable[..., StoryWorld], **changes: object) -> StoryWorld:
    options: dict[str, object] = {
        "pools": 1,
        "nodes": 5,
        "window_lead_seconds": None,
        "batch_percentage": 40,
        "batch_interval": "1s",
        "hypervisor_ready_delay": 0.5,
        "on_failure": "halt",
        "poll_interval": "2s",
    }
    options.update(changes)
    return make_world(**options)


def node_writes(world: StoryWorld) -> list[tuple[str, str, int]]:
    assert world.sandbox is not None and world.sandbox.api is not None
    return [
        r
        for r in world.sandbox.api.requests
        if r[0] in ("PATCH", "PUT", "POST", "DELETE") and r[1].startswith("/api/v1/nodes")
    ]


def test_a_cordoned_node_shrinks_the_batch_and_is_never_done(
    make_world: Callable[..., StoryWorld], make_bot: Callable[..., BotRunner]
) -> None:
    t0 = time.monotonic()
    world = story(make_world)
    cordoned = NODE.format(2)
    store = world.store()
    store.patch_merge("v1", "Node", None, cordoned, {"spec": {"unschedulable": True}})
    pinned: list[object] = []
    watch = Watch()

    def on_pass(result: object, journal: Journal | None) -> None:
        watch(result, journal)  # type: ignore[arg-type]
        policy = pool_policies(world).get("shared") or {}
        if policy.get("autoUpdateHypervisor"):
            pinned.append(policy.get("batchPercentage"))

    make_bot(world, on_pass=on_pass)
    op = merge_with(world, "    maxUnavailable: 2\n")
    done = wait_for(world, finished_op(OperationKind.UPGRADE), what="the upgrade", timeout=120)
    assert done.op_id == op and done.status is OperationStatus.SUCCEEDED, done.failure
    phase = done.phase(STEP)
    # the TensorFusionCluster was opened at 20% (one node), never at the 40% Git asks for
    assert pinned and set(pinned) == {20}, pinned
    assert phase.batch_percentage == 20
    details = {
        j.step(STEP).detail
        for _, j in watch.passes
        if j is not None and j.op_id == op and any(p.step == STEP for p in j.phases)
    }
    shrunk = "rolling at 20% (batch 40% shrunk to 20% (1 node(s)): maxUnavailable 2 of 5"
    assert any(d.startswith(shrunk) and cordoned in d for d in details), details
    # the person's cordon stands; the bot wrote nothing to Nodes
    node = store.get("v1", "Node", None, cordoned)
    assert node is not None and node["spec"].get("unschedulable") is True
    assert node_writes(world) == []
    # per node: the cordoned one is cordoned, never done; the four others done
    records = {n.name: n for n in phase.nodes}
    assert records[cordoned].state is NodeState.CORDONED, records
    assert all(r.state in DONE for name, r in records.items() if name != cordoned), records
    for _, j in watch.passes:
        if j is not None and j.op_id == op and any(p.step == STEP for p in j.phases):
            for n in j.phase(STEP).nodes:
                assert n.name != cordoned or n.state not in DONE, n
    print(f"budget, cordoned node: {time.monotonic() - t0:.1f}s")


def test_a_not_ready_node_uses_the_budget_until_it_is_ready(
    make_world: Callable[..., StoryWorld], make_bot: Callable[..., BotRunner]
) -> None:
    t0 = time.monotonic()
    world = story(make_world, batch_percentage=20)
    down = NODE.format(1)
    store = world.store()

    def ready(flag: str) -> None:
        node = store.get("v1", "Node", None, down)
        assert node is not None
        conditions = [
            {**c, "status": flag} if c.get("type") == "Ready" else c
            for c in node["status"]["conditions"]
        ]
        store.update_status({**node, "status": {**node["status"], "conditions": conditions}})

    ready("False")
    make_bot(world)
    op = merge_with(world, "    maxUnavailable: 1\n")

    def waiting(j: Journal) -> bool:
        return j.op_id == op and "used up" in j.phase(STEP).batches.waiting

    def running(store_: object) -> Journal | None:
        j = store_.current(CLUSTER)  # type: ignore[attr-defined]
        return j if j is not None and any(p.step == STEP for p in j.phases) and waiting(j) else None

    j = wait_for(world, running, what="the wait for the budget", timeout=90)
    phase = j.phase(STEP)
    assert phase.state is PhaseState.PENDING and phase.progress == 0
    assert phase.batches.waiting == (
        f"availability budget: maxUnavailable 1 of 5 nodes used up by 1 out of service ({down})"
    )
    assert not pool_policies(world)["shared"].get("autoUpdateHypervisor")
    time.sleep(2)
    images = world.hypervisor_images()
    assert not any(got == [NEW_IMAGE] for got in images.values()), images
    ready("True")
    done = wait_for(world, finished_op(OperationKind.UPGRADE), what="the upgrade", timeout=120)
    assert done.op_id == op and done.status is OperationStatus.SUCCEEDED, done.failure
    images = world.hypervisor_images()
    assert all(got == [NEW_IMAGE] for got in images.values()), images
    print(f"budget, NotReady node: {time.monotonic() - t0:.1f}s")


class Unavailable:
    """The most pool nodes out of service at once, told from every change the API server
    makes (no sampling): a Node cordoned or NotReady, or a GPUNode a batch set Pending."""

    def __init__(self, store: StorePort) -> None:
        self.down: dict[str, bool] = {}
        self.taken: dict[str, bool] = {}
        self.most: set[str] = set()
        for node in store.list("v1", "Node"):
            self.node(node)
        for gpunode in store.list(TF, "GPUNode"):
            self.gpunode(gpunode)

    def node(self, obj: dict[str, Any]) -> None:
        self.down[obj["metadata"]["name"]] = node_out_of_service(obj)

    def gpunode(self, obj: dict[str, Any]) -> None:
        self.taken[obj["metadata"]["name"]] = (obj.get("status") or {}).get("phase") == "Pending"

    def now(self) -> set[str]:
        pool = set(self.taken)
        return {n for n in pool if self.taken[n] or self.down.get(n, False)}

    def __call__(self, _etype: str, obj: dict[str, Any]) -> None:
        if obj.get("kind") == "Node":
            self.node(obj)
        elif obj.get("kind") == "GPUNode":
            self.gpunode(obj)
        else:
            return
        now = self.now()
        if len(now) > len(self.most):
            self.most = now


def test_a_short_batch_interval_cannot_outrun_the_budget(
    make_world: Callable[..., StoryWorld], make_bot: Callable[..., BotRunner]
) -> None:
    """Issue 28 item 7: two nodes, Git asks for both at once with ``batchInterval: 0s`` and
    ``maxUnavailable: 1``. The first node is cordoned the moment its batch is recorded done;
    the controller would start the second batch at once (it did: both nodes out of service),
    but the bot pinned a 10 s interval, closed the switch at the boundary and waits for the
    budget; the second batch runs once the person uncordons the node. At most one node is
    ever out of service."""
    t0 = time.monotonic()
    world = story(make_world, nodes=2, batch_percentage=100, batch_interval="0s")
    store = world.store()
    unavailable = Unavailable(store)
    cordoned: list[str] = []

    def on_event(etype: str, obj: dict[str, Any]) -> None:
        unavailable(etype, obj)
        if obj.get("kind") != "GPUPool" or cordoned:
            return
        status = (obj.get("status") or {}).get("componentStatus") or {}
        if status.get("hypervisorUpdateProgress") == 50:
            # a person cordons the node the first batch just brought back
            images = world.hypervisor_images()
            first = next(n for n, got in sorted(images.items()) if got == [NEW_IMAGE])
            cordoned.append(first)
            store.patch_merge("v1", "Node", None, first, {"spec": {"unschedulable": True}})

    store.subscribe(on_event)
    pinned: list[tuple[object, object]] = []
    watch = Watch()

    def on_pass(result: object, journal: Journal | None) -> None:
        watch(result, journal)  # type: ignore[arg-type]
        if journal is None or not any(p.step == STEP for p in journal.phases):
            return  # before the operation: the chart's own policy (F1) is no pin of the bot
        policy = pool_policies(world).get("shared") or {}
        if policy.get("autoUpdateHypervisor"):
            pinned.append((policy.get("batchPercentage"), policy.get("batchInterval")))

    make_bot(world, on_pass=on_pass)
    op = merge_with(world, "    maxUnavailable: 1\n")

    def running(store_: object) -> Journal | None:
        j = store_.current(CLUSTER)  # type: ignore[attr-defined]
        if j is None or j.op_id != op or not any(p.step == STEP for p in j.phases):
            return None
        # waiting for the budget; or past it: the second batch ran (the defect)
        return (
            j if "used up" in j.phase(STEP).batches.waiting or j.phase(STEP).progress > 50 else None
        )

    j = wait_for(world, running, what="the wait for the budget", timeout=120)
    assert cordoned, "the first batch never finished"
    assert len(unavailable.most) == 1, f"out of service at once: {sorted(unavailable.most)}"
    assert j.phase(STEP).progress == 50
    assert cordoned[0] in j.phase(STEP).batches.waiting
    assert not pool_policies(world)["shared"].get("autoUpdateHypervisor")
    assert unavailable.most == {cordoned[0]}, unavailable.most
    store.patch_merge("v1", "Node", None, cordoned[0], {"spec": {"unschedulable": False}})
    done = wait_for(world, finished_op(OperationKind.UPGRADE), what="the upgrade", timeout=120)
    assert done.op_id == op and done.status is OperationStatus.SUCCEEDED, done.failure
    images = world.hypervisor_images()
    assert all(got == [NEW_IMAGE] for got in images.values()), images
    # never more than the budget out of service, each batch opened by the bot at one node
    # with the controller's interval pinned; Git's interval back once the switch closed
    assert len(unavailable.most) == 1, unavailable.most
    assert pinned and set(pinned) == {(50, "10s")}, pinned
    assert pool_policies(world)["shared"].get("batchInterval") == "0s"
    print(f"budget, short batchInterval: {time.monotonic() - t0:.1f}s")
