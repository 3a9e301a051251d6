"""The Cluster port's contract, run against FakeCluster and KubeCluster (kubernetes client over
the API emulator).

Covers: get of a missing object or an unserved kind → None; create, then create again →
KubeConflict; get/list by label selector, sorted; server-side apply creates and updates, and
a different field manager's conflicting value → KubeConflict unless force; JSON merge patch
(null deletes) and its 404; resourceVersion moves on every change, generation only on spec
changes; delete twice; restart_deployment sets kubectl's restartedAt annotation and the
Deployment is rolled out; read_secret decodes and names the missing key; apply_crds serves
the new kinds and confirms each CRD; non-CRD documents are refused naming the file.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from gitopsbot.errors import KubeConflict, KubeInvalid, KubeNotFound
from gitopsbot.ports.cluster import RESTARTED_AT, Cluster

NS = "default"

CRD = """\
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.com
spec:
  group: example.com
  names: {kind: Widget, listKind: WidgetList, plural: widgets, singular: widget}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        x-kubernetes-preserve-unknown-fields: true
"""


def _cm(name: str, labels: dict[str, str] | None = None, **data: str) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": NS}
    if labels:
        meta["labels"] = labels
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": data}


def _deployment(name: str) -> dict[str, Any]:
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [{"name": "c", "image": "busybox:1"}]},
            },
        },
    }


def test_missing_object_and_unserved_kind(cluster: Cluster) -> None:
    assert cluster.get("v1", "ConfigMap", NS, "nope") is None
    assert cluster.get("example.com/v1", "Widget", NS, "w") is None
    assert cluster.list("example.com/v1", "Widget", NS) == []
    assert cluster.delete("v1", "ConfigMap", NS, "nope") is False
    with pytest.raises(KubeNotFound):
        cluster.apply({"apiVersion": "example.com/v1", "kind": "Widget",
                       "metadata": {"name": "w", "namespace": NS}})  # fmt: skip


def test_create_get_list(cluster: Cluster) -> None:
    cluster.create(_cm("b", {"tier": "x"}, k="1"))
    cluster.create(_cm("a", {"tier": "x"}, k="2"))
    cluster.create(_cm("c", {"tier": "y"}))
    with pytest.raises(KubeConflict):
        cluster.create(_cm("a"))
    got = cluster.get("v1", "ConfigMap", NS, "a")
    assert got is not None and got["data"] == {"k": "2"}
    assert got["kind"] == "ConfigMap" and got["metadata"]["resourceVersion"]
    names = [o["metadata"]["name"] for o in cluster.list("v1", "ConfigMap", NS, "tier=x")]
    assert names == ["a", "b"]
    assert all(o["kind"] == "ConfigMap" for o in cluster.list("v1", "ConfigMap", NS, "tier=x"))


def test_apply_creates_updates_and_tracks_managers(cluster: Cluster) -> None:
    first = cluster.apply(_cm("cfg", k="1"))
    second = cluster.apply(_cm("cfg", k="2"))
    assert second["data"]["k"] == "2"
    assert int(second["metadata"]["resourceVersion"]) > int(first["metadata"]["resourceVersion"])
    with pytest.raises(KubeConflict, match="gitopsbot"):
        cluster.apply(_cm("cfg", k="3"), field_manager="someone-else")
    forced = cluster.apply(_cm("cfg", k="3"), field_manager="someone-else", force=True)
    assert forced["data"]["k"] == "3"


def test_namespaced_apply_needs_a_namespace(cluster: Cluster) -> None:
    obj = _cm("cfg")
    del obj["metadata"]["namespace"]
    with pytest.raises(KubeInvalid):
        cluster.apply(obj)


def test_merge_patch(cluster: Cluster) -> None:
    cluster.create(_cm("cfg", keep="1", drop="2"))
    patched = cluster.patch_merge("v1", "ConfigMap", NS, "cfg", {"data": {"drop": None, "n": "3"}})
    assert patched["data"] == {"keep": "1", "n": "3"}
    with pytest.raises(KubeNotFound):
        cluster.patch_merge("v1", "ConfigMap", NS, "missing", {"data": {}})


def test_merge_patch_with_stale_resource_version_conflicts(cluster: Cluster) -> None:
    created = cluster.create(_cm("cfg", a="1"))
    stale = created["metadata"]["resourceVersion"]
    cluster.patch_merge("v1", "ConfigMap", NS, "cfg", {"data": {"a": "2"}})
    with pytest.raises(KubeConflict):
        cluster.patch_merge(
            "v1", "ConfigMap", NS, "cfg", {"metadata": {"resourceVersion": stale}, "data": {}}
        )
    current = cluster.get("v1", "ConfigMap", NS, "cfg")
    assert current is not None
    fresh = {"metadata": {"resourceVersion": current["metadata"]["resourceVersion"]}}
    assert cluster.patch_merge("v1", "ConfigMap", NS, "cfg", {**fresh, "data": {"a": "3"}})


def test_generation_moves_only_on_spec_changes(cluster: Cluster) -> None:
    created = cluster.create(_deployment("gen"))
    labelled = cluster.patch_merge(
        "apps/v1", "Deployment", NS, "gen", {"metadata": {"labels": {"x": "y"}}}
    )
    assert labelled["metadata"]["generation"] == created["metadata"]["generation"]
    rescaled = cluster.patch_merge("apps/v1", "Deployment", NS, "gen", {"spec": {"replicas": 2}})
    assert rescaled["metadata"]["generation"] == created["metadata"]["generation"] + 1


def test_delete(cluster: Cluster) -> None:
    cluster.create(_cm("gone"))
    assert cluster.delete("v1", "ConfigMap", NS, "gone") is True
    assert cluster.delete("v1", "ConfigMap", NS, "gone") is False
    assert cluster.get("v1", "ConfigMap", NS, "gone") is None


def test_restart_deployment_and_readiness(cluster: Cluster) -> None:
    cluster.create(_deployment("ctl"))
    at = datetime(2026, 12, 2, 14, 0, 0, tzinfo=UTC)
    cluster.restart_deployment(NS, "ctl", at=at)
    deployment = cluster.get("apps/v1", "Deployment", NS, "ctl")
    assert deployment is not None
    annotations = deployment["spec"]["template"]["metadata"]["annotations"]
    assert annotations[RESTARTED_AT] == "2026-12-02T14:00:00Z"
    assert deployment["metadata"]["generation"] == 2
    readiness = cluster.deployment_ready(NS, "ctl")
    assert readiness.name == "ctl"
    with pytest.raises(KubeNotFound):
        cluster.deployment_ready(NS, "nope")


def test_read_secret(cluster: Cluster) -> None:
    cluster.create({"apiVersion": "v1", "kind": "Secret",
                    "metadata": {"name": "creds", "namespace": NS},
                    "data": {"token": "czNjcjN0"}})  # fmt: skip
    assert cluster.read_secret(NS, "creds", "token") == "s3cr3t"
    with pytest.raises(KubeNotFound, match="no key 'other'") as missing_key:
        cluster.read_secret(NS, "creds", "other")
    assert "s3cr3t" not in str(missing_key.value)
    with pytest.raises(KubeNotFound, match="creds2"):
        cluster.read_secret(NS, "creds2", "token")


def test_apply_crds_serves_new_kinds(cluster: Cluster) -> None:
    results = cluster.apply_crds({"widgets.yaml": CRD})
    assert [(r.name, r.applied, r.established) for r in results] == [
        ("widgets.example.com", True, True)
    ]
    assert results[0].stored_versions == ("v1",)
    cluster.apply({"apiVersion": "example.com/v1", "kind": "Widget",
                   "metadata": {"name": "w", "namespace": NS}, "spec": {"size": 3}})  # fmt: skip
    widget = cluster.get("example.com/v1", "Widget", NS, "w")
    assert widget is not None and widget["spec"] == {"size": 3}
    # Applying again (a CRD upgrade) is fine: force-conflicts (R7).
    assert cluster.apply_crds({"widgets.yaml": CRD})[0].ok


def test_apply_crds_refuses_other_documents(cluster: Cluster) -> None:
    with pytest.raises(KubeInvalid, match=r"bad\.yaml: document 2: expected a CustomResource"):
        cluster.apply_crds({"bad.yaml": CRD + "---\napiVersion: v1\nkind: ConfigMap\n"})
