"""The Cluster port's contract, run against FakeCluster and KubeCluster (kubernetes client over
HTTP) on each server: the API emulator and the real control plane (``cluster_target``).

Covers: get of a missing object or an unserved kind → None; create, then create again →
KubeConflict; get/list by label selector, sorted; server-side apply creates and updates, and
a different field manager's conflicting value → KubeConflict unless force; JSON merge patch
(null deletes) and its 404; resourceVersion moves on every change, generation only on spec
changes; delete twice; restart_deployment sets kubectl's restartedAt annotation and the
Deployment is rolled out; read_secret decodes and names the missing key; apply_crds serves
the new kinds and confirms each CRD; non-CRD documents are refused naming the file.
Break-glass: release_fields drops one field manager's ownership (a merge patch made the bot
an owner; another manager's apply then conflicts until it is released; other managers keep
theirs; the last manager's release leaves "before-first-apply" to the next apply);
mark_helm_release_failed turns a pending-* revision in Helm's Secret storage into failed
(gzip and plain payloads, every pending state, idempotent), refuses what is not that
revision of that release, and never shows the payload. list_metadata (Helm's release
Secrets without their records, the idle check's read) and the mark HelmStorage makes of it.
"""

from __future__ import annotations

import base64
import gzip
import json
import urllib.parse
from datetime import UTC, datetime
from typing import Any

import pytest

from gitopsbot.adapters.helm_storage import HelmStorage
from gitopsbot.adapters.kube import METADATA_LIST
from gitopsbot.errors import KubeConflict, KubeInvalid, KubeNotFound
from gitopsbot.ports.cluster import RESTARTED_AT, Cluster
from tests.executor.adapters.conftest import Target

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


@pytest.fixture
def ns(cluster_target: Target) -> str:
    """The namespace of the implementation under test."""
    return cluster_target.namespace


def _cm(ns: str, name: str, labels: dict[str, str] | None = None, **data: str) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": ns}
    if labels:
        meta["labels"] = labels
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": data}


def _deployment(ns: str, name: str) -> dict[str, Any]:
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [{"name": "c", "image": "busybox:1"}]},
            },
        },
    }


def test_missing_object_and_unserved_kind(cluster: Cluster, ns: str) -> None:
    assert cluster.get("v1", "ConfigMap", ns, "nope") is None
    assert cluster.get("example.com/v1", "Widget", ns, "w") is None
    assert cluster.list("example.com/v1", "Widget", ns) == []
    assert cluster.delete("v1", "ConfigMap", ns, "nope") is False
    with pytest.raises(KubeNotFound):
        cluster.apply({"apiVersion": "example.com/v1", "kind": "Widget",
                       "metadata": {"name": "w", "namespace": ns}})  # fmt: skip


def test_create_get_list(cluster: Cluster, ns: str) -> None:
    cluster.create(_cm(ns, "b", {"tier": "x"}, k="1"))
    cluster.create(_cm(ns, "a", {"tier": "x"}, k="2"))
    cluster.create(_cm(ns, "c", {"tier": "y"}))
    with pytest.raises(KubeConflict):
        cluster.create(_cm(ns, "a"))
    got = cluster.get("v1", "ConfigMap", ns, "a")
    assert got is not None and got["data"] == {"k": "2"}
    assert got["kind"] == "ConfigMap" and got["metadata"]["resourceVersion"]
    names = [o["metadata"]["name"] for o in cluster.list("v1", "ConfigMap", ns, "tier=x")]
    assert names == ["a", "b"]
    assert all(o["kind"] == "ConfigMap" for o in cluster.list("v1", "ConfigMap", ns, "tier=x"))


def test_apply_creates_updates_and_tracks_managers(cluster: Cluster, ns: str) -> None:
    first = cluster.apply(_cm(ns, "cfg", k="1"))
    second = cluster.apply(_cm(ns, "cfg", k="2"))
    assert second["data"]["k"] == "2"
    assert int(second["metadata"]["resourceVersion"]) > int(first["metadata"]["resourceVersion"])
    with pytest.raises(KubeConflict, match="gitopsbot"):
        cluster.apply(_cm(ns, "cfg", k="3"), field_manager="someone-else")
    forced = cluster.apply(_cm(ns, "cfg", k="3"), field_manager="someone-else", force=True)
    assert forced["data"]["k"] == "3"


