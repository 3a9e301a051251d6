"""The emulator's HTTP protocol as clients see it on the wire: discovery, OpenAPI, patches,
server-side apply ownership, watches, fault injection and persistence."""

from __future__ import annotations

import http.client
import json
import time
from pathlib import Path
from typing import Any

import pytest

from gitopsbot.sandbox.apiserver import ApiServer

Resp = tuple[int, dict[str, str], Any]

DEPLOY: dict[str, Any] = {
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
                        "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
                    },
                    {"name": "sidecar", "image": "envoy:1"},
                ]
            },
        },
    },
}
DEPLOYS = "/apis/apps/v1/namespaces/default/deployments"


def req(
    api: ApiServer,
    method: str,
    path: str,
    body: Any = None,
    *,
    ctype: str = "application/json",
    accept: str = "application/json",
) -> Resp:
    conn = http.client.HTTPConnection(api.host, api.port, timeout=30)
    data = (
        None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
    )
    conn.request(method, path, body=data, headers={"Content-Type": ctype, "Accept": accept})
    r = conn.getresponse()
    raw = r.read()
    conn.close()
    headers = {k.lower(): v for k, v in r.getheaders()}
    try:
        return r.status, headers, json.loads(raw) if raw else None
    except ValueError:
        return r.status, headers, raw


def watch_lines(api: ApiServer, path: str) -> list[dict[str, Any]]:
    """Read a (short, timeoutSeconds-bounded) watch to its end."""
    status, _, body = req(api, "GET", path)
    assert status == 200
    text = body if isinstance(body, bytes) else json.dumps(body).encode()
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def test_discovery_legacy_and_aggregated_include_crds(apiserver: ApiServer) -> None:
    status, _, body = req(apiserver, "GET", "/apis/apps/v1")
    assert status == 200
    names = {r["name"] for r in body["resources"]}
    assert {"deployments", "deployments/status", "deployments/scale", "replicasets"} <= names
    agg = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json"
    status, headers, body = req(apiserver, "GET", "/apis", accept=agg)
    assert headers["content-type"] == (
        "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
    )
    groups = {i["metadata"]["name"] for i in body["items"]}
    assert {"apps", "apiextensions.k8s.io", "rbac.authorization.k8s.io"} <= groups
    status, headers, body = req(apiserver, "GET", "/api", accept=agg)
    core = body["items"][0]["versions"][0]["resources"]
    assert {"pods", "secrets", "namespaces"} <= {r["resource"] for r in core}
    status, _, legacy = req(apiserver, "GET", "/api")
    assert legacy["versions"] == ["v1"]


def test_openapi_v2_answers_a_content_type_go_can_parse(apiserver: ApiServer) -> None:
    status, headers, body = req(
        apiserver,
        "GET",
        "/openapi/v2",
        accept="application/com.github.proto-openapi.spec.v2@v1.0+protobuf",
    )
    assert status == 200 and body is None
    assert headers["content-type"] == "application/com.github.proto-openapi.spec.v2.v1.0+protobuf"
    assert req(apiserver, "GET", "/openapi/v3")[0] == 200


def test_errors_are_status_objects(apiserver: ApiServer) -> None:
    status, _, body = req(apiserver, "GET", "/api/v1/namespaces/default/pods/nope")
    assert status == 404
    assert (body["kind"], body["reason"], body["code"]) == ("Status", "NotFound", 404)
    status, _, body = req(
        apiserver, "POST", "/api/v1/namespaces/default/configmaps", {"metadata": {}}
    )
    assert (status, body["reason"]) == (422, "Invalid")


