"""The simulator seen through the official kubernetes Python client over HTTP (real threads,
real clock): what the bot's adapters will see. Aspects: pools, GPUNodes and hypervisor pods are
listed by label; a TFC patch through CustomObjectsApi starts a batched rollout whose progress
and annotations are readable through the client; a direct GPUPool patch is reverted (R11).
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config
from ruamel.yaml import YAML

from gitopsbot.sandbox.apiserver import ApiServer
from gitopsbot.sandbox.simulator import ControllerSim, SimConfig

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "examples" / "charts" / "tensor-fusion-1.8.7"
G, V = "tensor-fusion.ai", "v1"
D = "tensor-fusion.ai"
NS = "tensor-fusion-sys"


def _tfc() -> dict[str, Any]:
    pool_tmpl = {
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
                "autoUpdateHypervisor": True,
                "batchPercentage": 25,
                "batchInterval": "50ms",
            }
        },
    }
    return {
        "apiVersion": f"{G}/{V}",
        "kind": "TensorFusionCluster",
        "metadata": {"name": "tf"},
        "spec": {"gpuPools": [{"name": "a", "specTemplate": pool_tmpl}]},
    }


def _wait(cond: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.05)
    raise AssertionError("condition not reached in time")


@pytest.fixture
def api(apiserver: ApiServer, tmp_path: Path) -> Iterator[client.ApiClient]:
    for path in sorted((CHART / "crds").glob("*.yaml")):
        apiserver.store.create(YAML(typ="safe").load(path.read_text()))
    kubeconfig = apiserver.write_kubeconfig(tmp_path / "kubeconfig")
    api_client = config.new_client_from_config(config_file=str(kubeconfig))
    sim = ControllerSim(apiserver.store, SimConfig(nodes_per_pool=4, operator_namespace=NS))
    with api_client, sim:
        yield api_client


def test_rollout_observed_and_driven_through_the_kubernetes_client(api: client.ApiClient) -> None:
    custom = client.CustomObjectsApi(api)
    core = client.CoreV1Api(api)
    custom.create_cluster_custom_object(G, V, "tensorfusionclusters", _tfc())

    def pool() -> dict[str, Any]:
        result: dict[str, Any] = custom.get_cluster_custom_object(G, V, "gpupools", "tf-a")
        return result

    def synced() -> bool:
        try:
            return bool(pool()["status"]["componentStatus"].get("hypervisorConfigSynced"))
        except (client.ApiException, KeyError):
            return False

    _wait(synced)
    gpunodes = custom.list_cluster_custom_object(
        G, V, "gpunodes", label_selector=f"{D}/pool-tf-a=true"
    )
    assert len(gpunodes["items"]) == 4
    pods = core.list_namespaced_pod(NS, label_selector=f"{D}/component=hypervisor")
    assert sorted(p.metadata.name for p in pods.items) == [
        f"hypervisor-{n['metadata']['name']}" for n in gpunodes["items"]
    ]
    old_uids = {p.metadata.uid for p in pods.items}

    tfc = custom.get_cluster_custom_object(G, V, "tensorfusionclusters", "tf")
    pools = copy.deepcopy(tfc["spec"]["gpuPools"])
    pools[0]["specTemplate"]["componentConfig"]["hypervisor"]["image"] = "hv:2"
    custom.patch_cluster_custom_object(
        G, V, "tensorfusionclusters", "tf", {"spec": {"gpuPools": pools}}
    )

    seen_progress: set[int] = set()
    seen_in_progress = False

    def done() -> bool:
        nonlocal seen_in_progress
        p = pool()
        comp = p.get("status", {}).get("componentStatus", {})
        seen_progress.add(int(comp.get("hypervisorUpdateProgress") or 0))
        if f"{D}/hypervisor-update-in-progress" in (p["metadata"].get("annotations") or {}):
            seen_in_progress = True
        return (
            bool(comp.get("hypervisorConfigSynced")) and comp.get("hypervisorUpdateProgress") == 100
        )

    _wait(
        lambda: (
            done()
            and all(
                p.spec.containers[0].image == "hv:2"
                for p in core.list_namespaced_pod(
                    NS, label_selector=f"{D}/component=hypervisor"
                ).items
            )
        )
    )
    assert seen_in_progress
    assert seen_progress <= {0, 25, 50, 75, 100} and len(seen_progress - {0}) >= 2
    pods = core.list_namespaced_pod(NS, label_selector=f"{D}/component=hypervisor")
    assert not old_uids & {p.metadata.uid for p in pods.items}
    assert {p.status.phase for p in pods.items} == {"Running"}
    tfc = custom.get_cluster_custom_object(G, V, "tensorfusionclusters", "tf")
    _wait(
        lambda: (
            custom.get_cluster_custom_object(G, V, "tensorfusionclusters", "tf")["status"]["phase"]
            == "Running"
        )
    )


def test_direct_pool_patch_reverted_over_http(api: client.ApiClient) -> None:
    custom = client.CustomObjectsApi(api)
    custom.create_cluster_custom_object(G, V, "tensorfusionclusters", _tfc())

    def percentage() -> int | None:
        try:
            p = custom.get_cluster_custom_object(G, V, "gpupools", "tf-a")
        except client.ApiException:
            return None
        value = p["spec"]["nodeManagerConfig"]["nodePoolRollingUpdatePolicy"]["batchPercentage"]
        return int(value)

    _wait(lambda: percentage() == 25)
    custom.patch_cluster_custom_object(
        G,
        V,
        "gpupools",
        "tf-a",
        {"spec": {"nodeManagerConfig": {"nodePoolRollingUpdatePolicy": {"batchPercentage": 100}}}},
    )
    _wait(lambda: percentage() == 25)  # R11: the template wins
