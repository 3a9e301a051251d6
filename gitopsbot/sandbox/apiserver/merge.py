"""JSON merge patch (RFC 7386), strategic merge patch, and the list merge keys they share.

Strategic merge patch uses a table of merge keys by field name for the built-in lists the
chart and the bot touch, not the real per-type patch metadata. Lists without a key (args,
command, tolerations — atomic in the real API too) are replaced whole.
"""

from __future__ import annotations

import copy
from typing import Any

from gitopsbot.sandbox.apiserver.errors import BadRequest

MERGE_KEYS: dict[str, tuple[str, ...]] = {
    "containers": ("name",),
    "initContainers": ("name",),
    "ephemeralContainers": ("name",),
    "env": ("name",),
    "volumes": ("name",),
    "volumeMounts": ("mountPath",),
    "volumeDevices": ("devicePath",),
    "imagePullSecrets": ("name",),
    "conditions": ("type",),
    "ownerReferences": ("uid",),
    "hostAliases": ("ip",),
    "readinessGates": ("conditionType",),
    "topologySpreadConstraints": ("topologyKey", "whenUnsatisfiable"),
    "resourceClaims": ("name",),
    "schedulingGates": ("name",),
}
# Primitive lists whose strategy is "merge" (union), not replace.
MERGED_PRIMITIVE_LISTS = {"finalizers"}


def merge_key(field_name: str, items: list[Any]) -> tuple[str, ...] | None:
    """The merge key of a list, or None if it is atomic (replaced whole)."""
    if field_name == "ports":
        # Container ports merge on containerPort, Service ports on port.
        if any(isinstance(i, dict) and "containerPort" in i for i in items):
            return ("containerPort",)
        return ("port",)
    return MERGE_KEYS.get(field_name)


def item_key(item: Any, key: tuple[str, ...]) -> tuple[Any, ...] | None:
    if not isinstance(item, dict):
        return None
    return tuple(item.get(k) for k in key)


def json_merge_patch(target: Any, patch: Any) -> Any:
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = json_merge_patch(out.get(k), v)
    return out


def strategic_merge_patch(original: Any, patch: Any, *, keyed: bool = True) -> Any:
    """Apply a strategic merge patch; ``keyed=False`` treats every list as atomic."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    if not isinstance(original, dict):
        original = {}
    directive = patch.get("$patch")
    if directive == "replace":
        return {k: copy.deepcopy(v) for k, v in patch.items() if k != "$patch"}
    if directive == "delete":
        return None
    out = dict(original)
    retain = patch.get("$retainKeys")
    for k, v in patch.items():
        if k in ("$patch", "$retainKeys") or k.startswith("$setElementOrder/"):
            continue
        if k.startswith("$deleteFromPrimitiveList/"):
            field = k.split("/", 1)[1]
            drop = set(v or [])
            out[field] = [x for x in out.get(field) or [] if x not in drop]
            continue
        if v is None:
            out.pop(k, None)
        elif isinstance(v, dict):
            merged = strategic_merge_patch(out.get(k), v, keyed=keyed)
            if merged is None:
                out.pop(k, None)
            else:
                out[k] = merged
        elif isinstance(v, list):
            out[k] = _merge_list(k, out.get(k), v, keyed=keyed)
        else:
            out[k] = v
    if isinstance(retain, list):
        out = {k: val for k, val in out.items() if k in retain}
    return out


def _merge_list(field: str, original: Any, patch: list[Any], *, keyed: bool) -> list[Any]:
    orig = list(original) if isinstance(original, list) else []
    if not keyed:
        return copy.deepcopy(patch)
    if any(isinstance(i, dict) and i.get("$patch") == "replace" for i in patch):
        return [copy.deepcopy(i) for i in patch if not (isinstance(i, dict) and "$patch" in i)]
    if field in MERGED_PRIMITIVE_LISTS and all(not isinstance(i, dict) for i in patch):
        return orig + [copy.deepcopy(i) for i in patch if i not in orig]
    key = merge_key(field, patch + orig)
    if key is None or not all(isinstance(i, dict) for i in patch):
        return copy.deepcopy(patch)
    out = list(orig)
    for item in patch:
        k = item_key(item, key)
        idx = next((i for i, o in enumerate(out) if item_key(o, key) == k), None)
        if item.get("$patch") == "delete":
            if idx is not None:
                out.pop(idx)
            continue
        if idx is None:
            out.append(strategic_merge_patch({}, item))
        else:
            out[idx] = strategic_merge_patch(out[idx], item)
    return out


def apply_merge(obj: Any, applied: Any, *, keyed: bool, field: str = "") -> Any:
    """Merge a server-side-apply configuration into an object (no directives; maps merge,
    keyed lists merge by key, other lists are replaced)."""
    if isinstance(applied, dict):
        out = dict(obj) if isinstance(obj, dict) else {}
        for k, v in applied.items():
            out[k] = apply_merge(out.get(k), v, keyed=keyed, field=k)
        return out
    if isinstance(applied, list):
        key = merge_key(field, applied) if keyed else None
        if (
            key is None
            or not all(isinstance(i, dict) for i in applied)
            or not isinstance(obj, list)
        ):
            return copy.deepcopy(applied)
        out_list = list(obj)
        for item in applied:
            k = item_key(item, key)
            idx = next((i for i, o in enumerate(out_list) if item_key(o, key) == k), None)
            if idx is None:
                out_list.append(copy.deepcopy(item))
            else:
                out_list[idx] = apply_merge(out_list[idx], item, keyed=keyed)
        return out_list
    return copy.deepcopy(applied)


def require_object(value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise BadRequest(f"{what} must be a JSON object")
    return value
