"""R15 verification of worker and client pods, against the sandbox: the emulated API server
on loopback, read by the real ``KubeCluster`` adapter, with the TensorFusion controller
simulator (manual clock) creating the TensorFusionWorkload's worker pods and the client-injected
app pods, and rolling them when the bot opens their switches.

Aspects: the simulator really stamps the images the check compares (worker ``containers[0]``
from ``componentConfig.worker.image``, the client init container from
``componentConfig.client.image``, facts §3.5/§3.6); a component the operation did not roll may
keep its old image (F3); a rolled one may not (one stale worker pod is named); a client pod
still starting is named as Pending; the canary check of a worker or client batch (R15 after
the canary batch); the VERIFY step reads what was rolled from the journal.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML

from gitopsbot.adapters.kube import KubeCluster
from gitopsbot.bot.steps.executor import Executor
from gitopsbot.core.fleet.model import (
    ClusterSpec,
    Component,
    Environment,
    PoolPolicy,
    ReleaseSpec,
    RolloutPolicy,
    SecretRef,
)
from gitopsbot.core.operations import operation
from gitopsbot.core.records.journal import OperationKind, StepState
from gitopsbot.core.rollouts.tf_objects import GROUP, TF
from gitopsbot.sandbox.apiserver import ApiServer
from gitopsbot.sandbox.simulator import ControllerSim, ManualClock, SimConfig, WorkloadSpec
from gitopsbot.testing import FakeCluster, FakeHelm

ROOT = Path(__file__).resolve().parents[2]
CRDS = ROOT / "examples" / "charts" / "tensor-fusion-1.8.7" / "crds"
NS = "tensor-fusion-sys"
APPS = "ml"
TFC = "tf"
GP = f"{TFC}-a"
H, W, C = Component.HYPERVISOR, Component.WORKER, Component.CLIENT
ALL = {"a": {H, W, C}}
Obj = dict[str, Any]


class NoSecrets:
    def resolve_all(self, refs: Sequence[SecretRef]) -> dict[str, str]:
        return {}


def _spec(*phases: Component, pool_name: str = "a") -> ClusterSpec:
    pool = PoolPolicy(
        name=pool_name,
        auto_update_worker=W in phases,
        auto_update_client=C in phases,
        batch_percentage=50,
        phases=phases,
    )
    return ClusterSpec(
        name="lab",
        environment=next(iter(Environment)),
        release=ReleaseSpec(
            chart_repo_url="https://charts.example.invalid",
            chart_name="tensor-fusion",
            version="1.8.7",
            release_name="tf",
            namespace=NS,
        ),
        values={"cluster": {"name": TFC}},
        rollout=RolloutPolicy(pools=(pool,)),
    )


def _tfc() -> Obj:
    template = {
        "componentConfig": {
            "hypervisor": {
                "image": "hv:1",
                "podTemplate": {"spec": {"containers": [{"name": "tensor-fusion-hypervisor"}]}},
            },
            "worker": {"image": "worker:1"},
            "client": {"image": "client:1"},
        },
        "nodeManagerConfig": {
            "nodePoolRollingUpdatePolicy": {
                "autoUpdateHypervisor": False,
                "autoUpdateWorker": False,
                "autoUpdateClient": False,
                "batchPercentage": 50,
                "batchInterval": "1m",
            }
        },
    }
    return {
        "apiVersion": TF,
        "kind": "TensorFusionCluster",
        "metadata": {"name": TFC},
        # Pool b has a workload of the same name as pool a's, in another namespace.
        "spec": {
            "gpuPools": [
                {"name": "a", "specTemplate": template},
                {"name": "b", "specTemplate": copy.deepcopy(template)},
            ]
        },
    }


@dataclass
class Lab:
    api: ApiServer
    sim: ControllerSim
    clock: ManualClock
    executor: Executor
    cluster: KubeCluster

    def tick(self) -> bool:
        """Settle, move the clock to the simulator's next due time, settle again."""
        self.sim.settle()
        due = self.sim.next_wake
        if due is None:
            return False
        self.clock.advance(max((due - self.clock.now()).total_seconds(), 0.0))
        self.sim.settle()
        return True

    def run(self, until: Callable[[], bool], max_ticks: int = 100) -> None:
        """Tick until ``until()`` holds."""
        for _ in range(max_ticks):
            self.sim.settle()
            if until():
                return
            if not self.tick():
                assert until(), "the simulator has nothing left to do; condition not reached"
                return
        raise AssertionError("condition not reached")

    def pods(self, component: str) -> list[Obj]:
        return [
            p
            for p in self.api.store.list(
                "v1", "Pod", APPS, label_selector={f"{GROUP}/component": component}
            )
            if not (p.get("metadata") or {}).get("deletionTimestamp")
        ]

    def images(self, component: str) -> list[str]:
        """What the simulator stamped: the worker's main container, the client's init one."""
        key = "containers" if component == "worker" else "initContainers"
        return sorted(p["spec"][key][0]["image"] for p in self.pods(component))

    def running(self, component: str) -> bool:
        pods = self.pods(component)
        return bool(pods) and all(p["status"].get("phase") == "Running" for p in pods)

    def status(self) -> Obj:
        pool = self.api.store.get(TF, "GPUPool", None, GP)
        assert pool is not None
        found: Obj = (pool.get("status") or {}).get("componentStatus") or {}
        return found

    def set_images(self, worker: str, client: str, *, pool: int = 0) -> None:
        """What a helm upgrade with new worker/client images does to the TFC (switches stay
        closed: F1)."""
        tfc = self.api.store.get(TF, "TensorFusionCluster", None, TFC)
        assert tfc is not None
        config = tfc["spec"]["gpuPools"][pool]["specTemplate"]["componentConfig"]
        config["worker"]["image"], config["client"]["image"] = worker, client
        self.api.store.update(tfc)
        self.sim.settle()


