"""Workload awareness in the sandbox (issue 18, docs/workload-awareness.md): real helm 4, git
over HTTP, the API emulator and the controller simulator, whose TensorFusionConnections are
the GPU sessions (sandbox/simulator/sessions.py), the local GitHub.

Workload ``ml/trainer`` of pool shared has four remote client pods, made and recreated by the
simulator as their owner would (bare pods: four tenants), each with a Running connection. The
upgrade (chart 1.8.0 → 1.8.7) moves the client image, and pool shared rolls its client
component (``autoUpdateClient``) with ``waitForWorkloads`` and ``maxTenantDisruption: 25%``:

- ``until: no-active-session``: the client batch waits, the journal naming the sessions, with
  the switch closed and every client pod in place; once the workload is idle (its sessions
  end, its new pods start none), it opens pinned at 25% (one tenant of four a batch, not the
  50% asked) and every client pod is replaced on the new template;
- the sessions never end and the timeout passes with ``onTimeout: halt``: the pool halts,
  naming the sessions, and no client pod was deleted.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import Any

import pytest

from gitopsbot.core.records.journal import Journal, OperationKind, OperationStatus, PhaseState
from gitopsbot.sandbox.simulator import WorkloadSpec
from gitopsbot.sandbox.simulator.sessions import end_session
from gitopsbot.sandbox.story import StoryWorld, git
from gitopsbot.sandbox.story_bot import BotRunner
from gitopsbot.sandbox.story_fleet import CLUSTER
from gitopsbot.sandbox.story_waits import finished_op, wait_for
from tests.e2e.conftest import (  # noqa: F401  (_needs_git, _uses_binaries: autouse)
    Watch,
    _needs_git,
    _uses_binaries,
    pool_policies,
)

pytestmark = pytest.mark.slow

TF = "tensor-fusion.ai/v1"
D = "tensor-fusion.ai"
ROLLOUT = f"clusters/{CLUSTER}/rollout.yaml"
STEP = "pool/shared/client"
GPUPOOL = "tensor-fusion-shared"
NS, WORKLOAD, CLIENTS = "ml", "trainer", 4
WORKLOAD_SPEC = WorkloadSpec(WORKLOAD, "shared", namespace=NS, replicas=1, clients=CLIENTS)


def merge_with(world: StoryWorld, pool_keys: str) -> str:
    """The proposal with pool shared rolling its clients too (``pool_keys`` added; R13
    acknowledged), committed by a person before the merge; returns the operation id."""
    proposal = world.propose()
    h = world.human
    git("fetch", "--quiet", "origin", cwd=h)
    git("checkout", "--quiet", "-B", "workloads", f"origin/{proposal.branch}", cwd=h)
    path = h / ROLLOUT
    text = path.read_text().replace(
        "    phases: [hypervisor]\n",
        "    phases: [hypervisor, client]\n    autoUpdateClient: true\n" + pool_keys,
        1,
    )
    text += "acknowledgements:\n  R13: the sandbox's client pods are test pods\n"
    path.write_text(text)
    git("commit", "--quiet", "-am", "pool shared: clients, workload aware", cwd=h)
    git("push", "--quiet", "origin", f"workloads:{proposal.branch}", cwd=h)
    sha = world.merge(proposal.number)
    return f"{CLUSTER}-{sha[:12]}"


def wait_keys(timeout: str, on_timeout: str) -> str:
    return (
        "    waitForWorkloads:\n"
        f"      namespace: {NS}\n"
        "      until: no-active-session\n"
        f"      timeout: {timeout}\n"
        f"      onTimeout: {on_timeout}\n"
        "    maxTenantDisruption: 25%\n"
    )


def story(make_world: Callable[..., StoryWorld]) -> StoryWorld:
    """The world with workload ml/trainer and its client pods, their sessions Running."""
    world: StoryWorld = make_world(
        pools=1,
        nodes=2,
        window_lead_seconds=None,
        batch_percentage=50,
        batch_interval="1s",
        hypervisor_ready_delay=0.2,
        on_failure="halt",
        poll_interval="2s",
    )
    # The simulator plays the workload's owner (a Deployment, say): it recreates the client
    # pods a batch deletes, stamped with the pool's current client template (the webhook).
    assert world.sandbox is not None and world.sandbox.sim is not None
    world.sandbox.sim.set_workloads((WORKLOAD_SPEC,))
    deadline = time.monotonic() + 20
    while sorted(phase for _, phase in sessions(world)) != ["Running"] * CLIENTS:
        assert time.monotonic() < deadline, sessions(world)
        time.sleep(0.1)
    return world


def sessions(world: StoryWorld) -> list[tuple[str, str]]:
    return [
        (c["metadata"]["name"], str((c.get("status") or {}).get("phase")))
        for c in world.store().list(TF, "TensorFusionConnection", NS)
    ]


def clients(world: StoryWorld) -> list[str]:
    pods: list[dict[str, Any]] = world.store().list(
        "v1", "Pod", NS, label_selector=f"{D}/component=client"
    )
    return sorted(p["metadata"]["name"] for p in pods)


def test_the_client_batch_waits_for_the_sessions_then_goes_by_tenants(
    make_world: Callable[..., StoryWorld], make_bot: Callable[..., BotRunner]
) -> None:
    t0 = time.monotonic()
    world = story(make_world)
    pinned: list[object] = []
    watch = Watch()

    def on_pass(result: object, journal: Journal | None) -> None:
        watch(result, journal)  # type: ignore[arg-type]
        policy = pool_policies(world).get("shared") or {}
        if policy.get("autoUpdateClient"):
            pinned.append(policy.get("batchPercentage"))

    make_bot(world, on_pass=on_pass)
    op = merge_with(world, wait_keys("10m", "halt"))

    def waiting(store_: Any) -> Journal | None:
        j: Journal | None = store_.current(CLUSTER)
        if j is None or j.op_id != op or not any(p.step == STEP for p in j.phases):
            return None
        return j if "active GPU session" in j.phase(STEP).batches.waiting else None

    j = wait_for(world, waiting, what="the wait for the sessions", timeout=60)
    reason = j.phase(STEP).batches.waiting
    assert f"{CLIENTS} active GPU sessions (selector '(all)' in namespace {NS}: " in reason
    assert f"connection {NS}/{clients(world)[0]} (workload {WORKLOAD}, worker " in reason
    assert j.phase(STEP).progress == 0
    assert not pool_policies(world)["shared"].get("autoUpdateClient")
    before = clients(world)
    assert len(before) == CLIENTS  # no client pod deleted while they work
    # The workload goes idle: the pods its owner recreates open no session (set first, so no
    # new one starts in between), then its running sessions end.
    assert world.sandbox is not None and world.sandbox.sim is not None
    world.sandbox.sim.set_workloads((dataclasses.replace(WORKLOAD_SPEC, sessions=False),))
    for name, phase in sessions(world):
        if phase != "Failed":
            end_session(world.store(), NS, name)
    done = wait_for(world, finished_op(OperationKind.UPGRADE), what="the upgrade", timeout=60)
    assert done.op_id == op and done.status is OperationStatus.SUCCEEDED, done.failure
    # 25% of four tenants is one: opened at 25% (one pod a batch), never at the 50% asked.
    assert pinned and set(pinned) == {25}, pinned
    assert done.phase(STEP).batch_percentage == 25
    # every client pod was replaced, one at a time, by one on the new template
    pods = world.store().list("v1", "Pod", NS, label_selector=f"{D}/component=client")
    assert len(pods) == CLIENTS and not set(clients(world)) & set(before)
    hashes = {p["metadata"]["labels"][f"{D}/pod-template-hash"] for p in pods}
    pool = world.store().get(TF, "GPUPool", None, GPUPOOL)
    assert pool is not None and hashes == {pool["status"]["componentStatus"]["client"]}
    print(f"workloads, sessions end: {time.monotonic() - t0:.1f}s")


def test_sessions_past_the_timeout_halt_the_pool(
    make_world: Callable[..., StoryWorld], make_bot: Callable[..., BotRunner]
) -> None:
    t0 = time.monotonic()
    world = story(make_world)
    before = clients(world)
    make_bot(world)
    op = merge_with(world, wait_keys("2s", "halt"))
    done = wait_for(world, finished_op(OperationKind.UPGRADE), what="the halt", timeout=90)
    assert done.op_id == op and done.status is OperationStatus.FAILED
    phase = done.phase(STEP)
    assert phase.state is PhaseState.HALTED
    assert phase.halt_reason.startswith("pool shared: waitForWorkloads: 4 active GPU sessions")
    assert "after the 2s timeout: halting (onTimeout: halt)" in phase.halt_reason
    assert f"connection {NS}/{before[0]} (workload {WORKLOAD}" in phase.halt_reason
    assert clients(world) == before  # no client pod deleted
    assert sorted(p for _, p in sessions(world)) == ["Running"] * CLIENTS
    print(f"workloads, timeout halts: {time.monotonic() - t0:.1f}s")
