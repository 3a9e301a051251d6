"""Steps that wait on the cluster's watch instead of a fixed pause (#13), on FakeCluster with
blocking waits (a write from another thread wakes them).

controller-ready: sees the Deployment rolled out as soon as it is, within one call; waits at
most its slice, and never past controller_ready_timeout_seconds; a cluster that cannot block
keeps the old pace (retry RETRY later). verify: a pod changing during the wait brings the
next look SETTLE_SECONDS later. await_pools: True as soon as a GPUPool changes, False after
the timeout (capped by the slice). drive_pools: a rolling pool's batch moving during the pass
makes the pass ask to come back at once, not at the decision's ``until``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest

from gitopsbot.bot.steps import pool_switch
from gitopsbot.bot.steps.executor import Executor
from gitopsbot.bot.steps.outcome import RETRY
from gitopsbot.bot.steps.verify import SETTLE_SECONDS
from gitopsbot.core.fleet.model import ClusterSpec
from gitopsbot.core.operations import operation
from gitopsbot.core.records.journal import OperationKind, PhaseState, StepKind, StepState
from gitopsbot.core.rollouts import tf_objects as tf
from gitopsbot.fleetrepo import load_fleet
from gitopsbot.testing import FakeCluster, FakeHelm
from tests.executor.conftest import T0, Env, fleet_files


class NoSecrets:
    def resolve_all(self, refs: Any) -> dict[str, str]:
        return {}


@pytest.fixture
def spec(env: Env) -> ClusterSpec:
    repo = env.repo("spec-reader")
    found: ClusterSpec = load_fleet(repo.tree(repo.head("main"))).clusters["lab"]
    return found


@pytest.fixture
def later() -> Iterator[Callable[[float, Callable[[], None]], None]]:
    threads: list[threading.Thread] = []

    def schedule(seconds: float, action: Callable[[], None]) -> None:
        thread = threading.Timer(seconds, action)
        thread.start()
        threads.append(thread)

    yield schedule
    for thread in threads:
        thread.join(timeout=30)


def _cluster(spec: ClusterSpec) -> FakeCluster:
    """A controller Deployment that is not rolled out yet; waits block."""
    cluster = FakeCluster(instant_deployments=False, blocking_waits=True)
    cluster.put(
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": tf.controller_name(spec), "namespace": spec.release.namespace},
            "spec": {"replicas": 1},
        }
    )
    return cluster


def _roll_out(cluster: FakeCluster, spec: ClusterSpec) -> None:
    current = cluster.get("apps/v1", "Deployment", spec.release.namespace, tf.controller_name(spec))
    assert current is not None
    generation = current["metadata"]["generation"]
    status = dict.fromkeys(("replicas", "updatedReplicas", "readyReplicas", "availableReplicas"), 1)
    cluster.put({**current, "status": {**status, "observedGeneration": generation}})


def _run(executor: Executor, spec: ClusterSpec, kind: StepKind, *, waited: float) -> Any:
    journal = operation.new_operation(
        kind=OperationKind.UPGRADE,
        cluster="lab",
        desired_sha="f" * 40,
        created_at=T0,
        policy=spec.rollout,
    )
    step = next(s for s in journal.steps if s.kind is kind)
    step = replace(step, state=StepState.RUNNING, started_at=T0)
    began = time.monotonic()
    out = executor.run(step, journal, spec, now=T0 + timedelta(seconds=waited))
    return out, time.monotonic() - began


def _executor(cluster: FakeCluster, wait_slice: float) -> Executor:
    return Executor(cluster=cluster, helm=FakeHelm(), secrets=NoSecrets(), wait_slice=wait_slice)


def test_controller_ready_sees_the_rollout_during_its_wait(
    spec: ClusterSpec, later: Callable[[float, Callable[[], None]], None]
) -> None:
    cluster = _cluster(spec)
    later(0.3, lambda: _roll_out(cluster, spec))
    out, took = _run(_executor(cluster, 10.0), spec, StepKind.CONTROLLER_READY, waited=1)
    assert out.state is StepState.SUCCEEDED, out.detail
    assert took < 5.0  # within the slice's call, not a retry later


def test_controller_ready_waits_one_bounded_slice(spec: ClusterSpec) -> None:
    cluster = _cluster(spec)
    out, took = _run(_executor(cluster, 0.5), spec, StepKind.CONTROLLER_READY, waited=1)
    assert out.state is StepState.RUNNING
    assert 0.45 <= took < 3.0
    # The wait was part of the pause: the next look comes RETRY after this one began.
    assert out.retry_after is not None and out.retry_after <= RETRY - 0.45


def test_controller_ready_never_waits_past_its_timeout(spec: ClusterSpec) -> None:
    cluster = _cluster(spec)
    limit = spec.rollout.controller_ready_timeout_seconds
    executor = _executor(cluster, 10.0)
    out, took = _run(executor, spec, StepKind.CONTROLLER_READY, waited=limit - 0.3)
    assert out.state is StepState.RUNNING and took < 2.0
    out, took = _run(executor, spec, StepKind.CONTROLLER_READY, waited=limit)
    assert out.state is StepState.FAILED and "not ready after" in out.detail
    assert took < 0.5


def test_a_cluster_that_cannot_block_keeps_the_old_pace(spec: ClusterSpec) -> None:
    cluster = _cluster(spec)
    cluster.blocking_waits = False  # as in the fake-clock tests
    out, took = _run(_executor(cluster, 10.0), spec, StepKind.CONTROLLER_READY, waited=1)
    assert out.state is StepState.RUNNING and took < 0.5
    assert out.retry_after == pytest.approx(RETRY, abs=0.5)


def test_verify_looks_again_soon_after_a_pod_changed(
    spec: ClusterSpec, later: Callable[[float, Callable[[], None]], None]
) -> None:
    cluster = _cluster(spec)  # no TensorFusionCluster: verification has a problem to report
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "apps"}}
    later(0.3, lambda: cluster.put(pod))
    out, took = _run(_executor(cluster, 10.0), spec, StepKind.VERIFY, waited=1)
    assert out.state is StepState.RUNNING and "not found" in out.detail
    assert out.retry_after == SETTLE_SECONDS
    assert took < 5.0
    out, took = _run(_executor(cluster, 0.3), spec, StepKind.VERIFY, waited=1)
    assert out.retry_after is not None and out.retry_after <= RETRY - 0.25


def _gpupool(spec: ClusterSpec, pool: str, progress: int) -> dict[str, Any]:
    return {
        "apiVersion": tf.TF,
        "kind": "GPUPool",
        "metadata": {"name": tf.gpupool_name(spec, pool)},
        "status": {"componentStatus": {"hypervisorUpdateProgress": progress}},
    }


def test_await_pools(spec: ClusterSpec, later: Callable[[float, Callable[[], None]], None]) -> None:
    cluster = _cluster(spec)
    cluster.put(_gpupool(spec, "a", 10))
    cluster.put(_gpupool(spec, "b", 0))
    later(0.3, lambda: cluster.put(_gpupool(spec, "a", 20)))
    began = time.monotonic()
    assert pool_switch.await_pools(cluster, spec, ["a"], 20.0) is True
    assert time.monotonic() - began < 5.0
    # Another pool's change does not count; the slice caps a long timeout.
    later(0.1, lambda: cluster.put(_gpupool(spec, "b", 10)))
    began = time.monotonic()
    assert pool_switch.await_pools(cluster, spec, ["a"], 600.0, wait_slice=0.5) is False
    assert 0.45 <= time.monotonic() - began < 3.0
    assert pool_switch.await_pools(cluster, spec, ["a"], 0.0) is False


def test_drive_pools_comes_back_when_a_batch_moved(
    env: Env, later: Callable[[float, Callable[[], None]], None]
) -> None:
    rec = env.reconciler()
    rec.reconcile("lab")
    rec.reconcile("lab")
    env.merge_pr(7, "lab: chart 1.1.0, hypervisor hv:2", fleet_files("1.1.0", "hv:2"))
    for _ in range(40):  # to the first pool rolling, between two batches
        rec.reconcile("lab")
        current = rec.store.current("lab")
        assert current is not None
        if any(p.state is PhaseState.ROLLING and p.progress for p in current.phases):
            break
        env.world.tick()
        env.clock.t += timedelta(seconds=1)
    else:
        pytest.fail(f"no pool rolling: {rec.store.current('lab')}")
    env.cluster.blocking_waits = True
    later(0.3, env.world.tick)  # the controller's next batch, during the pass
    began = time.monotonic()
    result = rec.reconcile("lab")
    took = time.monotonic() - began
    assert result.action == "pools", result
    assert result.next_at == env.clock.t  # at once, not at the decision's until
    assert took < 8.0


def test_await_pools_compares_with_what_the_pass_saw(spec: ClusterSpec) -> None:
    cluster = _cluster(spec)
    cluster.put(_gpupool(spec, "a", 10))
    seen = cluster.get(tf.TF, "GPUPool", None, tf.gpupool_name(spec, "a"))
    assert seen is not None
    cluster.put(_gpupool(spec, "a", 20))  # the batch moved after the pass looked
    began = time.monotonic()
    version = str(seen["metadata"]["resourceVersion"])
    assert pool_switch.await_pools(cluster, spec, ["a"], 20.0, seen={"a": version}) is True
    assert time.monotonic() - began < 1.0


def test_drive_pools_sees_a_batch_that_moved_after_it_looked(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    rec = env.reconciler()
    rec.reconcile("lab")
    rec.reconcile("lab")
    env.merge_pr(7, "lab: chart 1.1.0, hypervisor hv:2", fleet_files("1.1.0", "hv:2"))
    for _ in range(40):  # to the first pool rolling, between two batches
        rec.reconcile("lab")
        current = rec.store.current("lab")
        assert current is not None
        if any(p.state is PhaseState.ROLLING and p.progress for p in current.phases):
            break
        env.world.tick()
        env.clock.t += timedelta(seconds=1)
    else:
        pytest.fail(f"no pool rolling: {rec.store.current('lab')}")
    env.cluster.blocking_waits = True
    observe = pool_switch.observe_pool
    moved: list[bool] = []

    def observe_then_move(*args: Any) -> Any:
        found = observe(*args)
        if not moved:  # the controller's next batch lands right after the pass's read
            moved.append(True)
            env.world.tick()
        return found

    monkeypatch.setattr(pool_switch, "observe_pool", observe_then_move)
    began = time.monotonic()
    result = rec.reconcile("lab")
    took = time.monotonic() - began
    assert moved
    assert result.action == "pools", result
    assert result.next_at == env.clock.t  # at once: the wait compared with the pass's read
    assert took < 1.0  # not a slice later