def test_namespaced_apply_needs_a_namespace(cluster: Cluster, ns: str) -> None:
    obj = _cm(ns, "cfg")
    del obj["metadata"]["namespace"]
    with pytest.raises(KubeInvalid):
        cluster.apply(obj)


def test_merge_patch(cluster: Cluster, ns: str) -> None:
    cluster.create(_cm(ns, "cfg", keep="1", drop="2"))
    patched = cluster.patch_merge("v1", "ConfigMap", ns, "cfg", {"data": {"drop": None, "n": "3"}})
    assert patched["data"] == {"keep": "1", "n": "3"}
    with pytest.raises(KubeNotFound):
        cluster.patch_merge("v1", "ConfigMap", ns, "missing", {"data": {}})


def test_merge_patch_with_stale_resource_version_conflicts(cluster: Cluster, ns: str) -> None:
    created = cluster.create(_cm(ns, "cfg", a="1"))
    stale = created["metadata"]["resourceVersion"]
    cluster.patch_merge("v1", "ConfigMap", ns, "cfg", {"data": {"a": "2"}})
    with pytest.raises(KubeConflict):
        cluster.patch_merge(
            "v1", "ConfigMap", ns, "cfg", {"metadata": {"resourceVersion": stale}, "data": {}}
        )
    current = cluster.get("v1", "ConfigMap", ns, "cfg")
    assert current is not None
    fresh = {"metadata": {"resourceVersion": current["metadata"]["resourceVersion"]}}
    assert cluster.patch_merge("v1", "ConfigMap", ns, "cfg", {**fresh, "data": {"a": "3"}})


def test_generation_moves_only_on_spec_changes(cluster: Cluster, ns: str) -> None:
    created = cluster.create(_deployment(ns, "gen"))
    labelled = cluster.patch_merge(
        "apps/v1", "Deployment", ns, "gen", {"metadata": {"labels": {"x": "y"}}}
    )
    assert labelled["metadata"]["generation"] == created["metadata"]["generation"]
    rescaled = cluster.patch_merge("apps/v1", "Deployment", ns, "gen", {"spec": {"replicas": 2}})
    assert rescaled["metadata"]["generation"] == created["metadata"]["generation"] + 1


def test_delete(cluster: Cluster, ns: str) -> None:
    cluster.create(_cm(ns, "gone"))
    assert cluster.delete("v1", "ConfigMap", ns, "gone") is True
    assert cluster.delete("v1", "ConfigMap", ns, "gone") is False
    assert cluster.get("v1", "ConfigMap", ns, "gone") is None


def test_restart_deployment_and_readiness(cluster: Cluster, ns: str) -> None:
    cluster.create(_deployment(ns, "ctl"))
    at = datetime(2026, 12, 2, 14, 0, 0, tzinfo=UTC)
    cluster.restart_deployment(ns, "ctl", at=at)
    deployment = cluster.get("apps/v1", "Deployment", ns, "ctl")
    assert deployment is not None
    annotations = deployment["spec"]["template"]["metadata"]["annotations"]
    assert annotations[RESTARTED_AT] == "2026-12-02T14:00:00Z"
    assert deployment["metadata"]["generation"] == 2
    readiness = cluster.deployment_ready(ns, "ctl")
    assert readiness.name == "ctl"
    with pytest.raises(KubeNotFound):
        cluster.deployment_ready(ns, "nope")


def test_read_secret(cluster: Cluster, ns: str) -> None:
    cluster.create({"apiVersion": "v1", "kind": "Secret",
                    "metadata": {"name": "creds", "namespace": ns},
                    "data": {"token": "czNjcjN0"}})  # fmt: skip
    assert cluster.read_secret(ns, "creds", "token") == "s3cr3t"
    with pytest.raises(KubeNotFound, match="no key 'other'") as missing_key:
        cluster.read_secret(ns, "creds", "other")
    assert "s3cr3t" not in str(missing_key.value)
    with pytest.raises(KubeNotFound, match="creds2"):
        cluster.read_secret(ns, "creds2", "token")


