"""The controller simulator on the real control plane (SimConfig.real_server, KubeStore).

Aspects: the chart's CRDs installed with real kubectl; a TensorFusionCluster as the chart
renders it becomes GPUPools, GPUNodes and hypervisor pods that the real server accepts (pod
validation, ServiceAccount admission, conditional status writes of custom resources), and a
workload's worker and client pods are bound and run; the
controller Deployment's pods are made by the real ReplicaSet controller, bound and run by the
simulator, and its readiness is written by the real Deployment controller (the simulator
writes no Deployment status); a new hypervisor image rolls out in batches to 100 %.
"""

from __future__ import annotations

import copy
import os
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML

from gitopsbot.adapters.kube_store import KubeStore
from gitopsbot.sandbox.simulator import ControllerSim, SimConfig, WorkloadSpec
from gitopsbot.sandbox.simulator.controller import CONTROLLER_SELECTOR, WATCHED
from gitopsbot.sandbox.simulator.world_cleanup import clean_world

pytestmark = [pytest.mark.realkube, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "examples" / "charts" / "tensor-fusion-1.8.7"
TF = "tensor-fusion.ai/v1"
D = "tensor-fusion.ai"
NEW = "tensorfusion/tensor-fusion-hypervisor:2.99.0"
CONTROLLER_IMAGE = "tensorfusion/tensor-fusion-operator:2.17.0"
Obj = dict[str, Any]


def _wait(what: str, check: Callable[[], Any], timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        found = check()
        if found:
            return found
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


@pytest.fixture
def world(
    control_plane: Any, realkube_namespace: str, binaries: dict[str, Path], tmp_path: Path
) -> Iterator[tuple[KubeStore, str, Obj]]:
    """CRDs applied with kubectl, the chart's TFC (a unique name) and a KubeStore; at the end
    the TFC, the CRDs and the simulated Nodes are deleted, the pods at once."""
    kubeconfig = control_plane.write_kubeconfig(tmp_path / "kubeconfig")
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(tmp_path)}
    # Another test on the shared server may have left the TensorFusion CRDs terminating (a
    # CRD with objects goes asynchronously): start from none, as the sandbox does.
    before = KubeStore.from_kubeconfig(kubeconfig, watch_kinds=())
    try:
        clean_world(before, (), kubelet_node=SimConfig().kubelet_node, timeout=120)
    finally:
        before.close()
    applied = subprocess.run(
        [str(binaries["kubectl"]), "--kubeconfig", str(kubeconfig), "apply", "--server-side",
         "-f", str(CHART / "crds")],
        capture_output=True, text=True, env=env,
    )  # fmt: skip
    assert applied.returncode == 0, applied.stderr
    rendered = subprocess.run(
        [str(binaries["helm4"]), "template", "tf", str(CHART), "-n", realkube_namespace],
        check=True, capture_output=True, text=True, env=env,
    ).stdout  # fmt: skip
    (tfc,) = [
        d for d in YAML(typ="safe").load_all(rendered) if d and d["kind"] == "TensorFusionCluster"
    ]
    tfc = dict(tfc)
    tfc["metadata"]["name"] = f"sim-{os.urandom(3).hex()}"
    store = KubeStore.from_kubeconfig(kubeconfig, watch_kinds=WATCHED)
    try:
        yield store, realkube_namespace, tfc
    finally:
        for pod in store.list("v1", "Pod", realkube_namespace):
            store.delete("v1", "Pod", realkube_namespace, pod["metadata"]["name"])
        clean_world(store, (), kubelet_node=SimConfig().kubelet_node, timeout=60)
        store.close()


def _controller_deployment(ns: str) -> Obj:
    labels = {**CONTROLLER_SELECTOR, "app.kubernetes.io/instance": "tf"}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "tf-controller", "namespace": ns, "labels": labels},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "containers": [
                        {
                            "name": "controller",
                            "image": "tensorfusion/tensor-fusion-operator:2.17.0",
                        }
                    ]
                },
            },
        },
    }


def _pool_status(store: KubeStore, name: str) -> Obj:
    pool = store.get(TF, "GPUPool", None, name) or {}
    return dict(pool.get("status") or {})