@contextmanager
def _make_lab(tmp_path: Path, config: SimConfig) -> Iterator[Lab]:
    api = ApiServer(kubelet=False)
    api.start()
    try:
        for path in sorted(CRDS.glob("*.yaml")):
            api.store.create(YAML(typ="safe").load(path.read_text()))
        api.store.create(copy.deepcopy(_tfc()))
        clock = ManualClock(datetime(2026, 6, 10, 1, 0, tzinfo=UTC))
        sim = ControllerSim(api.store, config, clock=clock)
        cluster = KubeCluster.from_kubeconfig(api.write_kubeconfig(tmp_path / "kubeconfig"))
        executor = Executor(cluster=cluster, helm=FakeHelm(), secrets=NoSecrets())
        lab = Lab(api, sim, clock, executor, cluster)
        try:
            lab.run(lambda: lab.running("worker") and lab.running("client"))
            yield lab
        finally:
            cluster.close()
            sim.close()
    finally:
        api.stop()


def _config(**kw: Any) -> SimConfig:
    workloads = (
        WorkloadSpec("train", pool="a", namespace=APPS, replicas=2, clients=1),
        WorkloadSpec("serve", pool="a", namespace=APPS, replicas=1, clients=1),
        WorkloadSpec("train", pool="b", namespace="ml2", replicas=1, clients=1),
    )
    return SimConfig(nodes_per_pool=2, operator_namespace=NS, workloads=workloads, **kw)


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[Lab]:
    with _make_lab(tmp_path, _config()) as made:
        yield made


def _spec_all() -> ClusterSpec:
    return _spec(H, W, C)


# ------------------------------------------------------------------ allowed


def test_simulated_pods_carry_the_images_the_check_compares(lab: Lab) -> None:
    assert lab.images("worker") == ["worker:1"] * 3
    assert lab.images("client") == ["client:1"] * 2
    assert lab.executor.check(_spec_all(), rolled=ALL) == []


def test_not_rolled_components_may_keep_their_old_image(lab: Lab) -> None:
    lab.set_images("worker:2", "client:2")
    # R12: switches closed, nothing restarted; the pods keep the old images.
    assert lab.images("worker") == ["worker:1"] * 3
    spec = _spec(H)
    assert lab.executor.check(spec, rolled={"a": {H}}) == []  # F3: not rolled
    assert lab.executor.check(spec) == []  # unknown: only Running is checked