def test_apply_crds_serves_new_kinds(cluster: Cluster, ns: str) -> None:
    # The real server reports Established a moment before discovery serves the kinds:
    # apply_crds waits for both, so the kind is usable at once (docs/sandbox.md).
    results = cluster.apply_crds({"widgets.yaml": CRD})
    assert [(r.name, r.applied, r.established) for r in results] == [
        ("widgets.example.com", True, True)
    ]
    assert results[0].stored_versions == ("v1",)
    cluster.apply({"apiVersion": "example.com/v1", "kind": "Widget",
                   "metadata": {"name": "w", "namespace": ns}, "spec": {"size": 3}})  # fmt: skip
    widget = cluster.get("example.com/v1", "Widget", ns, "w")
    assert widget is not None and widget["spec"] == {"size": 3}
    # Applying again (a CRD upgrade) is fine: force-conflicts (R7).
    assert cluster.apply_crds({"widgets.yaml": CRD})[0].ok


def test_apply_crds_refuses_other_documents(cluster: Cluster, ns: str) -> None:
    with pytest.raises(KubeInvalid, match=r"bad\.yaml: document 2: expected a CustomResource"):
        cluster.apply_crds({"bad.yaml": CRD + "---\napiVersion: v1\nkind: ConfigMap\n"})


# -- break-glass: releasing the bot's fields, unlocking a pending Helm release -------------------


def test_release_fields_lets_another_manager_apply(cluster: Cluster, ns: str) -> None:
    cluster.apply(_cm(ns, "cfg", k="1", x="1"), field_manager="helm")
    cluster.apply(_cm(ns, "cfg", k="1", x="1", y="1"), field_manager="other")
    # The bot's merge patch takes k from helm (an update owns what it changes) ...
    cluster.patch_merge("v1", "ConfigMap", ns, "cfg", {"data": {"k": "bot"}})
    with pytest.raises(KubeConflict, match="gitopsbot"):
        cluster.apply(_cm(ns, "cfg", k="2", x="1"), field_manager="helm")
    # ... until it gives its fields up: helm's apply then takes k, values untouched till then.
    assert cluster.release_fields("v1", "ConfigMap", ns, "cfg") is True
    released = cluster.get("v1", "ConfigMap", ns, "cfg")
    assert released is not None and released["data"]["k"] == "bot"
    assert cluster.release_fields("v1", "ConfigMap", ns, "cfg") is False
    assert cluster.apply(_cm(ns, "cfg", k="2", x="1"), field_manager="helm")["data"]["k"] == "2"
    # Every other manager keeps its fields.
    with pytest.raises(KubeConflict, match="other"):
        cluster.apply(_cm(ns, "cfg", k="2", x="1", y="2"), field_manager="helm")


def test_release_fields_of_a_missing_object(cluster: Cluster, ns: str) -> None:
    with pytest.raises(KubeNotFound, match=f"ConfigMap {ns}/nope"):
        cluster.release_fields("v1", "ConfigMap", ns, "nope")
    cluster.apply(_cm(ns, "cfg", k="1"), field_manager="helm")
    assert cluster.release_fields("v1", "ConfigMap", ns, "cfg", manager="nobody") is False


def test_release_fields_of_the_only_manager(cluster: Cluster, ns: str) -> None:
    """Nothing left: the API server resets managedFields, tracks no update, and its next
    apply attributes the existing fields to "before-first-apply"."""
    cluster.create(_cm(ns, "cfg", k="1"))
    assert cluster.release_fields("v1", "ConfigMap", ns, "cfg") is True
    cluster.patch_merge("v1", "ConfigMap", ns, "cfg", {"data": {"k": "2"}})
    assert cluster.release_fields("v1", "ConfigMap", ns, "cfg") is False
    with pytest.raises(KubeConflict, match="before-first-apply"):
        cluster.apply(_cm(ns, "cfg", k="3"), field_manager="helm")
    assert cluster.apply(_cm(ns, "cfg", k="2"), field_manager="helm")["data"]["k"] == "2"


SECRET_VALUE = "s3cr3t-in-values"


