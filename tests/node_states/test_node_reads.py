"""bot.node_reads: each GPU node of a pool as observed through the cluster port (FakeCluster)."""

from __future__ import annotations

from typing import Any

from gitopsbot.bot.node_reads import node_snapshots
from gitopsbot.core.fleet.model import ClusterSpec, Environment, ReleaseSpec, RolloutPolicy
from gitopsbot.core.records.node_states import NodeSnapshot
from gitopsbot.testing import FakeCluster

NEW = "tensorfusion/tensor-fusion-hypervisor:2.16.0"
OLD = "tensorfusion/tensor-fusion-hypervisor:2.15.0"
NS = "tensor-fusion-sys"


def spec() -> ClusterSpec:
    release = ReleaseSpec("https://charts.example", "tensor-fusion", "1.8.7", "tf", NS)
    return ClusterSpec("alpha", Environment("staging"), release, {}, RolloutPolicy())


def gpunode(name: str, *, pool: str = "shared", phase: str = "Running", **meta: Any) -> Any:
    return {
        "apiVersion": "tensor-fusion.ai/v1",
        "kind": "GPUNode",
        "metadata": {
            "name": name,
            "labels": {f"tensor-fusion.ai/pool-tensor-fusion-{pool}": "true"},
            **meta,
        },
        "status": {"phase": phase},
    }


def node(name: str, *, ready: bool = True, cordoned: bool = False) -> Any:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name},
        "spec": {"unschedulable": True} if cordoned else {},
        "status": {"conditions": [{"type": "Ready", "status": str(ready)}]},
    }


def pod(
    node_name: str,
    image: str,
    *,
    phase: str = "Running",
    ready: bool = True,
    name: str = "",
    **meta: Any,
) -> Any:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name or f"hypervisor-{node_name}",
            "namespace": NS,
            "labels": {"tensor-fusion.ai/component": "hypervisor"},
            **meta,
        },
        "spec": {
            "nodeName": node_name,
            "initContainers": [{"name": "init-shm", "image": NEW}],
            "containers": [{"name": "tensor-fusion-hypervisor", "image": image}],
        },
        "status": {"phase": phase, "conditions": [{"type": "Ready", "status": str(ready)}]},
    }


def world(*objects: Any) -> FakeCluster:
    cluster = FakeCluster()
    for obj in objects:
        cluster.put(obj)
    return cluster


def test_each_node_of_the_pool_as_the_rollout_sees_it() -> None:
    cluster = world(
        gpunode("n1"),
        node("n1"),
        pod("n1", NEW),
        gpunode("n2"),
        node("n2"),
        pod("n2", OLD),
        # Taken by the batch: GPUNode Pending, its new pod not Ready yet.
        gpunode("n3", phase="Pending"),
        node("n3"),
        pod("n3", NEW, phase="Pending", ready=False),
        # Cordoned by a person.
        gpunode("n4"),
        node("n4", cordoned=True),
        pod("n4", OLD),
        # Its pod deleted: being replaced.
        gpunode("n5"),
        node("n5"),
        # Another pool's node, and a GPUNode being deleted: not this pool's.
        gpunode("m1", pool="other"),
        node("m1"),
        pod("m1", OLD),
        gpunode("n6", deletionTimestamp="2026-12-04T12:00:00Z", finalizers=["x"]),
    )
    got = node_snapshots(cluster, spec(), "shared", NEW)
    assert got == (
        NodeSnapshot("n1", updated=True, ready=True, cordoned=False, in_progress=False),
        NodeSnapshot("n2", updated=False, ready=True, cordoned=False, in_progress=False),
        NodeSnapshot("n3", updated=True, ready=False, cordoned=False, in_progress=True),
        NodeSnapshot("n4", updated=False, ready=True, cordoned=True, in_progress=False),
        NodeSnapshot("n5", updated=False, ready=False, cordoned=False, in_progress=True),
    )


def test_the_main_container_tells_the_image_and_a_leftover_pod_is_not_it() -> None:
    cluster = world(
        gpunode("n1"),
        node("n1", ready=False),
        pod("n1", NEW, name="tf-hypervisor-n1"),  # 2.0-2.13's name: never replaced
        pod("n1", OLD),
        gpunode("n2"),
        node("n2"),
        pod("n2", OLD, deletionTimestamp="2026-12-04T12:00:00Z"),
    )
    got = {s.name: s for s in node_snapshots(cluster, spec(), "shared", NEW)}
    # hypervisor-n1 is the one: on the old image (its init container's NEW proves nothing).
    assert got["n1"] == NodeSnapshot("n1", False, False, False, False)
    assert got["n2"] == NodeSnapshot("n2", False, False, False, True)


def test_no_image_known_counts_no_node_updated_and_an_empty_pool_is_empty() -> None:
    cluster = world(gpunode("n1"), node("n1"), pod("n1", NEW))
    assert [s.updated for s in node_snapshots(cluster, spec(), "shared", "")] == [False]
    assert node_snapshots(cluster, spec(), "missing", NEW) == ()