def test_rolled_components_must_run_the_new_image(lab: Lab) -> None:
    lab.set_images("worker:2", "client:2")
    problems = lab.executor.check(_spec_all(), rolled=ALL)
    workers = [p for p in problems if p.startswith("worker pod ")]
    clients = [p for p in problems if p.startswith("client pod ")]
    assert len(workers) == 3 and len(clients) == 2, problems
    assert all(p.endswith("runs worker:1, expected worker:2") for p in workers)
    assert all(f" {APPS}/" in p for p in workers + clients)
    assert all("runs client:1, sandbox/app:1, expected client:2" in p for p in clients)
    # Only the worker rolled: the clients' old image is not a problem.
    only_worker = lab.executor.check(_spec(H, W), rolled={"a": {H, W}})
    assert only_worker == workers


def test_a_full_worker_and_client_rollout_verifies(lab: Lab) -> None:
    spec = _spec_all()
    lab.set_images("worker:2", "client:2")
    for component in (W, C):
        lab.executor.set_switch(spec, "a", component, open_=True)
    lab.run(
        lambda: (
            bool(lab.status().get("workerConfigSynced"))
            and bool(lab.status().get("clientConfigSynced"))
            and lab.running("worker")
            and lab.running("client")
        )
    )
    assert lab.images("worker") == ["worker:2"] * 3
    assert lab.images("client") == ["client:2"] * 2
    assert lab.executor.check(spec, rolled=ALL) == []
    # The VERIFY step takes what was rolled from the journal's POOL_PHASE steps.
    journal = operation.new_operation(
        kind=OperationKind.ROLLOUT_ONLY,
        cluster="lab",
        desired_sha="f" * 40,
        created_at=lab.clock.now(),
        policy=spec.rollout,
    )
    step = replace(journal.step("verify"), state=StepState.RUNNING, started_at=lab.clock.now())
    out = lab.executor.run(step, journal, spec, now=lab.clock.now())
    assert out.state is StepState.SUCCEEDED, out.detail


def test_pods_of_another_pool_are_not_judged(lab: Lab) -> None:
    lab.set_images("worker:2", "client:2", pool=1)
    rolled = {"a": {H, W, C}, "b": {H, W, C}}
    assert lab.executor.check(_spec_all(), rolled=rolled) == []
    # They are judged for their own pool: the same-named workload in ml2 is pool b's.
    problems = lab.executor.check(_spec(H, W, C, pool_name="b"), rolled=rolled)
    assert len(problems) == 2 and all(" ml2/train-" in p for p in problems), problems
    assert problems[0].startswith("worker pod ") and problems[1].startswith("client pod ")


# ------------------------------------------------------------------ denied


def test_one_stale_worker_pod_is_named(lab: Lab) -> None:
    spec = _spec_all()
    lab.set_images("worker:2", "client:1")
    lab.executor.set_switch(spec, "a", W, open_=True)
    # 50% of two workloads: the first batch moves one; the next waits for batchInterval.
    lab.run(lambda: lab.status().get("workerUpdateProgress") == 50 and lab.running("worker"))
    lab.executor.set_switch(spec, "a", W, open_=False)
    stale = [p for p in lab.pods("worker") if p["spec"]["containers"][0]["image"] == "worker:1"]
    assert 0 < len(stale) < 3
    problems = lab.executor.check(spec, rolled=ALL)
    assert problems == [
        f"worker pod {APPS}/{p['metadata']['name']} runs worker:1, expected worker:2"
        for p in sorted(stale, key=lambda p: p["metadata"]["name"])
    ]
    # After the canary batch the old pods are expected, as long as one runs the new image.
    assert lab.executor.check(spec, ["a"], canary=True, component=W) == []


def test_canary_without_a_new_pod_is_a_problem(lab: Lab) -> None:
    lab.set_images("worker:2", "client:2")
    spec = _spec_all()
    assert lab.executor.check(spec, ["a"], canary=True, component=W) == [
        "pool a: no worker pod on worker:2 after the canary batch"
    ]
    assert lab.executor.check(spec, ["a"], canary=True, component=C) == [
        "pool a: no client pod on client:2 after the canary batch"
    ]
    # The hypervisor's canary (what the reconciler asks without a component) does not judge
    # the worker and client images.
    assert lab.executor.check(spec, ["a"], canary=True) == []