def _helm_record(
    ns: str, release: str, revision: int, status: str, description: str
) -> dict[str, Any]:
    return {
        "name": release,
        "namespace": ns,
        "version": revision,
        "info": {"status": status, "description": description, "notes": ""},
        "config": {"password": SECRET_VALUE},
        "manifest": "---\n# Source: x\n",
    }


def _helm_secret(ns: str, record: dict[str, Any], *, compress: bool = True) -> dict[str, Any]:
    payload = json.dumps(record).encode()
    helm_b64 = base64.b64encode(gzip.compress(payload) if compress else payload)
    release, revision = record["name"], record["version"]
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "helm.sh/release.v1",
        "metadata": {
            "name": f"sh.helm.release.v1.{release}.v{revision}",
            "namespace": ns,
            "labels": {"name": release, "owner": "helm", "status": record["info"]["status"],
                       "version": str(revision)},
        },
        "data": {"release": base64.b64encode(helm_b64).decode()},
    }  # fmt: skip


def _stored_record(cluster: Cluster, ns: str, name: str) -> tuple[dict[str, Any], dict[str, str]]:
    secret = cluster.get("v1", "Secret", ns, name)
    assert secret is not None
    packed = base64.b64decode(base64.b64decode(secret["data"]["release"]))
    assert packed[:2] == b"\x1f\x8b"  # written back gzipped, as helm writes it
    return json.loads(gzip.decompress(packed)), secret["metadata"]["labels"]


@pytest.mark.parametrize("compress", [True, False], ids=["gzip", "plain"])
def test_mark_helm_release_failed(cluster: Cluster, ns: str, compress: bool) -> None:
    cluster.create(_helm_secret(ns, _helm_record(ns, "rel", 1, "superseded", "Install complete")))
    pending = _helm_record(ns, "rel", 2, "pending-upgrade", "Preparing upgrade")
    cluster.create(_helm_secret(ns, pending, compress=compress))
    name = "sh.helm.release.v1.rel.v2"

    assert cluster.mark_helm_release_failed(ns, "rel", 2, "helm died (operator)") is True
    record, labels = _stored_record(cluster, ns, name)
    assert record["info"]["status"] == "failed"
    assert record["info"]["description"] == "Preparing upgrade; helm died (operator)"
    assert record["config"] == {"password": SECRET_VALUE}  # the rest of the record as it was
    assert record["manifest"] == pending["manifest"]
    assert labels["status"] == "failed" and labels["owner"] == "helm"
    assert int(labels["modifiedAt"]) > 0
    # Idempotent; a revision that is not pending is left alone.
    assert cluster.mark_helm_release_failed(ns, "rel", 2, "again") is False
    assert cluster.mark_helm_release_failed(ns, "rel", 1, "not pending") is False
    assert _stored_record(cluster, ns, name)[0]["info"]["description"].count("operator") == 1


@pytest.mark.parametrize("status", ["pending-install", "pending-rollback"])
def test_mark_helm_release_failed_every_pending_state(
    cluster: Cluster, ns: str, status: str
) -> None:
    cluster.create(_helm_secret(ns, _helm_record(ns, "rel", 3, status, "")))
    assert cluster.mark_helm_release_failed(ns, "rel", 3, "unlocked") is True
    record, labels = _stored_record(cluster, ns, "sh.helm.release.v1.rel.v3")
    assert (record["info"]["status"], record["info"]["description"]) == ("failed", "unlocked")
    assert labels["status"] == "failed"


