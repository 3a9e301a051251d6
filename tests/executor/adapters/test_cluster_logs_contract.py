"""The Cluster port's ``container_log`` contract (R18 reads the controller's ``cluster-agent``
log with it), against FakeCluster and KubeCluster on the API emulator and the real control
plane (``cluster_target``, as test_cluster_contract.py).

On every target: a missing pod → KubeNotFound; a container not in the pod → KubeInvalid with
the API server's "container X is not valid for pod Y"; a pod with nothing logged → "" (the
real server has no kubelet: an unbound pod's log is empty). Where a log can exist (the fake's
``set_container_log``, the emulator's ``sandbox.gitopsbot.io/log.<container>`` annotation):
the text, ``tail_lines``, ``since``, and a waiting container → KubeInvalid. Errors never
carry log text.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from gitopsbot.errors import KubeInvalid, KubeNotFound
from gitopsbot.ports.cluster import Cluster
from gitopsbot.sandbox.apiserver.pod_logs import log_annotation
from gitopsbot.testing import FakeCluster
from tests.executor.adapters.conftest import Target

LOG = (
    "2026-12-04T10:00:00Z INFO starting\n"
    "2026-12-04T10:00:05Z WARN canary-log-text-7f3e\n"
    "  continued line\n"
    "2026-12-04T10:00:10Z INFO connected to TensorFusion console as agent a-1\n"
)


def _pod(ns: str, name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "containers": [
                {"name": "controller", "image": "busybox:1"},
                {"name": "cluster-agent", "image": "busybox:1"},
            ]
        },
    }


def _set_log(target: Target, pod: str, container: str, text: str) -> None:
    if isinstance(target.impl, FakeCluster):
        target.impl.set_container_log(target.namespace, pod, container, text)
        return
    assert target.kube is not None
    patch = {"metadata": {"annotations": {log_annotation(container): text}}}
    target.kube.patch_merge("v1", "Pod", target.namespace, pod, patch)


def _can_log(target: Target) -> bool:
    return target.server is None or target.server.name == "emulator"


def test_missing_pod_and_unknown_container(cluster: Cluster, cluster_target: Target) -> None:
    ns = cluster_target.namespace
    with pytest.raises(KubeNotFound):
        cluster.container_log(ns, "nope", "cluster-agent")
    cluster.create(_pod(ns, "ctl"))
    with pytest.raises(KubeInvalid, match="container sidecar is not valid for pod ctl"):
        cluster.container_log(ns, "ctl", "sidecar")
    assert cluster.container_log(ns, "ctl", "cluster-agent") == ""


def test_text_tail_and_since(cluster: Cluster, cluster_target: Target) -> None:
    if not _can_log(cluster_target):
        pytest.skip("the real control plane has no kubelet: no pod has a log")
    ns = cluster_target.namespace
    cluster.create(_pod(ns, "ctl"))
    _set_log(cluster_target, "ctl", "cluster-agent", LOG)
    assert cluster.container_log(ns, "ctl", "cluster-agent") == LOG
    assert cluster.container_log(ns, "ctl", "controller") == ""
    assert (
        cluster.container_log(ns, "ctl", "cluster-agent", tail_lines=1)
        == LOG.splitlines(keepends=True)[-1]
    )
    assert cluster.container_log(ns, "ctl", "cluster-agent", tail_lines=0) == ""
    since = datetime(2026, 12, 4, 10, 0, 5, 600_000, tzinfo=UTC)  # second precision: :05 kept
    assert cluster.container_log(ns, "ctl", "cluster-agent", since=since) == "".join(
        LOG.splitlines(keepends=True)[1:]
    )
    later = datetime(2026, 12, 4, 10, 0, 11, tzinfo=UTC)
    assert cluster.container_log(ns, "ctl", "cluster-agent", since=later) == ""


def test_waiting_container_is_invalid_without_log_text(
    cluster: Cluster, cluster_target: Target
) -> None:
    if not _can_log(cluster_target):
        pytest.skip("the real control plane has no kubelet to say a container is waiting")
    ns = cluster_target.namespace
    pod = _pod(ns, "ctl")
    cluster.create(pod)
    _set_log(cluster_target, "ctl", "cluster-agent", LOG)
    statuses = [
        {"name": "cluster-agent", "ready": False, "restartCount": 0, "image": "busybox:1",
         "imageID": "", "state": {"waiting": {"reason": "ContainerCreating"}}},
    ]  # fmt: skip
    if isinstance(cluster_target.impl, FakeCluster):
        stored = cluster.get("v1", "Pod", ns, "ctl")
        assert stored is not None
        cluster_target.impl.put({**stored, "status": {"containerStatuses": statuses}})
    else:
        assert cluster_target.server is not None
        cluster_target.server.request(
            "PATCH",
            f"/api/v1/namespaces/{ns}/pods/ctl/status",
            {"status": {"phase": "Pending", "containerStatuses": statuses}},
            content_type="application/merge-patch+json",
        )
    with pytest.raises(KubeInvalid, match="waiting to start: ContainerCreating") as raised:
        cluster.container_log(ns, "ctl", "cluster-agent")
    assert "canary-log-text" not in str(raised.value)
