"""Small readers of Kubernetes objects as the simulator holds them (plain dicts): labels,
annotations, phase, readiness, age, owner references.
"""

from __future__ import annotations

from typing import Any

from gitopsbot.sandbox.simulator.rollout import DOMAIN

Obj = dict[str, Any]


def labels_of(obj: Obj) -> dict[str, str]:
    return dict((obj.get("metadata") or {}).get("labels") or {})


def annotations_of(obj: Obj) -> dict[str, str]:
    return dict((obj.get("metadata") or {}).get("annotations") or {})


def resource_version(obj: Obj | None) -> str:
    return str(((obj or {}).get("metadata") or {}).get("resourceVersion") or "")


def deleting(obj: Obj) -> bool:
    return bool((obj.get("metadata") or {}).get("deletionTimestamp"))


def age_key(obj: Obj) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return (str(meta.get("creationTimestamp") or ""), str(meta.get("name") or ""))


def owner_ref(obj: Obj, *, controller: bool) -> Obj:
    meta = obj["metadata"]
    ref: Obj = {
        "apiVersion": obj["apiVersion"],
        "kind": obj["kind"],
        "name": meta["name"],
        "uid": meta["uid"],
    }
    if controller:
        ref["controller"] = True
        ref["blockOwnerDeletion"] = True
    return ref


def pod_ready(pod: Obj) -> bool:
    status = pod.get("status") or {}
    if status.get("phase") != "Running":
        return False
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in status.get("conditions") or []
    )


def phase(obj: Obj) -> str:
    return str((obj.get("status") or {}).get("phase") or "")


def short_pool_name(pool: Obj) -> str:
    """The TFC's name for a pool: GPUPool ``<cluster>-<pool>`` minus the cluster prefix."""
    name = str(pool["metadata"]["name"])
    cluster = labels_of(pool).get(f"{DOMAIN}/managed-by", "")
    prefix = f"{cluster}-"
    return name[len(prefix) :] if cluster and name.startswith(prefix) else name