def test_mark_helm_release_failed_refusals_never_show_the_payload(
    cluster: Cluster, ns: str
) -> None:
    with pytest.raises(KubeNotFound, match=r"sh\.helm\.release\.v1\.rel\.v7") as missing:
        cluster.mark_helm_release_failed(ns, "rel", 7, "x")
    assert "revision 7" in str(missing.value)
    # A Secret of another release, or of another revision, under that name.
    record = _helm_record(ns, "other", 4, "pending-upgrade", "")
    secret = _helm_secret(ns, record)
    secret["metadata"]["name"] = "sh.helm.release.v1.rel.v4"
    cluster.create(secret)
    with pytest.raises(KubeInvalid, match="not a Helm release record of rel") as foreign:
        cluster.mark_helm_release_failed(ns, "rel", 4, "x")
    record = _helm_record(ns, "rel", 6, "pending-upgrade", "")
    secret = _helm_secret(ns, record)
    secret["metadata"]["name"] = "sh.helm.release.v1.rel.v5"
    cluster.create(secret)
    with pytest.raises(KubeInvalid, match="holds revision 6, not 5") as other_revision:
        cluster.mark_helm_release_failed(ns, "rel", 5, "x")
    # Not Helm's format at all.
    garbled = base64.b64encode(SECRET_VALUE.encode()).decode()
    cluster.create({"apiVersion": "v1", "kind": "Secret", "type": "helm.sh/release.v1",
                    "metadata": {"name": "sh.helm.release.v1.rel.v8", "namespace": ns},
                    "data": {"release": garbled}})  # fmt: skip
    with pytest.raises(KubeInvalid, match="not a Helm release record") as garbage:
        cluster.mark_helm_release_failed(ns, "rel", 8, "x")
    cluster.create({"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                    "metadata": {"name": "sh.helm.release.v1.rel.v9", "namespace": ns},
                    "data": {"release": "eA=="}})  # fmt: skip
    with pytest.raises(KubeInvalid, match=r"not of type helm\.sh/release\.v1"):
        cluster.mark_helm_release_failed(ns, "rel", 9, "x")
    for error in (missing, foreign, other_revision, garbage):
        assert SECRET_VALUE not in str(error.value)


def test_list_metadata_leaves_the_data_on_the_server(cluster: Cluster, ns: str) -> None:
    """#29: the idle check's read of Helm's storage (``HelmStorage.mark``): the release
    Secrets' metadata, never their records; a revision added or rewritten changes the mark."""
    storage = HelmStorage(cluster)
    assert storage.mark("rel", ns) == ""  # no release yet
    cluster.create(_helm_secret(ns, _helm_record(ns, "rel", 1, "deployed", "Install complete")))
    cluster.create(_helm_secret(ns, _helm_record(ns, "else", 1, "deployed", "another")))
    found = cluster.list_metadata("v1", "Secret", ns, "owner=helm,name=rel")
    assert [item["metadata"]["name"] for item in found] == ["sh.helm.release.v1.rel.v1"]
    assert set(found[0]) == {"metadata"}  # no data, no type: metadata only
    assert found[0]["metadata"]["labels"]["status"] == "deployed"
    assert found[0]["metadata"]["resourceVersion"]
    assert SECRET_VALUE not in json.dumps(found)
    first = storage.mark("rel", ns)
    assert first and storage.mark("rel", ns) == first  # nothing changed: the same mark
    assert "sh.helm.release.v1.rel.v1" in first and SECRET_VALUE not in first
    cluster.create(_helm_secret(ns, _helm_record(ns, "rel", 2, "pending-upgrade", "Upgrading")))
    second = storage.mark("rel", ns)
    assert second != first
    assert cluster.mark_helm_release_failed(ns, "rel", 2, "helm died")
    assert storage.mark("rel", ns) not in (first, second)
    assert cluster.list_metadata("v1", "Secret", ns, "owner=helm,name=none") == []


def test_the_server_answers_a_metadata_list(cluster_target: Target) -> None:
    """What ``list_metadata`` asks, on the wire: both servers answer a
    PartialObjectMetadataList (the emulator as the real one), so no record is sent."""
    server, ns = cluster_target.server, cluster_target.namespace
    if server is None:
        pytest.skip("the fake has no wire")
    assert cluster_target.kube is not None
    cluster_target.kube.create(_helm_secret(ns, _helm_record(ns, "rel", 1, "deployed", "ok")))
    query = "?labelSelector=" + urllib.parse.quote("owner=helm,name=rel")
    found = server.request("GET", f"/api/v1/namespaces/{ns}/secrets{query}", accept=METADATA_LIST)
    assert (found["kind"], found["apiVersion"]) == ("PartialObjectMetadataList", "meta.k8s.io/v1")
    assert found["metadata"]["resourceVersion"]
    [item] = found["items"]
    assert item["kind"] == "PartialObjectMetadata" and set(item) == {
        "kind",
        "apiVersion",
        "metadata",
    }
    assert item["metadata"]["labels"]["version"] == "1"