def test_strategic_merge_patch_directives(apiserver: ApiServer) -> None:
    assert req(apiserver, "POST", DEPLOYS, DEPLOY)[0] == 201
    patch = {
        "spec": {
            "template": {
                "spec": {
                    "$setElementOrder/containers": [{"name": "web"}, {"name": "sidecar"}],
                    "containers": [
                        {"name": "web", "env": [{"name": "B", "$patch": "delete"}]},
                        {"name": "sidecar", "$patch": "delete"},
                    ],
                }
            }
        }
    }
    status, _, body = req(
        apiserver, "PATCH", f"{DEPLOYS}/web", patch, ctype="application/strategic-merge-patch+json"
    )
    assert status == 200, body
    containers = body["spec"]["template"]["spec"]
    assert "$setElementOrder/containers" not in containers
    assert containers["containers"] == [
        {"name": "web", "image": "nginx:1", "env": [{"name": "A", "value": "1"}]}
    ]
    # JSON patch and merge patch on the same object
    status, _, body = req(
        apiserver,
        "PATCH",
        f"{DEPLOYS}/web",
        [{"op": "replace", "path": "/spec/replicas", "value": 4}],
        ctype="application/json-patch+json",
    )
    assert (status, body["spec"]["replicas"]) == (200, 4)
    status, _, body = req(
        apiserver,
        "PATCH",
        f"{DEPLOYS}/web",
        [{"op": "test", "path": "/spec/replicas", "value": 9}],
        ctype="application/json-patch+json",
    )
    assert status == 422


def test_server_side_apply_ownership_conflicts_and_force(apiserver: ApiServer) -> None:
    def apply(manager: str, obj: dict[str, Any], force: bool = False) -> Resp:
        q = f"?fieldManager={manager}&force={'true' if force else 'false'}"
        return req(
            apiserver, "PATCH", f"{DEPLOYS}/web{q}", obj, ctype="application/apply-patch+yaml"
        )

    status, _, body = apply("helm", DEPLOY)
    assert status == 201
    # another manager changing helm's image conflicts ...
    hotfix = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web"},
        "spec": {"template": {"spec": {"containers": [{"name": "web", "image": "nginx:9"}]}}},
    }
    status, _, body = apply("ops", hotfix)
    assert status == 409 and 'conflict with "helm"' in body["message"], body
    assert "image" in body["message"]
    # ... unless forced, which moves ownership of that field to it
    status, _, body = apply("ops", hotfix, force=True)
    assert status == 200
    assert body["spec"]["template"]["spec"]["containers"][0]["image"] == "nginx:9"
    managers = {m["manager"] for m in body["metadata"]["managedFields"]}
    assert {"helm", "ops"} <= managers
    # helm re-applies without env B and without its image: B goes, the ops image stays
    trimmed = json.loads(json.dumps(DEPLOY))
    web = trimmed["spec"]["template"]["spec"]["containers"][0]
    web["env"] = [{"name": "A", "value": "1"}]
    del web["image"]
    status, _, body = apply("helm", trimmed)
    assert status == 200, body
    web = body["spec"]["template"]["spec"]["containers"][0]
    assert web["env"] == [{"name": "A", "value": "1"}]
    assert web["image"] == "nginx:9"
    # an update (not apply) takes the field without conflict, like kubectl edit
    status, _, body = req(
        apiserver,
        "PATCH",
        f"{DEPLOYS}/web?fieldManager=editor",
        {"spec": {"replicas": 5}},
        ctype="application/merge-patch+json",
    )
    assert status == 200 and body["spec"]["replicas"] == 5


