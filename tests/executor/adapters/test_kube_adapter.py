"""KubeCluster beyond the contract: error mapping and retries over real HTTP (the emulator's
fault injection: on the emulator alone), CRD apply of the real TensorFusion CRDs (R7)
through the Python client and through real kubectl, and the Deployment readiness judgment.

Covers: 429 with Retry-After is retried after the server's delay; 5xx retried with backoff,
then KubeServerError after the bounded attempts; a POST is not repeated after a 5xx; 409 →
KubeConflict, never repeated (a real race lost by mark_helm_release_failed and
release_fields: a stale resourceVersion); 422 → KubeInvalid, 404 → KubeNotFound; a
transport failure → KubeServerError;
messages truncated and free of Secret data; every TensorFusion CRD of chart 1.8.7 confirmed
Established with its stored versions; kubectl's ``serverside-applied`` parsed per CRD; a
Deployment judged like ``kubectl rollout status``. What needs no fault injection runs on
both servers, the emulator and the real control plane (``ON_BOTH_SERVERS``).
"""

from __future__ import annotations

import base64
import gzip
import json
import time
from collections.abc import Callable
from pathlib import Path
from threading import Thread
from typing import Any

import pytest

from gitopsbot.adapters.kube import MESSAGE_LIMIT, KubeCluster, RetryPolicy, error_for
from gitopsbot.adapters.kubectl import KubectlCrdApplier
from gitopsbot.core.charts.kube_objects import deployment_readiness
from gitopsbot.core.charts.observed import CrdApplyResult
from gitopsbot.errors import (
    KubeConflict,
    KubeFailed,
    KubeForbidden,
    KubeInvalid,
    KubeNotFound,
    KubeServerError,
    KubeTooManyRequests,
)
from gitopsbot.sandbox.apiserver import ApiServer
from gitopsbot.sandbox.apiserver.faults import FaultRule
from tests.kube_pods import EMULATOR_ONLY, ON_BOTH_SERVERS, KubeServer, wait_served

NS = "default"


def _cm(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": NS}}


@EMULATOR_ONLY  # fault injection
def test_429_is_retried_after_retry_after(
    api: ApiServer, kube: KubeCluster, sleeps: list[float]
) -> None:
    kube.create(_cm("x"))
    rule = api.faults.error(429, retry_after=2, path="/api/v1/namespaces/default/configmaps/x")
    rule.times = 2
    assert kube.get("v1", "ConfigMap", NS, "x") is not None
    assert sleeps == [2.0, 2.0]


@EMULATOR_ONLY  # fault injection
def test_5xx_backs_off_then_gives_up(
    api: ApiServer, kube: KubeCluster, sleeps: list[float]
) -> None:
    kube.create(_cm("x"))
    api.faults.error(503, path="/api/v1/namespaces/default/configmaps/x")
    with pytest.raises(KubeServerError, match="HTTP 503"):
        kube.get("v1", "ConfigMap", NS, "x")
    assert sleeps == [0.5, 1.0]  # attempts=3 in the fixture: two waits, doubling


@EMULATOR_ONLY  # fault injection
def test_post_is_not_repeated_after_5xx(
    api: ApiServer, kube: KubeCluster, sleeps: list[float]
) -> None:
    rule = api.faults.error(500, path="/api/v1/namespaces/default/configmaps", method="POST")
    with pytest.raises(KubeServerError):
        kube.create(_cm("once"))
    assert rule.hits == 1
    assert sleeps == []


@EMULATOR_ONLY  # fault injection
def test_409_maps_to_conflict_and_is_not_repeated(
    api: ApiServer, kube: KubeCluster, sleeps: list[float]
) -> None:
    kube.create(_cm("x"))
    rule = api.faults.error(409, path="/api/v1/namespaces/default/configmaps/x", method="PATCH")
    with pytest.raises(KubeConflict):
        kube.patch_merge("v1", "ConfigMap", NS, "x", {"data": {"a": "b"}})
    # The same request would get the same answer: the caller reads again.
    assert (rule.hits, sleeps) == (1, [])


def _write_meanwhile(api: ApiServer, rule: FaultRule, write: Callable[[], object]) -> Thread:
    """Once ``rule`` (a latency on the adapter's write) holds a request, someone else writes
    the object: the adapter's write then carries a stale resourceVersion, a real race."""

    def run() -> None:
        deadline = time.monotonic() + 10
        while rule.hits == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        write()

    thread = Thread(target=run, daemon=True)
    thread.start()
    return thread


@EMULATOR_ONLY  # fault injection
def test_mark_helm_release_failed_loses_a_race_with_conflict(
    api: ApiServer, kube: KubeCluster, sleeps: list[float]
) -> None:
    kube.create(_pending_release_secret())
    name = "sh.helm.release.v1.rel.v2"
    path = f"/api/v1/namespaces/default/secrets/{name}"
    rule = api.faults.latency(0.5, path=path, method="PATCH")
    label = {"metadata": {"labels": {"x": "y"}}}
    other = _write_meanwhile(
        api, rule, lambda: api.store.patch_merge("v1", "Secret", NS, name, label)
    )
    with pytest.raises(KubeConflict) as raised:
        kube.mark_helm_release_failed(NS, "rel", 2, "helm died")
    other.join()
    assert (rule.hits, sleeps) == (1, [])
    assert "s3cr3t" not in str(raised.value)
    secret = api.store.get("v1", "Secret", NS, name)
    assert secret is not None and secret["metadata"]["labels"]["status"] == "pending-upgrade"
    # Read again, try again: it goes through.
    api.faults.clear()
    assert kube.mark_helm_release_failed(NS, "rel", 2, "helm died") is True


@EMULATOR_ONLY  # fault injection
def test_release_fields_loses_a_race_with_conflict(api: ApiServer, kube: KubeCluster) -> None:
    kube.apply(_cm("x") | {"data": {"a": "1", "c": "1"}}, field_manager="helm")
    kube.patch_merge("v1", "ConfigMap", NS, "x", {"data": {"a": "2"}})
    rule = api.faults.latency(0.5, path="/api/v1/namespaces/default/configmaps/x", method="PATCH")
    other = _write_meanwhile(
        api, rule,
        lambda: api.store.patch_merge("v1", "ConfigMap", NS, "x", {"data": {"b": "1"}}),
    )  # fmt: skip
    with pytest.raises(KubeConflict):
        kube.release_fields("v1", "ConfigMap", NS, "x")
    other.join()
    api.faults.clear()
    assert kube.release_fields("v1", "ConfigMap", NS, "x") is True
    stored = api.store.get("v1", "ConfigMap", NS, "x")
    assert stored is not None
    assert [(e["manager"], e["operation"]) for e in stored["metadata"]["managedFields"]] == [
        ("helm", "Apply"),
        ("sandbox", "Update"),
    ]


def _pending_release_secret() -> dict[str, Any]:
    record = {
        "name": "rel",
        "version": 2,
        "info": {"status": "pending-upgrade", "description": "Preparing upgrade"},
        "config": {"password": "s3cr3t"},
    }
    packed = base64.b64encode(gzip.compress(json.dumps(record).encode()))
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "helm.sh/release.v1",
        "metadata": {
            "name": "sh.helm.release.v1.rel.v2",
            "namespace": NS,
            "labels": {"name": "rel", "owner": "helm", "status": "pending-upgrade", "version": "2"},
        },
        "data": {"release": base64.b64encode(packed).decode()},
    }


