"""The TensorFusion controller simulator against the emulator's Store (facts §3, R10–R15, F1–F6).

Aspects: TFC → GPUPool derivation and revert (R11); GPUNodes and hypervisor pods with the real
names and labels (F6); first sight records hashes only; batched rollout sizes, interval,
progress and ConfigSynced (F4, R14); the in-progress / last-time annotations; a Pending GPUNode
pauses (F4); a switch that is off records and waits, turning it on resumes (R12); worker and
client rollouts (R13); phases (R15); the controller Deployment's readiness; unpullable images.
Time is a ManualClock: each test advances it to the simulator's next due time.
"""

from __future__ import annotations

import copy
import math
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML

from gitopsbot.sandbox.apiserver.store import Store
from gitopsbot.sandbox.simulator import ControllerSim, ManualClock, SimConfig, WorkloadSpec
from gitopsbot.sandbox.simulator.hashing import hypervisor_pod_name

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "examples" / "charts" / "tensor-fusion-1.8.7"
TF = "tensor-fusion.ai/v1"
D = "tensor-fusion.ai"
POOL = "tensor-fusion-shared"
NS = "tensor-fusion-sys"

Obj = dict[str, Any]


@pytest.fixture(scope="module")
def rendered_tfc(binaries: dict[str, Path]) -> Obj:
    """The TensorFusionCluster the sandbox chart renders (real helm 4)."""
    out = subprocess.run(
        [str(binaries["helm4"]), "template", "tf", str(CHART), "-n", NS],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    (tfc,) = [d for d in YAML(typ="safe").load_all(out) if d and d["kind"] == "TensorFusionCluster"]
    return dict(tfc)


def _store_with_crds() -> Store:
    store = Store()
    for path in sorted((CHART / "crds").glob("*.yaml")):
        store.create(YAML(typ="safe").load(path.read_text()))
    return store


class Cluster:
    """A Store with the chart's CRDs and TFC, a simulator on a manual clock, and helpers."""

    def __init__(self, tfc: Obj, config: SimConfig, *, policy: Obj | None = None) -> None:
        self.store = _store_with_crds()
        self.clock = ManualClock()
        self.tfc = copy.deepcopy(tfc)
        if policy is not None:
            self.policy(self.tfc).update(policy)
        self.store.create(self.tfc)
        self.sim = ControllerSim(self.store, config, clock=self.clock)

    @staticmethod
    def template(tfc: Obj, index: int = 0) -> Obj:
        spec: Obj = tfc["spec"]["gpuPools"][index]["specTemplate"]
        return spec

    def policy(self, tfc: Obj) -> Obj:
        nmc: Obj = self.template(tfc)["nodeManagerConfig"]
        policy: Obj = nmc["nodePoolRollingUpdatePolicy"]
        return policy

    def edit_tfc(self, change: Callable[[Obj], None]) -> None:
        tfc = self.store.get(TF, "TensorFusionCluster", None, "tensor-fusion")
        assert tfc is not None
        change(tfc)
        self.store.update(tfc)

    def pool(self, name: str = POOL) -> Obj:
        pool = self.store.get(TF, "GPUPool", None, name)
        assert pool is not None, name
        return pool

    def comp(self, name: str = POOL) -> Obj:
        status: Obj = self.pool(name).get("status") or {}
        return dict(status.get("componentStatus") or {})

    def hypervisors(self) -> dict[str, Obj]:
        pods = self.store.list("v1", "Pod", NS, label_selector={f"{D}/component": "hypervisor"})
        return {p["metadata"]["name"]: p for p in pods}

    def images(self) -> list[str]:
        return sorted(p["spec"]["containers"][0]["image"] for p in self.hypervisors().values())

    def tick(self) -> bool:
        """Settle, then move the clock to the next due time; False if nothing is due."""
        self.sim.settle()
        due = self.sim.next_wake
        if due is None:
            return False
        self.clock.advance(max((due - self.clock.now()).total_seconds(), 0.0))
        return True

    def run(self, until: Callable[[], bool], max_ticks: int = 200) -> None:
        for _ in range(max_ticks):
            self.sim.settle()
            if until():
                return
            if not self.tick():
                self.sim.settle()
                assert until(), "nothing left to do and the condition does not hold"
                return
        raise AssertionError("condition not reached")


def _set_image(image: str) -> Callable[[Obj], None]:
    def change(tfc: Obj) -> None:
        Cluster.template(tfc)["componentConfig"]["hypervisor"]["image"] = image

    return change


@pytest.fixture
def make(rendered_tfc: Obj) -> Iterator[Callable[..., Cluster]]:
    def factory(config: SimConfig | None = None, **kw: Any) -> Cluster:
        return Cluster(rendered_tfc, config or SimConfig(), **kw)

    yield factory


# ------------------------------------------------------------------ derivation


def test_pools_derived_from_template_and_edits_reverted(make: Callable[..., Cluster]) -> None:
    c = make()
    c.sim.settle()
    pool = c.pool()
    tfc = c.store.get(TF, "TensorFusionCluster", None, "tensor-fusion")
    assert tfc is not None
    assert pool["spec"] == Cluster.template(tfc)
    meta = pool["metadata"]
    assert meta["labels"][f"{D}/managed-by"] == "tensor-fusion"
    assert meta["annotations"][f"{D}/is-default-pool"] == "true"
    assert meta["ownerReferences"][0]["kind"] == "TensorFusionCluster"

    # R11: a direct edit of the GPUPool is reverted; the pool's annotations survive.
    pool["spec"]["nodeManagerConfig"]["nodePoolRollingUpdatePolicy"]["batchPercentage"] = 50
    pool["metadata"]["annotations"]["keep-me"] = "yes"
    c.store.update(pool)
    c.sim.settle()
    after = c.pool()
    assert (
        after["spec"]["nodeManagerConfig"]["nodePoolRollingUpdatePolicy"]["batchPercentage"] == 20
    )
    assert after["metadata"]["annotations"]["keep-me"] == "yes"


def test_pool_added_and_removed_with_the_template(make: Callable[..., Cluster]) -> None:
    c = make(SimConfig(nodes_per_pool=2, pool_nodes={"train": 1}))
    c.sim.settle()

    def add(tfc: Obj) -> None:
        extra = copy.deepcopy(tfc["spec"]["gpuPools"][0])
        extra.update(name="train", isDefault=False)
        tfc["spec"]["gpuPools"].append(extra)

    c.edit_tfc(add)
    c.sim.settle()
    assert c.pool("tensor-fusion-train")["status"]["totalNodes"] == 1
    c.edit_tfc(lambda tfc: tfc["spec"]["gpuPools"].pop())
    c.sim.settle()
    assert c.store.get(TF, "GPUPool", None, "tensor-fusion-train") is None
    assert len(c.store.list(TF, "GPUNode")) == 2  # the train pool's GPUNode went with it


def test_gpunodes_and_hypervisor_pods_carry_real_names_and_labels(
    make: Callable[..., Cluster],
) -> None:
    c = make(SimConfig(nodes_per_pool=4))
    c.sim.settle()
    gpunodes = c.store.list(TF, "GPUNode")
    assert len(gpunodes) == 4
    pods = c.hypervisors()
    for node in gpunodes:
        name = node["metadata"]["name"]
        assert node["metadata"]["labels"][f"{D}/pool-{POOL}"] == "true"
        assert node["metadata"]["labels"][f"{D}/managed-by"] == POOL
        assert node["status"]["phase"] == "Running"
        pod = pods[f"hypervisor-{name}"]
        labels = pod["metadata"]["labels"]
        assert labels[f"{D}/component"] == "hypervisor"
        assert labels[f"{D}/pool-{POOL}"] == "true"
        assert labels[f"{D}/pod-template-hash"]
        assert pod["spec"]["nodeName"] == name
        assert pod["spec"]["containers"][0]["name"] == "tensor-fusion-hypervisor"
        assert pod["status"]["phase"] == "Running"
    # The per-node hash is a different formula from the pool-level one (facts §3.3).
    some = next(iter(pods.values()))["metadata"]["labels"][f"{D}/pod-template-hash"]
    assert some != c.comp()["hypervisor"]


def test_long_node_names_truncated_with_hash_suffix() -> None:
    short = "node-a"
    assert hypervisor_pod_name(short) == "hypervisor-node-a"
    long_a = "ip-10-0-0-1." + "x" * 60
    long_b = "ip-10-0-0-1." + "x" * 59 + "y"
    a, b = hypervisor_pod_name(long_a), hypervisor_pod_name(long_b)
    assert len(a) <= 63 and len(b) <= 63
    assert a != b and a.startswith("hypervisor-ip-10-0-0-1.")


def test_first_sight_records_hashes_and_chart_defaults_never_roll_worker_or_client(
    make: Callable[..., Cluster],
) -> None:
    c = make(SimConfig(nodes_per_pool=3))
    c.sim.settle()
    comp = c.comp()
    assert comp["hypervisor"] and comp["worker"] and comp["client"]
    # 3 nodes at 20%: all are current, so three batches count at once (60), then the two
    # trailing no-op batches still wait their interval (facts §3.2).
    assert comp["hypervisorUpdateProgress"] == 60
    uids = {p["metadata"]["uid"] for p in c.hypervisors().values()}
    c.run(lambda: bool(c.comp().get("hypervisorConfigSynced")))
    assert {p["metadata"]["uid"] for p in c.hypervisors().values()} == uids  # nothing replaced
    comp = c.comp()
    # Switch on (F1): the hypervisor reaches 100 on a fresh install; F3: the others never do
    # and their zero/false fields are absent (omitempty).
    assert comp["hypervisorUpdateProgress"] == 100
    assert comp["hypervisorConfigSynced"] is True
    for key in ("workerUpdateProgress", "workerConfigSynced", "clientUpdateProgress"):
        assert key not in comp


# ------------------------------------------------------------------ the hypervisor rollout


@pytest.mark.parametrize(("nodes", "pct"), [(7, 20), (10, 30), (4, 100)])
def test_rollout_batches_progress_and_interval(
    make: Callable[..., Cluster], nodes: int, pct: int
) -> None:
    c = make(
        SimConfig(nodes_per_pool=nodes), policy={"batchPercentage": pct, "batchInterval": "2s"}
    )
    c.sim.settle()
    before = {n: p["metadata"]["uid"] for n, p in c.hypervisors().items()}
    c.edit_tfc(_set_image("hv:new"))
    batch = math.ceil(pct * nodes / 100)
    steps = math.ceil(100 / pct)
    seen: list[tuple[int, int | None, bool]] = []
    start = c.clock.now()
    for _ in range(steps + 2):
        c.sim.settle()
        comp = c.comp()
        new = c.images().count("hv:new")
        seen.append(
            (new, comp.get("hypervisorUpdateProgress"), bool(comp.get("hypervisorConfigSynced")))
        )
        ann = c.pool()["metadata"]["annotations"]
        if comp.get("hypervisorConfigSynced"):
            assert f"{D}/hypervisor-update-in-progress" not in ann
            break
        assert ann[f"{D}/hypervisor-update-in-progress"] == comp["hypervisor"]
        assert ann[f"{D}/hypervisor-batch-update-last-time"]
        # Nothing more happens before the interval has passed.
        c.clock.advance(1.9)
        c.sim.settle()
        assert c.images().count("hv:new") == new
        c.clock.advance(0.1)
    expected = [
        (min((i + 1) * batch, nodes), min((i + 1) * pct, 100), (i + 1) * pct >= 100)
        for i in range(steps)
    ]
    assert seen == expected
    elapsed = (c.clock.now() - start).total_seconds()
    assert elapsed == pytest.approx(2.0 * (steps - 1))
    # Every hypervisor pod was replaced: same names, new uids.
    after = {n: p["metadata"]["uid"] for n, p in c.hypervisors().items()}
    assert after.keys() == before.keys()
    assert all(after[n] != before[n] for n in before)


def test_pending_gpunode_pauses_rollout(make: Callable[..., Cluster]) -> None:
    broken = f"{POOL}-gpu-000"  # the oldest node, in the first batch
    c = make(SimConfig(nodes_per_pool=5, broken_nodes=frozenset({broken})))
    c.run(lambda: bool(c.comp().get("hypervisorConfigSynced")))  # its first hypervisor did come up
    c.edit_tfc(_set_image("hv:new"))
    for _ in range(5):
        c.tick()
    node = c.store.get(TF, "GPUNode", None, broken)
    assert node is not None and node["status"]["phase"] == "Pending"
    comp = c.comp()
    assert comp.get("hypervisorUpdateProgress") is None  # stalled in the first batch
    assert c.images().count("hv:new") == 1
    assert c.pool()["status"]["phase"] == "Updating"
    tfc = c.store.get(TF, "TensorFusionCluster", None, "tensor-fusion")
    assert tfc is not None and tfc["status"]["phase"] == "Updating"
    pod = c.hypervisors()[f"hypervisor-{broken}"]
    assert pod["status"]["phase"] == "Running"
    assert {x["type"]: x["status"] for x in pod["status"]["conditions"]}["Ready"] == "False"


def test_switch_off_records_hash_and_waits_then_resumes(make: Callable[..., Cluster]) -> None:
    c = make(SimConfig(nodes_per_pool=3))
    c.run(lambda: bool(c.comp().get("hypervisorConfigSynced")))
    old_hash = c.comp()["hypervisor"]

    def off_and_new_image(tfc: Obj) -> None:
        Cluster.template(tfc)["nodeManagerConfig"]["nodePoolRollingUpdatePolicy"][
            "autoUpdateHypervisor"
        ] = False
        Cluster.template(tfc)["componentConfig"]["hypervisor"]["image"] = "hv:new"

    c.edit_tfc(off_and_new_image)
    for _ in range(3):
        c.tick()
    comp = c.comp()
    assert comp["hypervisor"] != old_hash  # R12: the new hash is recorded ...
    assert "hypervisorUpdateProgress" not in comp and "hypervisorConfigSynced" not in comp
    assert c.images().count("hv:new") == 0  # ... and nothing is replaced
    assert f"{D}/hypervisor-update-in-progress" not in c.pool()["metadata"]["annotations"]

    def on(tfc: Obj) -> None:
        Cluster.template(tfc)["nodeManagerConfig"]["nodePoolRollingUpdatePolicy"][
            "autoUpdateHypervisor"
        ] = True

    c.edit_tfc(on)
    c.run(lambda: bool(c.comp().get("hypervisorConfigSynced")))
    assert c.images() == ["hv:new"] * 3


def test_unpullable_image_stalls_with_err_image_pull(make: Callable[..., Cluster]) -> None:
    c = make(SimConfig(nodes_per_pool=4, unpullable_images=frozenset({"hv:missing"})))
    c.sim.settle()
    c.edit_tfc(_set_image("hv:missing"))
    for _ in range(4):
        c.tick()
    bad = [
        p for p in c.hypervisors().values() if p["spec"]["containers"][0]["image"] == "hv:missing"
    ]
    assert len(bad) == 1  # the first batch only
    (status,) = bad[0]["status"]["containerStatuses"]
    assert status["state"]["waiting"]["reason"] == "ErrImagePull"
    assert bad[0]["status"]["phase"] == "Pending"
    assert c.comp().get("hypervisorUpdateProgress") is None


def test_phases_during_a_batch(make: Callable[..., Cluster]) -> None:
    c = make(SimConfig(nodes_per_pool=2, hypervisor_ready_delay=5.0))
    c.run(lambda: c.pool()["status"]["phase"] == "Running")
    c.edit_tfc(_set_image("hv:new"))
    c.sim.settle()
    assert c.pool()["status"]["phase"] == "Updating"
    phases = sorted(n["status"]["phase"] for n in c.store.list(TF, "GPUNode"))
    assert phases == ["Pending", "Running"]
    c.run(lambda: bool(c.comp().get("hypervisorConfigSynced")))
    assert c.pool()["status"]["phase"] == "Running"
    tfc = c.store.get(TF, "TensorFusionCluster", None, "tensor-fusion")
    assert tfc is not None and tfc["status"]["phase"] == "Running"


# ------------------------------------------------------------------ worker and client


def test_worker_rollout_rebuilds_worker_pods(make: Callable[..., Cluster]) -> None:
    workloads = tuple(WorkloadSpec(f"w{i}", "shared", replicas=2) for i in range(4))
    c = make(SimConfig(nodes_per_pool=1, workloads=workloads), policy={"autoUpdateWorker": True})
    c.sim.settle()

    def worker_pods() -> dict[str, str]:
        pods = c.store.list("v1", "Pod", "default", label_selector={f"{D}/component": "worker"})
        return {p["metadata"]["name"]: p["spec"]["containers"][0]["image"] for p in pods}

    c.run(lambda: bool(c.comp().get("workerConfigSynced")))
    old = worker_pods()
    assert len(old) == 8

    def new_worker(tfc: Obj) -> None:
        Cluster.template(tfc)["componentConfig"]["worker"]["image"] = "worker:new"

    c.edit_tfc(new_worker)
    c.sim.settle()
    # 20% of 4 workloads = 1 per batch: two worker pods rebuilt in the first batch.
    assert sorted(worker_pods().values()).count("worker:new") == 2
    c.run(lambda: bool(c.comp().get("workerConfigSynced")))
    now = worker_pods()
    assert set(now.values()) == {"worker:new"} and not set(now) & set(old)
    for tfw in c.store.list(TF, "TensorFusionWorkload"):
        assert tfw["status"]["phase"] == "Running"
        assert tfw["status"]["readyWorkers"] == 2


def test_client_rollout_deletes_app_pods_and_owner_recreates(make: Callable[..., Cluster]) -> None:
    workloads = (WorkloadSpec("app", "shared", replicas=1, clients=5),)
    c = make(SimConfig(nodes_per_pool=1, workloads=workloads), policy={"autoUpdateClient": True})
    c.run(lambda: bool(c.comp().get("clientConfigSynced")))
    sel = {f"{D}/enabled": "true", f"{D}/gpupool": POOL}
    old = {p["metadata"]["name"] for p in c.store.list("v1", "Pod", None, label_selector=sel)}
    assert len(old) == 5

    def new_client(tfc: Obj) -> None:
        Cluster.template(tfc)["componentConfig"]["client"]["image"] = "client:new"

    c.edit_tfc(new_client)
    c.sim.settle()
    now = c.store.list("v1", "Pod", None, label_selector=sel)
    assert len(now) == 5  # the owner recreated what the rollout deleted
    assert len({p["metadata"]["name"] for p in now} - old) == 1  # one per batch (20% of 5)
    c.run(lambda: bool(c.comp().get("clientConfigSynced")))
    final = c.store.list("v1", "Pod", None, label_selector=sel)
    assert not {p["metadata"]["name"] for p in final} & old
    assert {p["metadata"]["labels"][f"{D}/pod-template-hash"] for p in final} == {
        c.comp()["client"]
    }


# ------------------------------------------------------------------ the controller Deployment


def _controller_deployment(image: str) -> Obj:
    labels = {
        "app.kubernetes.io/name": "tensor-fusion",
        "app.kubernetes.io/component": "controller",
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "tf-controller", "namespace": NS, "labels": labels},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [{"name": "controller", "image": image}]},
            },
        },
    }


