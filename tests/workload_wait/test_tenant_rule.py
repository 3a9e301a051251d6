"""The tenant of a worker or client unit, from the unit alone (``workload_wait.tenant_of``):
the bot's RBAC (deploy/rbac/rules.yaml) grants no ``get`` on ReplicaSets or Deployments, so
``tenant_units`` reads no owner at all."""

from __future__ import annotations

from typing import Any

import pytest

from gitopsbot.bot.workload_reads import tenant_units
from gitopsbot.core.fleet.model import Component
from gitopsbot.core.rollouts.workload_wait import tenant_of
from tests.workload_wait.test_workload_reads import spec, world


def pod(labels: dict[str, str], owner: tuple[str, str] | None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "p-1", "namespace": "ml", "labels": labels}
    if owner is not None:
        meta["ownerReferences"] = [
            {"apiVersion": "apps/v1", "kind": owner[0], "name": owner[1], "controller": True}
        ]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta}


@pytest.mark.parametrize(
    ("labels", "owner", "tenant"),
    [
        # A Deployment's ReplicaSet is named <deployment>-<pod-template-hash>.
        (
            {"pod-template-hash": "7d9f8c"},
            ("ReplicaSet", "trainer-7d9f8c"),
            "ml/Deployment/trainer",
        ),
        ({"pod-template-hash": "7d9f8c"}, ("ReplicaSet", "a-b-c-7d9f8c"), "ml/Deployment/a-b-c"),
        # A ReplicaSet not so named (made by hand, or no hash label): the ReplicaSet.
        (
            {"pod-template-hash": "7d9f8c"},
            ("ReplicaSet", "trainer-other"),
            "ml/ReplicaSet/trainer-other",
        ),
        ({}, ("ReplicaSet", "trainer-7d9f8c"), "ml/ReplicaSet/trainer-7d9f8c"),
        ({"pod-template-hash": "7d9f8c"}, ("ReplicaSet", "-7d9f8c"), "ml/ReplicaSet/-7d9f8c"),
        # TensorFusion's own pod-template-hash label is not Kubernetes' one.
        (
            {"tensor-fusion.ai/pod-template-hash": "7d9f8c"},
            ("ReplicaSet", "trainer-7d9f8c"),
            "ml/ReplicaSet/trainer-7d9f8c",
        ),
        # Other owners are the tenant themselves.
        ({"controller-revision-hash": "x"}, ("StatefulSet", "db"), "ml/StatefulSet/db"),
        ({}, ("DaemonSet", "agent"), "ml/DaemonSet/agent"),
        ({"batch.kubernetes.io/job-name": "train"}, ("Job", "train"), "ml/Job/train"),
        # A bare pod is its own tenant.
        ({"pod-template-hash": "7d9f8c"}, None, "ml/Pod/p-1"),
    ],
)
def test_tenant_from_the_unit_alone(
    labels: dict[str, str], owner: tuple[str, str] | None, tenant: str
) -> None:
    assert tenant_of(pod(labels, owner)) == tenant


def test_the_controlling_owner_counts() -> None:
    obj = pod({"pod-template-hash": "h1"}, ("ReplicaSet", "web-h1"))
    obj["metadata"]["ownerReferences"].insert(
        0, {"apiVersion": "v1", "kind": "ConfigMap", "name": "note"}
    )
    assert tenant_of(obj) == "ml/Deployment/web"


@pytest.mark.parametrize("component", [Component.WORKER, Component.CLIENT])
def test_tenant_units_get_no_owner(component: Component) -> None:
    cluster = world()
    units = tenant_units(cluster, spec(), "gpu-a", component)
    assert units
    gets = [what for op, what in cluster.calls if op == "get"]
    # Only the pool itself (its component hashes); never a ReplicaSet or a Deployment.
    assert gets and all(what.startswith("GPUPool ") for what in gets), gets
