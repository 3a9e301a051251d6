"""managedFields set by a non-apply write, on the wire, as the real API server treats them
(k8s.io/apimachinery pkg/util/managedfields/internal: ``decodeLiveOrNew``,
``isResetManagedFields``, ``skipNonAppliedManager``; docs "Server-Side Apply", "Clearing
managedFields").

Covers: a merge patch, JSON patch or PUT that sets managedFields is honoured as given, and
the writer gets no entry when it changed nothing else; a write that sets the list and
changes a field adds the writer's entry for that field; ``[{}]`` and ``[]`` reset the list,
after which updates track nothing and the next apply attributes the existing fields to
"before-first-apply"; an undecodable list is ignored; a status write cannot set the list;
an update manager's fields conflict with an apply until its entry is dropped.
"""

from __future__ import annotations

import http.client
import json
from typing import Any

import pytest

from gitopsbot.sandbox.apiserver import ApiServer

CMS = "/api/v1/namespaces/default/configmaps"
MERGE = "application/merge-patch+json"
APPLY = "application/apply-patch+yaml"


def req(api: ApiServer, method: str, path: str, body: Any, ctype: str) -> tuple[int, Any]:
    conn = http.client.HTTPConnection(api.host, api.port, timeout=30)
    conn.request(method, path, body=json.dumps(body).encode(), headers={"Content-Type": ctype})
    r = conn.getresponse()
    data = json.loads(r.read() or b"null")
    conn.close()
    return r.status, data


def ok(api: ApiServer, method: str, path: str, body: Any, ctype: str = MERGE) -> dict[str, Any]:
    status, data = req(api, method, path, body, ctype)
    assert 200 <= status < 300, data
    result: dict[str, Any] = data
    return result


def apply(api: ApiServer, manager: str, data: dict[str, str]) -> tuple[int, Any]:
    obj = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm"}, "data": data}
    return req(api, "PATCH", f"{CMS}/cm?fieldManager={manager}", obj, APPLY)


def managers(obj: dict[str, Any]) -> list[tuple[str, str]]:
    return [(e["manager"], e["operation"]) for e in obj["metadata"].get("managedFields") or []]


@pytest.fixture
def shared(apiserver: ApiServer) -> dict[str, Any]:
    """A ConfigMap applied by helm, with data.k then taken by the bot's merge patch."""
    assert apply(apiserver, "helm", {"k": "1", "x": "1"})[0] == 201
    return ok(apiserver, "PATCH", f"{CMS}/cm?fieldManager=gitopsbot", {"data": {"k": "bot"}})


def test_an_update_manager_conflicts_with_an_apply(apiserver: ApiServer, shared: Any) -> None:
    assert managers(shared) == [("helm", "Apply"), ("gitopsbot", "Update")]
    status, body = apply(apiserver, "helm", {"k": "2", "x": "1"})
    assert status == 409
    assert 'conflict with "gitopsbot"' in body["message"]


@pytest.mark.parametrize("how", ["merge", "json-patch", "put"])
def test_a_write_that_sets_managed_fields_is_honoured(
    apiserver: ApiServer, shared: dict[str, Any], how: str
) -> None:
    meta = shared["metadata"]
    kept = [e for e in meta["managedFields"] if e["manager"] != "gitopsbot"]
    path = f"{CMS}/cm?fieldManager=gitopsbot"
    if how == "merge":
        body = {"metadata": {"resourceVersion": meta["resourceVersion"], "managedFields": kept}}
        released = ok(apiserver, "PATCH", path, body)
    elif how == "json-patch":
        version = meta["resourceVersion"]
        ops = [{"op": "test", "path": "/metadata/resourceVersion", "value": version},
               {"op": "replace", "path": "/metadata/managedFields", "value": kept}]  # fmt: skip
        released = ok(apiserver, "PATCH", path, ops, "application/json-patch+json")
    else:
        replaced = {**shared, "metadata": {**meta, "managedFields": kept}}
        released = ok(apiserver, "PUT", path, replaced, "application/json")
    # The writer changed no field, so it gets no entry of its own.
    assert managers(released) == [("helm", "Apply")]
    assert released["data"] == {"k": "bot", "x": "1"}
    assert int(released["metadata"]["resourceVersion"]) > int(meta["resourceVersion"])
    status, applied = apply(apiserver, "helm", {"k": "2", "x": "1"})
    assert status == 200 and applied["data"]["k"] == "2"


def test_setting_the_list_and_changing_a_field(apiserver: ApiServer, shared: Any) -> None:
    kept = [e for e in shared["metadata"]["managedFields"] if e["manager"] != "gitopsbot"]
    body = {"metadata": {"managedFields": kept}, "data": {"y": "new"}}
    written = ok(apiserver, "PATCH", f"{CMS}/cm?fieldManager=someone", body)
    assert managers(written) == [("helm", "Apply"), ("someone", "Update")]
    someone = written["metadata"]["managedFields"][1]["fieldsV1"]
    assert someone == {"f:data": {"f:y": {}}}


@pytest.mark.parametrize("reset", [[{}], []], ids=["one-empty-entry", "empty-list"])
def test_a_reset_then_before_first_apply(
    apiserver: ApiServer, shared: Any, reset: list[Any]
) -> None:
    cleared = ok(apiserver, "PATCH", f"{CMS}/cm", {"metadata": {"managedFields": reset}})
    assert "managedFields" not in cleared["metadata"]
    # Nothing is tracked any more by updates ...
    updated = ok(apiserver, "PATCH", f"{CMS}/cm?fieldManager=gitopsbot", {"data": {"x": "2"}})
    assert "managedFields" not in updated["metadata"]
    # ... and the next apply finds every field owned by "before-first-apply".
    status, body = apply(apiserver, "helm", {"k": "3", "x": "2"})
    assert status == 409 and 'conflict with "before-first-apply"' in body["message"]
    status, body = apply(apiserver, "helm", {"k": "bot", "x": "2"})  # same values: no conflict
    assert status == 200
    assert managers(body) == [("before-first-apply", "Update"), ("helm", "Apply")]


def test_an_undecodable_list_is_ignored(apiserver: ApiServer, shared: Any) -> None:
    bogus = [{"manager": "x", "operation": "Delete", "fieldsType": "FieldsV1", "fieldsV1": {}}]
    body = {"metadata": {"managedFields": bogus}, "data": {"z": "1"}}
    written = ok(apiserver, "PATCH", f"{CMS}/cm?fieldManager=gitopsbot", body)
    assert managers(written) == [("helm", "Apply"), ("gitopsbot", "Update")]


def test_a_status_write_cannot_set_the_list(apiserver: ApiServer) -> None:
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "d"},
        "spec": {
            "selector": {"matchLabels": {"app": "d"}},
            "template": {
                "metadata": {"labels": {"app": "d"}},
                "spec": {"containers": [{"name": "c", "image": "i"}]},
            },
        },
    }
    path = "/apis/apps/v1/namespaces/default/deployments"
    created = ok(apiserver, "POST", f"{path}?fieldManager=helm", deployment, "application/json")
    assert managers(created) == [("helm", "Update")]
    body = {"metadata": {"managedFields": [{}]}, "status": {"observedGeneration": 7}}
    written = ok(apiserver, "PATCH", f"{path}/d/status?fieldManager=ctl", body)
    assert ("helm", "Update") in managers(written)