def test_controller_ready_after_delay_and_required_for_reconcile(
    make: Callable[..., Cluster],
) -> None:
    c = make(SimConfig(nodes_per_pool=1, controller_ready_delay=10.0, require_controller=True))
    c.store.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    c.sim.settle()
    assert c.store.get(TF, "GPUPool", None, POOL) is None  # no controller, no reconcile
    c.store.create(_controller_deployment("op:1"))
    c.sim.settle()
    dep = c.store.get("apps/v1", "Deployment", NS, "tf-controller")
    assert dep is not None and not dep["status"].get("readyReplicas")
    assert c.store.get(TF, "GPUPool", None, POOL) is None
    c.clock.advance(10.0)
    c.sim.settle()
    dep = c.store.get("apps/v1", "Deployment", NS, "tf-controller")
    assert dep is not None and dep["status"]["readyReplicas"] == 1
    assert dep["status"]["updatedReplicas"] == 1
    assert c.pool()["status"]["phase"] == "Running"


def test_controller_image_upgrade_alone_rolls_when_hash_covers_it(
    make: Callable[..., Cluster],
) -> None:
    # F4: hashes cover code-level defaults, so a new controller alone starts a rollout.
    config = SimConfig(
        nodes_per_pool=2, hash_covers_controller_image=True, controller_ready_delay=3
    )
    c = make(config)
    c.store.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    c.store.create(_controller_deployment("op:1"))
    c.run(lambda: bool(c.comp().get("hypervisorConfigSynced")))
    old = c.comp()["hypervisor"]
    before = {n: p["metadata"]["uid"] for n, p in c.hypervisors().items()}
    dep = c.store.get("apps/v1", "Deployment", NS, "tf-controller")
    assert dep is not None
    dep["spec"]["template"]["spec"]["containers"][0]["image"] = "op:2"
    c.store.update(dep)
    c.sim.settle()
    assert c.comp()["hypervisor"] == old  # the old controller still runs
    c.run(lambda: c.comp()["hypervisor"] != old and bool(c.comp().get("hypervisorConfigSynced")))
    after = {n: p["metadata"]["uid"] for n, p in c.hypervisors().items()}
    assert all(after[n] != before[n] for n in before)