@ON_BOTH_SERVERS
def test_422_maps_to_invalid(kube: KubeCluster, server: KubeServer) -> None:
    kube.apply_crds({"tfc.yaml": _TFC_CRD_MIN})
    wait_served(server, "example.com/v1", "things")  # the real server's discovery lags
    with pytest.raises(KubeInvalid, match="must be of type integer"):
        kube.create(_thing(server.namespace, "not-a-number"))


@ON_BOTH_SERVERS
def test_an_apply_of_a_wrongly_typed_value_is_a_server_error(
    kube: KubeCluster, server: KubeServer, sleeps: list[float]
) -> None:
    """Server-side apply builds a typed patch first, and a type mismatch fails there with a
    500 InternalError, not a 422 (the real server's answer; the emulator gives the same).
    It would fail the same way every time: the adapter calls it invalid and does not retry."""
    kube.apply_crds({"tfc.yaml": _TFC_CRD_MIN})
    wait_served(server, "example.com/v1", "things")
    sleeps.clear()  # the CRD's polls
    with pytest.raises(KubeInvalid, match="HTTP 500: failed to create typed patch object"):
        kube.apply(_thing(server.namespace, "not-a-number"))
    assert sleeps == []  # not retried: the same apply fails the same way
    assert kube.get("example.com/v1", "Thing", server.namespace, "t") is None


def _thing(namespace: str, size: object) -> dict[str, Any]:
    return {
        "apiVersion": "example.com/v1",
        "kind": "Thing",
        "metadata": {"name": "t", "namespace": namespace},
        "spec": {"size": size},
    }


def test_transport_failure_maps_to_server_error(tmp_path: Path, sleeps: list[float]) -> None:
    server = ApiServer()
    server.start()
    config = server.write_kubeconfig(tmp_path / "kc")
    server.stop()
    cluster = KubeCluster.from_kubeconfig(
        config, retry=RetryPolicy(attempts=2), sleep=sleeps.append, request_timeout_seconds=5
    )
    with pytest.raises(KubeServerError, match="transport"):
        cluster.get("v1", "ConfigMap", NS, "x")
    assert len(sleeps) == 1


