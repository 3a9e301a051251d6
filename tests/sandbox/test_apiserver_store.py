"""The in-process Store API the controller simulator uses: semantics of a real API server."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from gitopsbot.sandbox.apiserver import AlreadyExists, Conflict, Invalid, NotFound
from gitopsbot.sandbox.apiserver.store import Store

CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "gadgets.example.com"},
    "spec": {
        "group": "example.com",
        "scope": "Namespaced",
        "names": {"kind": "Gadget", "plural": "gadgets", "singular": "gadget"},
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "subresources": {"status": {}},
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "spec": {
                                "type": "object",
                                "required": ["mode"],
                                "properties": {
                                    "mode": {"type": "string", "enum": ["a", "b"]},
                                    "free": {
                                        "type": "object",
                                        "x-kubernetes-preserve-unknown-fields": True,
                                    },
                                },
                            },
                            "status": {
                                "type": "object",
                                "properties": {"phase": {"type": "string"}},
                            },
                        },
                    }
                },
            }
        ],
    },
}


def _cm(name: str, ns: str = "default", **data: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": ns},
        "data": data,
    }


def _gadget(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "example.com/v1",
        "kind": "Gadget",
        "metadata": {"name": name, "namespace": "default"},
        "spec": spec,
    }


def test_create_get_list_and_already_exists() -> None:
    s = Store()
    created = s.create(_cm("a", x="1"))
    assert created["metadata"]["uid"] and created["metadata"]["resourceVersion"]
    assert s.get("v1", "ConfigMap", "default", "a") == created
    s.create(_cm("b"))
    assert [o["metadata"]["name"] for o in s.list("v1", "ConfigMap", "default")] == ["a", "b"]
    with pytest.raises(AlreadyExists):
        s.create(_cm("a"))
    with pytest.raises(NotFound):
        s.create(_cm("a", ns="missing"))
    assert s.get("v1", "ConfigMap", "default", "nope") is None


def test_stale_update_conflicts_and_noop_keeps_resource_version() -> None:
    s = Store()
    first = s.create(_cm("a", x="1"))
    first["data"] = {"x": "2"}
    second = s.update(first)
    assert int(second["metadata"]["resourceVersion"]) > int(first["metadata"]["resourceVersion"])
    first["data"] = {"x": "3"}  # still the old resourceVersion
    with pytest.raises(Conflict):
        s.update(first)
    same = s.update(second)
    assert same["metadata"]["resourceVersion"] == second["metadata"]["resourceVersion"]


def test_generation_moves_with_spec_not_status_or_metadata() -> None:
    s = Store()
    s.create(CRD)
    g = s.create(_gadget("g", mode="a"))
    assert g["metadata"]["generation"] == 1
    g = s.patch_merge(
        "example.com/v1", "Gadget", "default", "g", {"metadata": {"labels": {"l": "1"}}}
    )
    assert g["metadata"]["generation"] == 1
    g["status"] = {"phase": "Ready"}
    g = s.update_status(g)
    assert g["metadata"]["generation"] == 1 and g["status"] == {"phase": "Ready"}
    g = s.patch_merge("example.com/v1", "Gadget", "default", "g", {"spec": {"mode": "b"}})
    assert g["metadata"]["generation"] == 2 and g["status"] == {"phase": "Ready"}


def test_crd_establishes_at_once_and_validates_its_resources() -> None:
    s = Store()
    s.create(CRD)
    crd = s.get("apiextensions.k8s.io/v1", "CustomResourceDefinition", None, "gadgets.example.com")
    assert crd is not None
    conditions = {c["type"]: c["status"] for c in crd["status"]["conditions"]}
    assert conditions == {"NamesAccepted": "True", "Established": "True"}
    with pytest.raises(Invalid) as e:
        s.create(_gadget("bad", mode="c"))
    assert "spec.mode" in str(e.value) and '"c"' in str(e.value)
    with pytest.raises(Invalid, match=r"spec\.mode: Required value"):
        s.create(_gadget("bad"))
    ok = s.create(_gadget("ok", mode="a", stray=1, free={"anything": [1, 2]}))
    assert ok["spec"] == {"mode": "a", "free": {"anything": [1, 2]}}  # stray pruned
    s.delete("apiextensions.k8s.io/v1", "CustomResourceDefinition", None, "gadgets.example.com")
    with pytest.raises(NotFound):
        s.get("example.com/v1", "Gadget", "default", "ok")


def test_finalizers_delay_deletion_until_removed() -> None:
    s = Store()
    cm = _cm("a")
    cm["metadata"]["finalizers"] = ["example.com/keep"]
    s.create(cm)
    marked = s.delete("v1", "ConfigMap", "default", "a")
    assert marked is not None and marked["metadata"]["deletionTimestamp"]
    assert s.get("v1", "ConfigMap", "default", "a") is not None
    s.patch_merge("v1", "ConfigMap", "default", "a", {"metadata": {"finalizers": None}})
    assert s.get("v1", "ConfigMap", "default", "a") is None


def test_owner_garbage_collection_and_namespace_cascade() -> None:
    s = Store()
    s.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "tf"}})
    owner = s.create(_cm("owner", ns="tf"))
    child = _cm("child", ns="tf")
    child["metadata"]["ownerReferences"] = [
        {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": owner["metadata"]["uid"]}
    ]
    s.create(child)
    s.create(_cm("other", ns="tf"))
    s.delete("v1", "ConfigMap", "tf", "owner")
    assert s.get("v1", "ConfigMap", "tf", "child") is None
    assert s.get("v1", "ConfigMap", "tf", "other") is not None
    s.delete("v1", "Namespace", None, "tf")
    assert s.list("v1", "ConfigMap", "tf") == []
    assert s.get("v1", "Namespace", None, "tf") is None


def test_label_selectors() -> None:
    s = Store()
    for name, labels in (("a", {"app": "x", "tier": "1"}), ("b", {"app": "y"}), ("c", {})):
        cm = _cm(name)
        cm["metadata"]["labels"] = labels
        s.create(cm)

    def names(sel: Any) -> list[str]:
        return [o["metadata"]["name"] for o in s.list("v1", "ConfigMap", "default", sel)]

    assert names("app=x") == ["a"]
    assert names({"app": "y"}) == ["b"]
    assert names("app in (x,y),!tier") == ["b"]
    assert names("app!=x") == ["b", "c"]
    assert names("app notin (x)") == ["b", "c"]
    assert names("tier") == ["a"]


def test_subscribers_see_every_change_in_order_outside_the_lock() -> None:
    s = Store()
    seen: list[tuple[str, str]] = []
    lock_free: list[bool] = []

    def on_event(etype: str, obj: dict[str, Any]) -> None:
        # a callback may write: the store lock is not held by this thread
        lock_free.append(s._lock._is_owned() is False)  # type: ignore[attr-defined]
        seen.append((etype, obj["metadata"]["name"]))
        if etype == "ADDED" and obj["metadata"]["name"] == "a":
            s.create(_cm("from-callback"))

    unsubscribe = s.subscribe(on_event)
    s.create(_cm("a"))
    s.patch_merge("v1", "ConfigMap", "default", "a", {"data": {"k": "v"}})
    s.delete("v1", "ConfigMap", "default", "a")
    unsubscribe()
    s.create(_cm("unseen"))
    assert seen == [
        ("ADDED", "a"),
        ("ADDED", "from-callback"),
        ("MODIFIED", "a"),
        ("DELETED", "a"),
    ]
    assert all(lock_free)


def test_concurrent_updates_one_wins_per_resource_version() -> None:
    s = Store()
    base = s.create(_cm("a", n="0"))
    results: list[str] = []

    def writer(i: int) -> None:
        obj = dict(base, data={"n": str(i + 1)})  # all differ from the stored "0"
        try:
            s.update(obj)
            results.append("ok")
        except Conflict:
            results.append("conflict")

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == ["conflict"] * 7 + ["ok"]


def test_secret_string_data_is_folded_into_data() -> None:
    s = Store()
    sec = s.create(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "s", "namespace": "default"},
            "stringData": {"k": "v"},
        }
    )
    assert sec["data"] == {"k": "dg=="} and sec["type"] == "Opaque" and "stringData" not in sec


def test_schema_ratcheting_lets_unchanged_invalid_values_stay() -> None:
    s = Store()
    s.create(CRD)
    s.create(_gadget("g", mode="a"))
    # a newer CRD version no longer allows "a" ...
    crd = s.get("apiextensions.k8s.io/v1", "CustomResourceDefinition", None, "gadgets.example.com")
    assert crd is not None
    props = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]
    props["spec"]["properties"]["mode"]["enum"] = ["b"]
    props["spec"]["properties"]["level"] = {"type": "integer", "minimum": 1}
    s.update(crd)
    # ... an update that leaves mode alone still passes, as on a real (1.30+) server,
    g = s.patch_merge("example.com/v1", "Gadget", "default", "g", {"spec": {"level": 2}})
    assert g["spec"] == {"mode": "a", "level": 2}
    # but a changed value is checked against the new schema.
    with pytest.raises(Invalid, match=r"spec\.level"):
        s.patch_merge("example.com/v1", "Gadget", "default", "g", {"spec": {"level": 0}})
    with pytest.raises(Invalid, match=r"spec\.mode"):
        s.create(_gadget("new", mode="a"))


def test_a_failing_subscriber_does_not_fail_the_writer(caplog: pytest.LogCaptureFixture) -> None:
    s = Store()
    seen: list[str] = []

    def broken(_etype: str, _obj: dict[str, Any]) -> None:
        raise RuntimeError("simulator bug")

    s.subscribe(broken)
    s.subscribe(lambda etype, obj: seen.append(obj["metadata"]["name"]))
    s.create(_cm("a"))
    s.create(_cm("b"))
    assert seen == ["a", "b"]
    assert "simulator bug" in caplog.text