def test_pools_nodes_hypervisors_and_a_batched_rollout_on_the_real_server(
    world: tuple[KubeStore, str, Obj],
) -> None:
    store, ns, tfc = world
    config = SimConfig(
        nodes_per_pool=3,
        operator_namespace=ns,
        require_controller=True,  # nothing happens until the real Deployment is available
        controller_ready_delay=0.5,
        hypervisor_ready_delay=0.2,
        real_server=True,
        workloads=(WorkloadSpec("train", "shared", namespace=ns, replicas=1, clients=1),),
    )
    store.create(_controller_deployment(ns))
    store.create(copy.deepcopy(tfc))
    pool = f"{tfc['metadata']['name']}-shared"
    with ControllerSim(store, config):
        dep = _wait(
            "the controller Deployment ready",
            lambda: (
                (d := store.get("apps/v1", "Deployment", ns, "tf-controller"))
                and (d.get("status") or {}).get("readyReplicas") == 1
                and d
            ),
        )
        writers = {
            e["manager"]
            for e in dep["metadata"]["managedFields"]
            if e.get("subresource") == "status"
        }
        assert writers == {"kube-controller-manager"}
        (controller_pod,) = store.list("v1", "Pod", ns, label_selector=CONTROLLER_SELECTOR)
        assert controller_pod["metadata"]["ownerReferences"][0]["kind"] == "ReplicaSet"
        assert controller_pod["spec"]["nodeName"] == config.kubelet_node  # bound by the sim

        _wait("the pool Running", lambda: _pool_status(store, pool).get("phase") == "Running")
        gpunodes = store.list(TF, "GPUNode", label_selector={f"{D}/managed-by": pool})
        assert len(gpunodes) == 3
        hypervisors = store.list("v1", "Pod", ns, label_selector={f"{D}/component": "hypervisor"})
        assert sorted(p["spec"]["nodeName"] for p in hypervisors) == sorted(
            n["metadata"]["name"] for n in gpunodes
        )
        assert all(p["status"]["phase"] == "Running" for p in hypervisors)
        managers = {
            (e["manager"], e.get("subresource", ""))
            for e in (store.get(TF, "GPUPool", None, pool) or {})["metadata"]["managedFields"]
        }
        assert ("tensor-fusion-controller", "status") in managers
        # A workload's worker pod and a client pod: bound by the simulator, then Running.
        for component in ("worker", "client"):
            (pod,) = _wait(
                f"a Running {component} pod",
                lambda c=component: [
                    p
                    for p in store.list("v1", "Pod", ns, label_selector={f"{D}/component": c})
                    if (p.get("status") or {}).get("phase") == "Running"
                ],
            )
            assert pod["spec"]["nodeName"] == config.kubelet_node

        # A new hypervisor image: the chart's policy rolls 20 % per batch (one node of three).
        fresh = store.get(TF, "TensorFusionCluster", None, tfc["metadata"]["name"])
        assert fresh is not None
        fresh["spec"]["gpuPools"][0]["specTemplate"]["componentConfig"]["hypervisor"]["image"] = NEW
        before = (_pool_status(store, pool).get("componentStatus") or {}).get("hypervisor")
        store.update(fresh)
        progress: list[int] = []

        def synced() -> bool:
            comp = _pool_status(store, pool).get("componentStatus") or {}
            if comp.get("hypervisor") == before:
                return False
            value = int(comp.get("hypervisorUpdateProgress") or 0)
            if value and (not progress or progress[-1] != value):
                progress.append(value)
            return bool(comp.get("hypervisorConfigSynced"))

        _wait("the hypervisor rollout to finish", synced, timeout=90)
        hypervisors = store.list("v1", "Pod", ns, label_selector={f"{D}/component": "hypervisor"})
        images = {c["image"] for p in hypervisors for c in p["spec"]["containers"]}
        assert images == {NEW} and len(hypervisors) == 3
    assert progress == sorted(progress) and progress[-1] == 100
    assert len(progress) >= 2, progress  # batches, not all at once
