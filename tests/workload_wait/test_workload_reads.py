"""bot.workload_reads: the named workloads' sessions and opt-outs, and a pool's worker and
client units with their tenants and nodes, read through the cluster port (FakeCluster)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from gitopsbot.bot.workload_reads import batch_sizing, tenant_units, workload_snapshot
from gitopsbot.core.fleet.model import (
    ClusterSpec,
    Component,
    Environment,
    ReleaseSpec,
    RolloutPolicy,
)
from gitopsbot.core.rollouts.workload_wait import (
    OPT_OUT_ANNOTATION,
    Unit,
    WorkloadWait,
    decide_wait,
    size_by_tenants,
)
from gitopsbot.testing import FakeCluster

TF = "tensor-fusion.ai/v1"
GP = "tensor-fusion-gpu-a"
NS = "ml"


def spec() -> ClusterSpec:
    release = ReleaseSpec(
        "https://charts.example", "tensor-fusion", "1.8.7", "tf", "tensor-fusion-sys"
    )
    return ClusterSpec("alpha", Environment("staging"), release, {}, RolloutPolicy())


def meta(
    name: str, created: str, *, owner: tuple[str, str, str] | None = None, **extra: Any
) -> Any:
    out = {"name": name, "namespace": NS, "creationTimestamp": created, **extra}
    if owner:
        api, kind, owner_name = owner
        out["ownerReferences"] = [
            {"apiVersion": api, "kind": kind, "name": owner_name, "controller": True}
        ]
    return out


def pod(
    name: str,
    created: str,
    node: str,
    labels: dict[str, str],
    *,
    owner: tuple[str, str, str] | None = None,
    phase: str = "Running",
    annotations: dict[str, str] | None = None,
) -> Any:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta(name, created, owner=owner, labels=labels, annotations=annotations or {}),
        "spec": {"nodeName": node},
        "status": {"phase": phase},
    }


def client(name: str, created: str, node: str, workload: str, template: str, **kw: Any) -> Any:
    labels = {
        "tensor-fusion.ai/enabled": "true",
        "tensor-fusion.ai/gpupool": GP,
        "tensor-fusion.ai/component": "client",
        "tensor-fusion.ai/pod-template-hash": template,
        "team": "ml",
    }
    rs = kw.pop("rs", None)
    if rs:
        labels["pod-template-hash"] = rs  # Kubernetes' label, as on a ReplicaSet's pods
    annotations = {"tensor-fusion.ai/selected-workload": workload, **kw.pop("annotations", {})}
    return pod(name, created, node, labels, annotations=annotations, **kw)


def workload(name: str, created: str, owner: tuple[str, str, str] | None, **extra: Any) -> Any:
    return {
        "apiVersion": TF,
        "kind": "TensorFusionWorkload",
        "metadata": meta(
            name, created, owner=owner, labels={"tensor-fusion.ai/gpupool": GP}, **extra
        ),
        "spec": {"poolName": GP},
        "status": {"podTemplateHash": "w1"},
    }


def connection(name: str, workload_name: str, client_pod: str, phase: str, worker: str) -> Any:
    return {
        "apiVersion": TF,
        "kind": "TensorFusionConnection",
        "metadata": meta(
            name, "2026-12-01T00:00:00Z", labels={"tensor-fusion.ai/workload": workload_name}
        ),
        "spec": {"workloadName": workload_name, "clientPod": client_pod},
        "status": {"phase": phase, "workerName": worker, "connectionURL": "native+x"},
    }


RS = ("apps/v1", "ReplicaSet", "trainer-abc")


def world() -> FakeCluster:
    cluster = FakeCluster()
    objects = [
        {
            "apiVersion": TF,
            "kind": "GPUPool",
            "metadata": {"name": GP},
            "status": {"componentStatus": {"client": "c2", "worker": "pw2"}},
        },
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": meta("trainer", "2026-11-01T00:00:00Z"),
        },
        {
            "apiVersion": "apps/v1",
            "kind": "ReplicaSet",
            "metadata": meta(
                "trainer-abc", "2026-11-01T00:00:00Z", owner=("apps/v1", "Deployment", "trainer")
            ),
        },
        # Two replicas of one Deployment: one tenant. The first on the old client template.
        client(
            "trainer-abc-1", "2026-12-01T01:00:00Z", "n-app", "trainer-wl", "c1", owner=RS, rs="abc"
        ),
        client(
            "trainer-abc-2", "2026-12-01T02:00:00Z", "n-app", "trainer-wl", "c2", owner=RS, rs="abc"
        ),
        # A bare local-GPU pod: its own tenant and its own worker; its GPU is its node's.
        pod(
            "solo",
            "2026-12-01T00:30:00Z",
            "n-2",
            {
                "tensor-fusion.ai/enabled": "true",
                "tensor-fusion.ai/gpupool": GP,
                "tensor-fusion.ai/component": "worker",
                "tensor-fusion.ai/workload": "solo-wl",
            },
            annotations={OPT_OUT_ANNOTATION: "true"},
        ),
        # A ReplicaSet whose name does not end with the pod's hash: the ReplicaSet is the tenant.
        client(
            "batch-x",
            "2026-12-01T03:00:00Z",
            "n-app",
            "batch-wl",
            "c1",
            owner=("apps/v1", "ReplicaSet", "gone-rs"),
            rs="abc",
        ),
        # Another pool's app pod.
        pod(
            "elsewhere",
            "2026-12-01T00:00:00Z",
            "n-9",
            {
                "tensor-fusion.ai/enabled": "true",
                "tensor-fusion.ai/gpupool": "tensor-fusion-other",
                "team": "ml",
            },
        ),
        workload("trainer-wl", "2026-12-01T01:00:00Z", ("apps/v1", "Deployment", "trainer")),
        workload("solo-wl", "2026-12-01T00:30:00Z", ("v1", "Pod", "solo")),
        workload(
            "leaving-wl", "2026-12-01T00:00:00Z", None, deletionTimestamp="2026-12-04T00:00:00Z"
        ),
        # trainer-abc-1's dedicated worker, named after its connection.
        pod(
            "trainer-abc-1-conn",
            "2026-12-01T01:00:01Z",
            "n-gpu-1",
            {"tensor-fusion.ai/component": "worker", "tensor-fusion.ai/workload": "trainer-wl"},
            owner=(TF, "TensorFusionConnection", "trainer-abc-1-conn"),
        ),
        connection(
            "trainer-abc-1-conn", "trainer-wl", "trainer-abc-1", "Running", "trainer-abc-1-conn"
        ),
        connection("trainer-abc-2-conn", "trainer-wl", "trainer-abc-2", "Pending", ""),
    ]
    for obj in objects:
        cluster.put(obj)
    return cluster


def at(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def test_worker_units_are_the_pools_workloads_with_tenants_and_nodes() -> None:
    got = tenant_units(world(), spec(), "gpu-a", Component.WORKER)
    assert got == (
        Unit("ml/solo-wl", "ml/Pod/solo", True, at("2026-12-01T00:30:00"), ("n-2",)),
        Unit(
            "ml/trainer-wl", "ml/Deployment/trainer", True, at("2026-12-01T01:00:00"), ("n-gpu-1",)
        ),
    )
    # Synced: nothing outdated; or the caller's own test.
    cluster = world()
    cluster.put(
        {
            "apiVersion": TF,
            "kind": "GPUPool",
            "metadata": {"name": GP},
            "status": {"componentStatus": {"worker": "pw2", "workerConfigSynced": True}},
        }
    )
    assert not any(u.outdated for u in tenant_units(cluster, spec(), "gpu-a", Component.WORKER))
    picked = tenant_units(
        world(),
        spec(),
        "gpu-a",
        Component.WORKER,
        is_outdated=lambda w: w["metadata"]["name"] == "trainer-wl",
    )
    assert [u.outdated for u in picked] == [False, True]


def test_client_units_map_pods_to_their_workers_nodes() -> None:
    got = tenant_units(world(), spec(), "gpu-a", Component.CLIENT)
    assert [(u.name, u.tenant, u.outdated, u.nodes) for u in got] == [
        ("ml/batch-x", "ml/ReplicaSet/gone-rs", True, ("n-app",)),
        # No template hash label: outdated, as the controller judges it.
        ("ml/solo", "ml/Pod/solo", True, ("n-2",)),
        # Its connection's worker runs on n-gpu-1.
        ("ml/trainer-abc-1", "ml/Deployment/trainer", True, ("n-app", "n-gpu-1")),
        ("ml/trainer-abc-2", "ml/Deployment/trainer", False, ("n-app",)),
    ]
    assert tenant_units(world(), spec(), "gpu-a", Component.HYPERVISOR) == ()
    # 3 tenants, 34% = 1. trainer-abc-2 is already updated, so at 50% (2 units a batch)
    # the first batch takes one unit: the oldest outdated, solo; 51% would take two.
    sizing = size_by_tenants(got, 34, 100)
    assert sizing.percentage == 50 and sizing.batch.units == ("ml/solo",)
    assert sizing.batch.nodes == ("n-2",)
    read = batch_sizing(
        world(),
        spec(),
        "gpu-a",
        Component.CLIENT,
        max_tenant_share_percent=34,
        requested_percentage=100,
    )
    assert read == sizing


def test_snapshot_of_sessions_until_the_connection_stops() -> None:
    cluster = world()
    wait = WorkloadWait("team=ml", NS, "no-active-session", 600, "skip-window")
    got = workload_snapshot(cluster, spec(), "gpu-a", wait)
    assert got.workloads == ("ml/batch-wl", "ml/trainer-wl")
    assert got.sessions == (
        "connection ml/trainer-abc-1-conn (workload trainer-wl, worker trainer-abc-1-conn)",
    )
    assert decide_wait(wait, got, 30).action == "wait"
    assert decide_wait(wait, got, 600).action == "skip-window"
    cluster.put(connection("trainer-abc-1-conn", "trainer-wl", "trainer-abc-1", "Failed", ""))
    assert (
        decide_wait(wait, workload_snapshot(cluster, spec(), "gpu-a", wait), 30).action == "proceed"
    )


def test_snapshot_without_selector_covers_the_pools_pods() -> None:
    wait = WorkloadWait("", None, "no-active-session", 600, "halt")
    got = workload_snapshot(world(), spec(), "gpu-a", wait)
    # The running local-GPU pod is a session of its own.
    assert "local-GPU pod ml/solo (workload solo-wl)" in got.sessions
    assert len(got.sessions) == 2


def test_snapshot_of_opt_outs_until_gone() -> None:
    cluster = world()
    wait = WorkloadWait("", None, "opt-out-gone", 600, "halt")
    got = workload_snapshot(cluster, spec(), "gpu-a", wait)
    assert got.opt_outs == ("pod ml/solo",) and got.sessions == ()
    assert decide_wait(wait, got, 600).action == "halt"
    cluster.delete("v1", "Pod", NS, "solo")
    assert (
        decide_wait(wait, workload_snapshot(cluster, spec(), "gpu-a", wait), 0).action == "proceed"
    )