def test_a_client_pod_still_starting_is_pending(tmp_path: Path) -> None:
    with _make_lab(tmp_path, _config(client_ready_delay=30.0)) as lab:
        spec = _spec_all()
        lab.set_images("worker:1", "client:2")
        lab.executor.set_switch(spec, "a", C, open_=True)
        # The first batch deletes one client pod; its owner recreates it, Pending for 30 s.
        lab.run(lambda: any(p["status"].get("phase") == "Pending" for p in lab.pods("client")))
        lab.executor.set_switch(spec, "a", C, open_=False)
        (pending,) = [p for p in lab.pods("client") if p["status"].get("phase") == "Pending"]
        ref = f"{APPS}/{pending['metadata']['name']}"
        problems = lab.executor.check(spec, rolled=ALL)
        assert f"client pod {ref} is Pending" in problems
        # Pending is reported whether or not the client was rolled (R15: pods Running).
        assert lab.executor.check(spec, rolled={"a": {H}}) == [f"client pod {ref} is Pending"]
        # The VERIFY step keeps retrying while pods start (VERIFY_TIMEOUT_SECONDS).
        journal = operation.new_operation(
            kind=OperationKind.ROLLOUT_ONLY,
            cluster="lab",
            desired_sha="e" * 40,
            created_at=lab.clock.now(),
            policy=spec.rollout,
        )
        step = replace(journal.step("verify"), state=StepState.RUNNING, started_at=lab.clock.now())
        lab.executor.wait_slice = 0.5  # the pod stays Pending far longer than one slice
        out = lab.executor.run(step, journal, spec, now=lab.clock.now())
        assert out.state is StepState.RUNNING and f"client pod {ref} is Pending" in out.detail


# ------------------------------------------------------------------ edges, on FakeCluster


def _fake_pod(name: str, image: str, phase: str, **meta: Any) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": APPS,
            "labels": {f"{GROUP}/component": "worker", f"{GROUP}/workload": "train"},
            **meta,
        },
        "spec": {"containers": [{"name": "worker", "image": image}]},
        "status": {"phase": phase},
    }


def test_leaving_and_finished_pods_are_not_judged_and_skipped_phases_did_not_roll() -> None:
    """The states the simulator does not produce: a pod being deleted (the rollout replaces
    it), a finished one, and a POOL_PHASE step the journal marks skipped."""
    cluster = FakeCluster()
    tfc = _tfc()
    tfc["spec"]["gpuPools"][0]["specTemplate"]["componentConfig"]["worker"]["image"] = "w:2"
    cluster.put({**tfc, "status": {"phase": "Running"}})
    cluster.put(
        {
            "apiVersion": TF,
            "kind": "GPUPool",
            "metadata": {"name": GP},
            "status": {"phase": "Running"},
        }
    )
    cluster.put(
        {
            "apiVersion": TF,
            "kind": "TensorFusionWorkload",
            "metadata": {"name": "train", "namespace": APPS},
            "spec": {"poolName": GP},
        }
    )
    cluster.put(_fake_pod("new", "w:2", "Running"))
    cluster.put(_fake_pod("old", "w:1", "Running", deletionTimestamp="2026-06-10T01:00:00Z"))
    cluster.put(_fake_pod("done", "w:1", "Succeeded"))
    ex = Executor(cluster=cluster, helm=FakeHelm(), secrets=NoSecrets())
    spec = _spec_all()
    assert ex.check(spec, rolled=ALL) == []
    cluster.put(_fake_pod("stale", "w:1", "Failed"))
    assert ex.check(spec, rolled=ALL) == [
        f"worker pod {APPS}/stale is Failed",
        f"worker pod {APPS}/stale runs w:1, expected w:2",
    ]
    journal = operation.new_operation(
        kind=OperationKind.ROLLOUT_ONLY,
        cluster="lab",
        desired_sha="d" * 40,
        created_at=datetime(2026, 6, 10, tzinfo=UTC),
        policy=spec.rollout,
    )
    skipped = journal.with_step(replace(journal.step("pool/a/worker"), state=StepState.SKIPPED))
    step = replace(journal.step("verify"), state=StepState.RUNNING, started_at=journal.created_at)
    for j, wanted in ((journal, "runs w:1"), (skipped, "is Failed")):
        out = ex.run(step, j, spec, now=journal.created_at)
        assert out.state is StepState.RUNNING and wanted in out.detail, out.detail
    out = ex.run(step, skipped, spec, now=journal.created_at)
    assert "runs w:1" not in out.detail
    # A canary check that does not name the component takes the one the GPUPool shows
    # mid-rollout (R14 progress between 0 and 100).
    cluster.delete("v1", "Pod", APPS, "new")
    assert ex.check(spec, ["a"], canary=True) == [f"worker pod {APPS}/stale is Failed"]
    pool = cluster.get(TF, "GPUPool", None, GP)
    assert pool is not None
    pool["status"]["componentStatus"] = {
        "hypervisorUpdateProgress": 100,
        "workerUpdateProgress": 50,
    }
    cluster.put(pool)
    assert ex.check(spec, ["a"], canary=True) == [
        f"worker pod {APPS}/stale is Failed",
        "pool a: no worker pod on w:2 after the canary batch",
    ]


