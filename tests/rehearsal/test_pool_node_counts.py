"""bot.node_reads.pool_node_counts: the GPU nodes per pool that ``rehearse --kubeconfig``
builds its sandbox from, read through the cluster port (FakeCluster): a pool's GPUNodes by
the label ``tensor-fusion.ai/pool-<gpupool>=true``, those being deleted left out."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from gitopsbot import app
from gitopsbot.bot.node_reads import pool_node_counts
from gitopsbot.core.fleet.model import (
    ClusterSpec,
    Environment,
    PoolPolicy,
    ReleaseSpec,
    RolloutPolicy,
)
from gitopsbot.sandbox.apiserver import ApiServer
from gitopsbot.testing import FakeCluster

ROOT = Path(__file__).resolve().parents[2]

NS = "tensor-fusion-sys"


def _spec(*pools: str, tfc: str = "") -> ClusterSpec:
    release = ReleaseSpec("https://charts.example", "tensor-fusion", "1.8.7", "tf", NS)
    values: dict[str, Any] = {"cluster": {"name": tfc}} if tfc else {}
    rollout = RolloutPolicy(pools=tuple(PoolPolicy(p, nodes=99) for p in pools))
    return ClusterSpec("alpha", Environment("production"), release, values, rollout)


def _gpunode(name: str, gpupool: str, **meta: Any) -> dict[str, Any]:
    return {
        "apiVersion": "tensor-fusion.ai/v1",
        "kind": "GPUNode",
        "metadata": {
            "name": name,
            "labels": {f"tensor-fusion.ai/pool-{gpupool}": "true"},
            **meta,
        },
        "status": {"phase": "Running"},
    }


def _cluster(*objects: dict[str, Any]) -> FakeCluster:
    cluster = FakeCluster()
    for obj in objects:
        cluster.put(obj)
    return cluster


def test_nodes_per_pool_by_label_those_being_deleted_left_out() -> None:
    cluster = _cluster(
        _gpunode("gpu-a1", "tensor-fusion-training"),
        _gpunode("gpu-a2", "tensor-fusion-training"),
        _gpunode("gpu-a3", "tensor-fusion-training", deletionTimestamp="2026-12-01T00:00:00Z"),
        _gpunode("gpu-b1", "tensor-fusion-inference"),
        # Another pool's nodes, and a label set to something else than "true": not counted.
        _gpunode("gpu-c1", "tensor-fusion-batch"),
        {
            **_gpunode("gpu-d1", "tensor-fusion-training"),
            "metadata": {
                "name": "gpu-d1",
                "labels": {"tensor-fusion.ai/pool-tensor-fusion-training": "false"},
            },
        },
    )
    # rollout.yaml's declared nodes: (99) play no part: the live count replaces them.
    assert pool_node_counts(cluster, _spec("training", "inference", "empty")) == {
        "training": 2,
        "inference": 1,
        "empty": 0,
    }


def test_the_gpupool_name_follows_the_tensor_fusion_cluster_name() -> None:
    # cluster.name in values.yaml names the TensorFusionCluster; its GPUPools are <tfc>-<pool>.
    cluster = _cluster(
        _gpunode("gpu-1", "prod-tf-training"),
        _gpunode("gpu-2", "tensor-fusion-training"),
    )
    assert pool_node_counts(cluster, _spec("training", tfc="prod-tf")) == {"training": 1}
    assert pool_node_counts(cluster, _spec("training")) == {"training": 1}
    assert pool_node_counts(FakeCluster(), _spec()) == {}


def test_through_a_kubeconfig_over_http(tmp_path: Path) -> None:
    """``rehearse --kubeconfig``'s read, as wired (app.live_cluster): the API emulator over
    HTTP, the GPUNode CRD of the example chart served, the kubeconfig's own context."""
    crd = ROOT / "examples/charts/tensor-fusion-1.8.7/crds/tensor-fusion.ai_gpunodes.yaml"
    with ApiServer() as api:
        api.store.create(yaml.safe_load(crd.read_text()))
        for name in ("gpu-1", "gpu-2", "gpu-3"):
            api.store.create(_gpunode(name, "tensor-fusion-training"))
        api.store.create(_gpunode("gpu-9", "tensor-fusion-inference"))
        config = api.write_kubeconfig(tmp_path / "kubeconfig", context="lab")
        spec = _spec("training", "inference")
        with app.live_cluster(str(config), spec, context="") as cluster:
            counts = pool_node_counts(cluster, spec)
    assert counts == {"training": 3, "inference": 1}
