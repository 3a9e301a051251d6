"""What only the fakes do: failure injection per operation, pending-* on demand, the on_deploy
hook (how executor tests reflect a helm revision into a FakeCluster), recorded calls.
Their ordinary behaviour is checked by the contract suites against the real adapters."""

from __future__ import annotations

from typing import Any

import pytest

from gitopsbot.core.charts.observed import HelmReleaseInfo, HelmReleaseStatus
from gitopsbot.core.fleet.model import PoolPolicy, RolloutPolicy
from gitopsbot.errors import HelmReleaseLocked, HelmTimeout, KubeConflict
from gitopsbot.ports.helm import ChartRef, UpgradeRequest
from gitopsbot.testing import FakeCluster, FakeHelm

CM = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "ns"}}


def test_cluster_failure_injection_is_per_operation_and_counted() -> None:
    cluster = FakeCluster()
    cluster.create(CM)
    cluster.fail("patch_merge", KubeConflict("stale resourceVersion"), times=2)
    for _ in range(2):
        with pytest.raises(KubeConflict):
            cluster.patch_merge("v1", "ConfigMap", "ns", "c", {"data": {"a": "1"}})
    assert cluster.get("v1", "ConfigMap", "ns", "c") is not None  # other operations unaffected
    patched = cluster.patch_merge("v1", "ConfigMap", "ns", "c", {"data": {"a": "1"}})
    assert patched["data"] == {"a": "1"}
    assert [op for op, _ in cluster.calls].count("patch_merge") == 3


def test_cluster_folds_string_data() -> None:
    cluster = FakeCluster()
    meta = {"name": "s", "namespace": "ns"}
    cluster.create(
        {"apiVersion": "v1", "kind": "Secret", "metadata": meta, "stringData": {"k": "v"}}
    )
    assert cluster.read_secret("ns", "s", "k") == "v"


def test_helm_failure_injection_pending_and_hook() -> None:
    deployed: list[tuple[HelmReleaseInfo, Any, Any]] = []
    helm = FakeHelm(on_deploy=lambda info, values, policy: deployed.append((info, values, policy)))
    policy = RolloutPolicy(pools=(PoolPolicy(name="shared"),))
    request = UpgradeRequest(
        release="tf", namespace="ns", chart=ChartRef(name="tensor-fusion", repo_url="http://r"),
        version="1.8.7", values={"a": 1}, description="op=1", post_render_policy=policy,
    )  # fmt: skip
    helm.fail("upgrade", HelmTimeout("helm upgrade tf: no answer"))
    with pytest.raises(HelmTimeout):
        helm.upgrade(request)
    assert helm.history("tf", "ns") == []
    info = helm.upgrade(request)
    assert deployed == [(info, {"a": 1}, policy)]
    helm.set_pending("tf", "ns", HelmReleaseStatus.PENDING_ROLLBACK)
    with pytest.raises(HelmReleaseLocked, match="pending-rollback"):
        helm.upgrade(request)
    assert helm.calls == ["upgrade", "history", "upgrade", "upgrade"]