def test_observe_pool_tells_whether_worker_and_client_pods_run_the_template(lab: Lab) -> None:
    # A status still "synced at 100" from before the controller saw the new template must
    # not end a phase: ``current`` is False while pods run another image than the template.
    spec = _spec_all()
    for component in (W, C):
        seen = lab.executor.observe_pool(spec, "a", component)
        assert seen is not None and seen.current is True
    lab.set_images("worker:2", "client:2")
    for component in (W, C):
        seen = lab.executor.observe_pool(spec, "a", component)
        assert seen is not None and seen.current is False, component
    lab.executor.set_switch(spec, "a", W, open_=True)
    lab.run(lambda: bool(lab.status().get("workerConfigSynced")) and lab.running("worker"))
    worker = lab.executor.observe_pool(spec, "a", W)
    client = lab.executor.observe_pool(spec, "a", C)
    assert worker is not None and worker.current is True
    assert client is not None and client.current is False  # its switch stayed closed


def test_local_gpu_app_pods_are_judged_as_clients_by_the_template_hash() -> None:
    # Facts §3.6: the client component counts every pod labelled enabled=true and with the
    # pool, local-GPU app pods included (their component label is "worker", and they carry
    # no workload label, so they are no TensorFusionWorkload's worker pods).
    cluster = FakeCluster()
    cluster.put({**_tfc(), "status": {"phase": "Running"}})
    pool = {
        "apiVersion": TF,
        "kind": "GPUPool",
        "metadata": {"name": GP},
        "status": {"phase": "Running", "componentStatus": {"client": "new-hash"}},
    }
    cluster.put(pool)
    local = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "local-app",
            "namespace": APPS,
            "labels": {
                f"{GROUP}/enabled": "true",
                f"{GROUP}/gpupool": GP,
                f"{GROUP}/component": "worker",
                f"{GROUP}/pod-template-hash": "old-hash",
            },
        },
        "spec": {"containers": [{"name": "app", "image": "sandbox/app:1"}]},
        "status": {"phase": "Running"},
    }
    cluster.put(local)
    ex = Executor(cluster=cluster, helm=FakeHelm(), secrets=NoSecrets())
    spec = _spec_all()
    assert ex.check(spec, rolled=ALL) == [
        f"client pod {APPS}/local-app has template hash old-hash, expected new-hash"
    ]
    assert ex.check(spec, rolled={"a": {H, W}}) == []  # the client was not rolled (F3)
    seen = ex.observe_pool(spec, "a", C)
    assert seen is not None and seen.current is False
    local["metadata"]["labels"][f"{GROUP}/pod-template-hash"] = "new-hash"
    cluster.put(local)
    assert ex.check(spec, rolled=ALL) == []  # no client image is asked of a local-GPU pod
    seen = ex.observe_pool(spec, "a", C)
    assert seen is not None and seen.current is True