@pytest.mark.parametrize(
    ("status", "error"),
    [
        (404, KubeNotFound),
        (409, KubeConflict),
        (422, KubeInvalid),
        (401, KubeForbidden),
        (403, KubeForbidden),
        (429, KubeTooManyRequests),
        (500, KubeServerError),
        (400, KubeFailed),
    ],
)
def test_error_mapping_table(status: int, error: type[Exception]) -> None:
    body = '{"kind": "Status", "reason": "R", "message": "' + "m" * 1000 + '"}'
    mapped = error_for(status, body, {"Retry-After": "7"}, what="get ConfigMap a/b")
    assert isinstance(mapped, error)
    assert len(str(mapped)) < MESSAGE_LIMIT + 60
    if isinstance(mapped, KubeTooManyRequests):
        assert mapped.retry_after == 7.0


def test_secret_errors_drop_server_text() -> None:
    body = (
        '{"kind": "Status", "reason": "Invalid", '
        '"message": "data.token: Invalid value: \\"hunter2-canary\\""}'
    )
    mapped = error_for(422, body, None, what="create Secret ns/creds")
    assert "hunter2-canary" not in str(mapped)
    assert "Secret ns/creds" in str(mapped)


def test_non_status_bodies_are_not_trusted() -> None:
    mapped = error_for(502, "<html>proxy said hunter2</html>", None, what="get ConfigMap a/b")
    assert "hunter2" not in str(mapped)


@pytest.mark.slow
@ON_BOTH_SERVERS
def test_real_tensor_fusion_crds_through_the_client(tensor_fusion: Path, kube: KubeCluster) -> None:
    documents = _crds(tensor_fusion)
    results = kube.apply_crds(documents)
    assert len(results) == len(documents) == 12
    assert all(r.ok for r in results), [r for r in results if not r.ok]
    assert {r.name for r in results} >= {
        "tensorfusionclusters.tensor-fusion.ai",
        "gpupools.tensor-fusion.ai",
    }
    assert all(r.stored_versions == ("v1",) for r in results)
    assert kube.list("tensor-fusion.ai/v1", "GPUPool") == []  # the kinds are served


@pytest.mark.slow
@ON_BOTH_SERVERS
def test_real_tensor_fusion_crds_through_kubectl(
    tensor_fusion: Path, binaries: dict[str, Path], kubeconfig: Path, tmp_path: Path
) -> None:
    applier = KubectlCrdApplier(
        binaries["kubectl"], home=tmp_path / "kubectl", kubeconfig=kubeconfig
    )
    documents = _crds(tensor_fusion)
    results = applier.apply_crds(documents)
    assert [r.name for r in results] == sorted(r.name for r in results)
    assert len(results) == 12
    assert all(r.applied and r.established for r in results), results
    # A second apply (the next upgrade's R7 step) is accepted too.
    assert all(r.ok for r in applier.apply_crds(documents))


@pytest.mark.slow
@EMULATOR_ONLY  # fault injection
@pytest.mark.parametrize("via", ["client", "kubectl"])
def test_a_crd_that_fails_to_apply_is_reported_by_name(
    via: str,
    tensor_fusion: Path,
    api: ApiServer,
    kube: KubeCluster,
    binaries: dict[str, Path],
    kubeconfig: Path,
    tmp_path: Path,
) -> None:
    documents = dict(list(_crds(tensor_fusion).items())[:3])
    api.faults.error(500, path="*/gpunodes.tensor-fusion.ai*", method="PATCH")
    if via == "kubectl":
        applier = KubectlCrdApplier(
            binaries["kubectl"], home=tmp_path / "k", kubeconfig=kubeconfig, sleep=lambda _: None
        )
        results = applier.apply_crds(documents)
        assert applier.last_retries == 3  # a 500 that never stops spends the budget
    else:
        results = kube.apply_crds(documents)
    by_name = {r.name: r for r in results}
    failed = by_name["gpunodes.tensor-fusion.ai"]
    assert (failed.applied, failed.established, failed.ok) == (False, False, False)
    assert "500" in failed.message or "InternalError" in failed.message
    assert by_name["gpunodeclaims.tensor-fusion.ai"].ok


@ON_BOTH_SERVERS
def test_kubectl_applier_refuses_non_crds(
    binaries: dict[str, Path], kubeconfig: Path, tmp_path: Path
) -> None:
    applier = KubectlCrdApplier(binaries["kubectl"], home=tmp_path / "k", kubeconfig=kubeconfig)
    with pytest.raises(KubeInvalid, match=r"cm\.yaml"):
        applier.apply_crds({"cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n"})