def test_strategic_merge_patch_on_a_custom_resource_is_415(apiserver: ApiServer) -> None:
    crd = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "things.example.com"},
        "spec": {
            "group": "example.com",
            "scope": "Cluster",
            "names": {"kind": "Thing", "plural": "things"},
            "versions": [{"name": "v1", "served": True, "storage": True}],
        },
    }
    assert (
        req(apiserver, "POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd)[0]
        == 201
    )
    thing = {"apiVersion": "example.com/v1", "kind": "Thing", "metadata": {"name": "t"}, "x": 1}
    assert req(apiserver, "POST", "/apis/example.com/v1/things", thing)[0] == 201
    status, _, _ = req(
        apiserver,
        "PATCH",
        "/apis/example.com/v1/things/t",
        {"x": 2},
        ctype="application/strategic-merge-patch+json",
    )
    assert status == 415


def test_watch_list_bookmarks_resume_and_gone(apiserver: ApiServer) -> None:
    cms = "/api/v1/namespaces/default/configmaps"
    req(apiserver, "POST", cms, {"metadata": {"name": "a"}})
    events = watch_lines(
        apiserver,
        f"{cms}?watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan"
        "&allowWatchBookmarks=true&timeoutSeconds=1",
    )
    assert events[0]["type"] == "ADDED" and events[0]["object"]["metadata"]["name"] == "a"
    end = events[1]
    assert end["type"] == "BOOKMARK"
    assert end["object"]["metadata"]["annotations"] == {"k8s.io/initial-events-end": "true"}
    assert any(e["type"] == "BOOKMARK" for e in events[2:])  # periodic bookmarks (0.2 s here)

    rv = end["object"]["metadata"]["resourceVersion"]
    req(apiserver, "POST", cms, {"metadata": {"name": "b"}})
    req(apiserver, "DELETE", f"{cms}/a")
    resumed = watch_lines(apiserver, f"{cms}?watch=true&resourceVersion={rv}&timeoutSeconds=1")
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in resumed] == [
        ("ADDED", "b"),
        ("DELETED", "a"),
    ]
    apiserver.store.compact()
    gone = watch_lines(apiserver, f"{cms}?watch=true&resourceVersion={rv}&timeoutSeconds=1")
    assert gone[0]["type"] == "ERROR" and gone[0]["object"]["code"] == 410


def test_faults_errors_retry_after_and_counts(apiserver: ApiServer) -> None:
    path = "/api/v1/namespaces/default/secrets"
    rule = apiserver.faults.error(503, path="*/secrets*", times=1)
    assert req(apiserver, "GET", path)[0] == 503
    assert req(apiserver, "GET", path)[0] == 200
    assert rule.hits == 1
    throttle = apiserver.faults.error(429, retry_after=7, method="POST")
    status, headers, body = req(apiserver, "POST", path, {"metadata": {"name": "s"}})
    assert (status, headers["retry-after"], body["reason"]) == (429, "7", "TooManyRequests")
    assert req(apiserver, "GET", path)[0] == 200  # only POST was throttled
    apiserver.faults.remove(throttle)
    assert req(apiserver, "POST", path, {"metadata": {"name": "s"}})[0] == 201
    apiserver.faults.error(409, path=f"{path}/s")
    assert req(apiserver, "PUT", f"{path}/s", {"metadata": {"name": "s"}})[0] == 409
    apiserver.faults.clear()
    slow = apiserver.faults.latency(0.05, path="/version")
    assert req(apiserver, "GET", "/version")[0] == 200 and slow.hits == 1


def test_dropped_watch_ends_without_the_closing_chunk(apiserver: ApiServer) -> None:
    apiserver.faults.drop_watches(path="*/configmaps", after=0.1)
    conn = http.client.HTTPConnection(apiserver.host, apiserver.port, timeout=10)
    conn.request("GET", "/api/v1/namespaces/default/configmaps?watch=true&timeoutSeconds=5")
    r = conn.getresponse()
    with pytest.raises(http.client.IncompleteRead):
        r.read()
    conn.close()


def test_state_dir_survives_a_restart(tmp_path: Path) -> None:
    with ApiServer(state_dir=tmp_path) as first:
        req(
            first,
            "POST",
            "/api/v1/namespaces/default/configmaps",
            {"metadata": {"name": "kept"}, "data": {"k": "v"}},
        )
        rv = first.store.resource_version
    with ApiServer(state_dir=tmp_path) as second:
        status, _, body = req(second, "GET", "/api/v1/namespaces/default/configmaps/kept")
        assert status == 200 and body["data"] == {"k": "v"}
        assert second.store.resource_version >= rv
        status, _, body = req(
            second, "POST", "/api/v1/namespaces/default/configmaps", {"metadata": {"name": "new"}}
        )
        assert int(body["metadata"]["resourceVersion"]) > rv


