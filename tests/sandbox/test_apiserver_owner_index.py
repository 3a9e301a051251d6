"""Garbage collection goes through the store's owner index (owner uid -> dependents), so the
index must follow every way ownerReferences change: create, update, patch, delete, restore."""

from __future__ import annotations

from typing import Any

from gitopsbot.sandbox.apiserver.store import Store


def cm(name: str, *owners: dict[str, Any]) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "default"}
    if owners:
        meta["ownerReferences"] = [
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "name": o["metadata"]["name"],
                "uid": o["metadata"]["uid"],
            }
            for o in owners
        ]
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {}}


def names(s: Store) -> list[str]:
    return [o["metadata"]["name"] for o in s.list("v1", "ConfigMap", "default")]


def test_dropping_an_owner_reference_keeps_the_dependent() -> None:
    s = Store()
    owner = s.create(cm("owner"))
    s.create(cm("child", owner))
    s.patch_merge("v1", "ConfigMap", "default", "child", {"metadata": {"ownerReferences": None}})
    s.delete("v1", "ConfigMap", "default", "owner")
    assert names(s) == ["child"]


def test_adding_an_owner_reference_later_is_collected() -> None:
    s = Store()
    owner = s.create(cm("owner"))
    s.create(cm("child"))
    stored = s.get("v1", "ConfigMap", "default", "child")
    assert stored is not None
    s.update({**stored, "metadata": {**stored["metadata"], **cm("child", owner)["metadata"]}})
    s.delete("v1", "ConfigMap", "default", "owner")
    assert names(s) == []


def test_two_owners_cascade_and_chains() -> None:
    s = Store()
    a, b = s.create(cm("a")), s.create(cm("b"))
    child = s.create(cm("child", a, b))
    s.create(cm("grandchild", child))
    s.create(cm("unrelated"))
    s.delete("v1", "ConfigMap", "default", "a")
    # Background propagation as the store implements it: any owner gone removes the dependent,
    # and its own dependents follow.
    assert names(s) == ["b", "unrelated"]
    s.delete("v1", "ConfigMap", "default", "b")
    assert names(s) == ["unrelated"]


def test_index_is_rebuilt_from_a_restored_snapshot() -> None:
    s = Store()
    owner = s.create(cm("owner"))
    s.create(cm("child", owner))
    objects, rv = s.dump()
    restored = Store()
    restored.load(objects, rv)
    restored.delete("v1", "ConfigMap", "default", "owner")
    assert names(restored) == []