@pytest.mark.parametrize(
    ("status", "spec_replicas", "generation", "ready", "message"),
    [
        ({"observedGeneration": 2, "replicas": 2, "updatedReplicas": 2,
          "availableReplicas": 2, "readyReplicas": 2}, 2, 2, True, ""),
        ({"observedGeneration": 1, "replicas": 2, "updatedReplicas": 2,
          "availableReplicas": 2}, 2, 2, False, "observe the new generation"),
        ({"observedGeneration": 2, "replicas": 2, "updatedReplicas": 1,
          "availableReplicas": 2}, 2, 2, False, "1 of 2 replicas updated"),
        ({"observedGeneration": 2, "replicas": 3, "updatedReplicas": 2,
          "availableReplicas": 2}, 2, 2, False, "1 old replicas pending termination"),
        ({"observedGeneration": 2, "replicas": 2, "updatedReplicas": 2,
          "availableReplicas": 1}, 2, 2, False, "1 of 2 updated replicas available"),
        ({"observedGeneration": 2, "conditions": [{"type": "Progressing", "status": "False",
          "reason": "ProgressDeadlineExceeded"}]}, 2, 2, False, "progress deadline exceeded"),
    ],
)  # fmt: skip
def test_deployment_readiness(
    status: dict[str, Any], spec_replicas: int, generation: int, ready: bool, message: str
) -> None:
    deployment = {
        "metadata": {"name": "c", "namespace": "tf", "generation": generation},
        "spec": {"replicas": spec_replicas},
        "status": status,
    }
    judged = deployment_readiness(deployment)
    assert judged.ready is ready
    assert bool(judged) is ready
    assert message in judged.message


def _crds(tensor_fusion: Path) -> dict[str, str]:
    directory = tensor_fusion / "chart-1.8.7" / "crds"
    return {p.name: p.read_text(encoding="utf-8") for p in sorted(directory.glob("*.yaml"))}


_TFC_CRD_MIN = """\
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: things.example.com
spec:
  group: example.com
  names: {kind: Thing, listKind: ThingList, plural: things, singular: thing}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              size: {type: integer}
"""


@EMULATOR_ONLY  # fault injection
def test_kubectl_applier_retries_a_transient_failure(
    api: ApiServer, binaries: dict[str, Path], kubeconfig: Path, tmp_path: Path
) -> None:
    """Issue 10: a 409 on a stale read or a 5xx during the CRD apply is retried, counted, and
    does not fail the step; the waits are the configured backoff."""
    crds = Path(__file__).resolve().parents[3] / "examples" / "charts" / "tensor-fusion-1.8.7"
    documents = {p.name: p.read_text() for p in sorted((crds / "crds").glob("*.yaml"))}
    assert documents
    waits: list[float] = []
    applier = KubectlCrdApplier(
        binaries["kubectl"], home=tmp_path / "k", kubeconfig=kubeconfig, sleep=waits.append
    )
    rule = api.faults.error(503, path="*/customresourcedefinitions*", method="PATCH", times=1)
    results = applier.apply_crds(documents)
    assert rule.hits == 1
    assert all(r.ok for r in results), results
    assert applier.last_retries == 1 and waits == [1.0]


class _LaggingDiscovery(KubeCluster):
    """Discovery that lists the new kind only from its ``lag``-th look on (as a real
    kube-apiserver does a few milliseconds after Established)."""

    def __init__(self, lag: int, clock: list[float]) -> None:
        from kubernetes.client import ApiClient, Configuration

        super().__init__(
            ApiClient(Configuration()),
            sleep=lambda s: clock.__setitem__(0, clock[0] + s),
            monotonic=lambda: clock[0],
            crd_established_timeout_seconds=5,
            poll_seconds=1,
        )
        self.lag = lag
        self.looks = 0

    def _discover(self, api_version: str) -> dict[str, Any] | None:
        self.looks += 1
        if self.looks < self.lag:
            return {}
        return {"Widget": object()}


_WIDGET_CRD = {
    "metadata": {"name": "widgets.example.com"},
    "spec": {"group": "example.com", "names": {"kind": "Widget"},
             "versions": [{"name": "v1", "served": True}]},
}  # fmt: skip


def test_apply_crds_waits_until_discovery_serves_the_kind() -> None:
    clock = [0.0]
    kube = _LaggingDiscovery(lag=3, clock=clock)
    established = [CrdApplyResult("widgets.example.com", True, True, ("v1",))]
    results = kube.wait_served(established, [_WIDGET_CRD])
    assert results == established
    assert kube.looks == 3 and clock[0] == 2  # it looked again until the kind was listed


def test_a_kind_never_served_is_reported_not_established_naming_it() -> None:
    clock = [0.0]
    kube = _LaggingDiscovery(lag=1000, clock=clock)
    established = [CrdApplyResult("widgets.example.com", True, True, ("v1",))]
    [result] = kube.wait_served(established, [_WIDGET_CRD])
    assert not result.ok
    assert result.message == "Established, but not served after 5s: Widget in example.com/v1"
    assert clock[0] >= 5