def test_strategic_merge_keys_of_pod_spec_lists(apiserver: ApiServer) -> None:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p"},
        "spec": {
            "containers": [
                {
                    "name": "c",
                    "image": "i:1",
                    "ports": [{"containerPort": 80, "name": "http"}],
                    "volumeMounts": [{"mountPath": "/a", "name": "va"}],
                }
            ],
            "initContainers": [{"name": "init", "image": "i:1"}],
            "volumes": [{"name": "va", "emptyDir": {}}],
            "tolerations": [{"key": "gpu", "operator": "Exists"}],
        },
        "status": {"phase": "Running"},
    }
    pods = "/api/v1/namespaces/default/pods"
    assert req(apiserver, "POST", pods, pod)[0] == 201
    patch = {
        "spec": {
            "containers": [
                {
                    "name": "c",
                    "ports": [{"containerPort": 9090, "name": "metrics"}],
                    "volumeMounts": [{"mountPath": "/b", "name": "vb"}],
                }
            ],
            "initContainers": [{"name": "init", "image": "i:2"}],
            "volumes": [{"name": "vb", "emptyDir": {}}],
            "tolerations": [{"key": "other", "operator": "Exists"}],
        }
    }
    status, _, body = req(
        apiserver, "PATCH", f"{pods}/p", patch, ctype="application/strategic-merge-patch+json"
    )
    assert status == 200, body
    spec = body["spec"]
    c = spec["containers"][0]
    assert [p["containerPort"] for p in c["ports"]] == [80, 9090]
    assert [m["mountPath"] for m in c["volumeMounts"]] == ["/a", "/b"]
    assert c["image"] == "i:1"
    assert spec["initContainers"] == [{"name": "init", "image": "i:2"}]
    assert [v["name"] for v in spec["volumes"]] == ["va", "vb"]
    # tolerations have no merge key in the real API (atomic list): replaced whole
    assert spec["tolerations"] == [{"key": "other", "operator": "Exists"}]
    # field selectors, as kubectl wait and the bot use them (a created pod starts Pending:
    # status sent with a create is dropped, as the real server does)
    status, _, body = req(apiserver, "GET", f"{pods}?fieldSelector=status.phase%3DPending")
    assert [i["metadata"]["name"] for i in body["items"]] == ["p"]
    status, _, body = req(apiserver, "GET", f"{pods}?fieldSelector=metadata.name!%3Dp")
    assert body["items"] == []


def test_a_watch_whose_client_hung_up_is_released(apiserver: ApiServer) -> None:
    conn = http.client.HTTPConnection(apiserver.host, apiserver.port, timeout=10)
    conn.request("GET", "/api/v1/namespaces/default/pods?watch=true")  # no timeoutSeconds
    assert conn.getresponse().status == 200
    assert apiserver.open_connections == 1
    conn.close()
    deadline = time.monotonic() + 20  # a bound for a slow machine, not a speed assertion
    while apiserver.open_connections and time.monotonic() < deadline:
        time.sleep(0.05)
    assert apiserver.open_connections == 0


def test_faults_over_http_for_another_process(apiserver: ApiServer) -> None:
    status, _, rule = req(
        apiserver,
        "POST",
        "/sandbox/v1/faults",
        {"action": "error", "status": 503, "path": "*/configmaps", "times": 1},
    )
    assert status == 201 and rule["id"] >= 1
    assert req(apiserver, "GET", "/api/v1/namespaces/default/configmaps")[0] == 503
    assert req(apiserver, "GET", "/api/v1/namespaces/default/configmaps")[0] == 200
    status, _, listed = req(apiserver, "GET", "/sandbox/v1/faults")
    assert [(r["id"], r["hits"]) for r in listed["rules"]] == [(rule["id"], 1)]
    # a catch-all rule never blocks the control API itself
    req(apiserver, "POST", "/sandbox/v1/faults", {"action": "error", "status": 500})
    assert req(apiserver, "GET", "/version")[0] == 500
    assert req(apiserver, "DELETE", f"/sandbox/v1/faults/{rule['id']}")[0] == 200
    assert req(apiserver, "DELETE", "/sandbox/v1/faults")[0] == 200
    assert req(apiserver, "GET", "/version")[0] == 200
    status, _, body = req(apiserver, "POST", "/sandbox/v1/faults", {"action": "explode"})
    assert status == 400 and "explode" in body["message"]
