"""The official kubernetes Python client against the emulator: the calls the bot makes."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, dynamic, watch
from kubernetes.client.rest import ApiException

from gitopsbot.sandbox.apiserver import ApiServer

CHART_CRD = Path(__file__).parent / "charts" / "widget" / "crds" / "widgets.yaml"


@pytest.fixture
def api(apiserver: ApiServer) -> Iterator[client.ApiClient]:
    cfg = client.Configuration(host=apiserver.url)
    with client.ApiClient(cfg) as c:
        yield c


def _widget_crd(apiserver: ApiServer) -> None:
    from ruamel.yaml import YAML

    apiserver.store.create(YAML(typ="safe").load(CHART_CRD.read_text()))


def _widget(name: str, color: str = "blue", **labels: str) -> dict[str, Any]:
    return {
        "apiVersion": "example.com/v1",
        "kind": "Widget",
        "metadata": {"name": name, "labels": labels},
        "spec": {"color": color},
    }


def test_custom_objects_get_patch_and_status(apiserver: ApiServer, api: client.ApiClient) -> None:
    _widget_crd(apiserver)
    co = client.CustomObjectsApi(api)
    created = co.create_namespaced_custom_object(
        "example.com", "v1", "default", "widgets", _widget("w1")
    )
    assert created["metadata"]["generation"] == 1
    assert created["spec"] == {"color": "blue", "size": 3}  # schema default applied
    got = co.get_namespaced_custom_object("example.com", "v1", "default", "widgets", "w1")
    assert got["metadata"]["uid"] == created["metadata"]["uid"]

    patched = co.patch_namespaced_custom_object(
        "example.com", "v1", "default", "widgets", "w1", {"spec": {"color": "red", "size": None}}
    )
    assert patched["spec"] == {"color": "red", "size": 3}  # null removed it, default restored
    assert patched["metadata"]["generation"] == 2
    assert int(patched["metadata"]["resourceVersion"]) > int(got["metadata"]["resourceVersion"])

    status = co.patch_namespaced_custom_object_status(
        "example.com",
        "v1",
        "default",
        "widgets",
        "w1",
        {"status": {"phase": "Ready"}, "spec": {"color": "green"}},
    )
    assert status["status"] == {"phase": "Ready"}
    assert status["spec"]["color"] == "red"  # the status subresource ignores spec
    assert status["metadata"]["generation"] == 2
    main = co.patch_namespaced_custom_object(
        "example.com", "v1", "default", "widgets", "w1", {"status": {"phase": "Hacked"}}
    )
    assert main["status"] == {"phase": "Ready"}  # the main resource ignores status
    assert co.get_namespaced_custom_object_status("example.com", "v1", "default", "widgets", "w1")[
        "status"
    ] == {"phase": "Ready"}


def test_custom_object_json_patch_apply_and_stale_replace(
    apiserver: ApiServer, api: client.ApiClient
) -> None:
    _widget_crd(apiserver)
    co = client.CustomObjectsApi(api)
    co.create_namespaced_custom_object("example.com", "v1", "default", "widgets", _widget("w1"))
    jp = co.patch_namespaced_custom_object(
        "example.com",
        "v1",
        "default",
        "widgets",
        "w1",
        [{"op": "replace", "path": "/spec/color", "value": "green"}],
        _content_type="application/json-patch+json",
    )
    assert jp["spec"]["color"] == "green"
    applied = co.patch_namespaced_custom_object(
        "example.com",
        "v1",
        "default",
        "widgets",
        "w2",
        _widget("w2", "red"),
        field_manager="bot",
        force=True,
        _content_type="application/apply-patch+yaml",
    )
    # SSA creating an object answers 201, which this client method maps to None (as it does
    # against a real API server); read it back instead.
    assert applied is None
    applied = co.get_namespaced_custom_object("example.com", "v1", "default", "widgets", "w2")
    assert applied["spec"]["color"] == "red"
    assert [m["manager"] for m in applied["metadata"]["managedFields"]] == ["bot"]
    stale = dict(jp)
    stale["metadata"] = dict(jp["metadata"], resourceVersion="1")
    with pytest.raises(ApiException) as e:
        co.replace_namespaced_custom_object("example.com", "v1", "default", "widgets", "w1", stale)
    assert e.value.status == 409


def test_invalid_custom_object_is_rejected_with_422(
    apiserver: ApiServer, api: client.ApiClient
) -> None:
    _widget_crd(apiserver)
    co = client.CustomObjectsApi(api)
    with pytest.raises(ApiException) as e:
        co.create_namespaced_custom_object(
            "example.com", "v1", "default", "widgets", _widget("bad", "purple")
        )
    assert e.value.status == 422
    assert "spec.color" in e.value.body and "purple" in e.value.body


def test_deployment_patch_bumps_generation_and_keeps_env(
    apiserver: ApiServer, api: client.ApiClient
) -> None:
    apps = client.AppsV1Api(api)
    apps.create_namespaced_deployment(
        "default",
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "web"},
            "spec": {
                "selector": {"matchLabels": {"app": "web"}},
                "template": {
                    "metadata": {"labels": {"app": "web"}},
                    "spec": {
                        "containers": [
                            {
                                "name": "web",
                                "image": "nginx:1",
                                "env": [{"name": "A", "value": "1"}],
                            }
                        ]
                    },
                },
            },
        },
    )
    restart = {
        "spec": {
            "template": {
                "metadata": {"annotations": {"kubectl.kubernetes.io/restartedAt": "now"}},
                "spec": {"containers": [{"name": "web", "image": "nginx:2"}]},
            }
        }
    }
    d = apps.patch_namespaced_deployment("web", "default", restart)
    assert d.metadata.generation == 2
    assert d.spec.template.spec.containers[0].image == "nginx:2"
    # strategic merge: the container list merged by name, its env kept
    assert [(e.name, e.value) for e in d.spec.template.spec.containers[0].env] == [("A", "1")]
    st = apps.read_namespaced_deployment_status("web", "default")
    assert st.status.observed_generation == 2 and st.status.ready_replicas == 1


def test_secret_create_replace_and_stale_conflict(api: client.ApiClient) -> None:
    core = client.CoreV1Api(api)
    s = core.create_namespaced_secret(
        "default",
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}, "stringData": {"k": "v"}},
    )
    assert s.data == {"k": "dg=="} and s.type == "Opaque"
    s.data = {"k": "dzI="}
    s2 = core.replace_namespaced_secret("s", "default", s)
    assert s2.metadata.resource_version != s.metadata.resource_version
    s.data = {"k": "dzM="}  # still carries the old resourceVersion
    with pytest.raises(ApiException) as e:
        core.replace_namespaced_secret("s", "default", s)
    assert e.value.status == 409
    assert core.read_namespaced_secret("s", "default").data == {"k": "dzI="}


def _pod(name: str, **labels: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]},
    }


def test_pods_listed_and_deleted_by_label(api: client.ApiClient) -> None:
    core = client.CoreV1Api(api)
    for name, role in (("a", "solo"), ("b", "other"), ("c", "worker")):
        core.create_namespaced_pod("default", _pod(name, role=role))
    names = [
        p.metadata.name
        for p in core.list_namespaced_pod(
            "default", label_selector="role in (solo,other),!missing"
        ).items
    ]
    assert names == ["a", "b"]
    deleted = core.delete_namespaced_pod("a", "default")
    assert deleted.metadata.name == "a"
    with pytest.raises(ApiException) as e:
        core.read_namespaced_pod("a", "default")
    assert e.value.status == 404
    core.delete_collection_namespaced_pod("default", label_selector="role=worker")
    assert [p.metadata.name for p in core.list_pod_for_all_namespaces().items] == ["b"]


def test_watch_sees_changes_resumes_and_reports_gone(
    apiserver: ApiServer, api: client.ApiClient
) -> None:
    core = client.CoreV1Api(api)
    core.create_namespaced_pod("default", _pod("p0", app="x"))
    rv = core.list_namespaced_pod("default").metadata.resource_version
    seen: list[tuple[str, str]] = []
    started = threading.Event()

    def consume() -> None:
        w = watch.Watch()
        for ev in w.stream(
            core.list_namespaced_pod,
            "default",
            label_selector="app=x",
            resource_version=rv,
            timeout_seconds=2,
        ):
            started.set()
            seen.append((ev["type"], ev["object"].metadata.name))
            if len(seen) == 3:
                w.stop()

    t = threading.Thread(target=consume)
    t.start()
    core.create_namespaced_pod("default", _pod("p1", app="x"))
    core.create_namespaced_pod("default", _pod("ignored", app="y"))
    core.patch_namespaced_pod("p1", "default", {"metadata": {"labels": {"v": "2"}}})
    core.delete_namespaced_pod("p1", "default")
    t.join(timeout=30)
    assert seen == [("ADDED", "p1"), ("MODIFIED", "p1"), ("DELETED", "p1")]

    with pytest.raises(ApiException) as e:
        for _ in watch.Watch().stream(
            core.list_namespaced_pod, "default", resource_version="0", timeout_seconds=1
        ):
            pass
        # resourceVersion 0 replays the current state; a compacted one is Gone:
        apiserver.store.compact()
        for _ in watch.Watch().stream(
            core.list_namespaced_pod, "default", resource_version="1", timeout_seconds=1
        ):
            pass
    assert e.value.status == 410


def test_watch_bookmarks_and_dynamic_client(apiserver: ApiServer, api: client.ApiClient) -> None:
    core = client.CoreV1Api(api)
    core.create_namespaced_config_map("default", {"metadata": {"name": "a"}})
    types = [
        ev["type"]
        for ev in watch.Watch().stream(
            core.list_namespaced_config_map,
            "default",
            allow_watch_bookmarks=True,
            timeout_seconds=1,
        )
    ]
    assert types[0] == "ADDED" and "BOOKMARK" in types[1:]  # bookmark_interval is 0.2 s
    dc = dynamic.DynamicClient(api)  # legacy discovery: /version, /api, /apis, /apis/<g>/<v>
    cms = dc.resources.get(api_version="v1", kind="ConfigMap")
    assert [i.metadata.name for i in cms.get(namespace="default").items] == ["a"]
    _widget_crd(apiserver)
    widgets = dc.resources.get(api_version="example.com/v1", kind="Widget")
    widgets.create(body=_widget("w"), namespace="default")
    assert widgets.get(name="w", namespace="default").spec.size == 3