def test_upgrade_from_2_13_leaves_two_hypervisors_per_node(make: Callable[..., Cluster]) -> None:
    # F6: 2.0–2.13 named pods tf-hypervisor-<node>; nothing cleans them up after an upgrade.
    c = make(SimConfig(nodes_per_pool=2, legacy_hypervisor_names=True))
    c.store.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    c.store.create(_controller_deployment("tensorfusion/tensor-fusion-operator:2.13.0"))
    c.run(lambda: bool(c.comp().get("hypervisorConfigSynced")))
    assert sorted(c.hypervisors()) == [
        f"tf-hypervisor-{POOL}-gpu-000",
        f"tf-hypervisor-{POOL}-gpu-001",
    ]
    dep = c.store.get("apps/v1", "Deployment", NS, "tf-controller")
    assert dep is not None
    dep["spec"]["template"]["spec"]["containers"][0]["image"] = (
        "tensorfusion/tensor-fusion-operator:2.17.0"
    )
    c.store.update(dep)
    c.sim.settle()
    names = sorted(c.hypervisors())
    assert names == [
        f"hypervisor-{POOL}-gpu-000",
        f"hypervisor-{POOL}-gpu-001",
        f"tf-hypervisor-{POOL}-gpu-000",
        f"tf-hypervisor-{POOL}-gpu-001",
    ]
