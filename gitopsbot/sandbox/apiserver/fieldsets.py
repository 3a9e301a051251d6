"""managedFields: field sets in the ``FieldsV1`` format, update tracking and server-side apply.

A field set is a set of paths; a path is a tuple of FieldsV1 segments: ``f:<field>``,
``k:<json key>`` for an item of a keyed list, and ``.`` for "the item itself". Leaves are
scalars, atomic lists and empty maps. Ownership follows the real rules in outline: an update
takes the fields it changed from every other manager; an apply owns exactly the fields it
applied, drops fields it applied before and no longer applies (unless another manager owns
them), and conflicts when it would change a value another manager owns, unless forced.

A non-apply write may set ``metadata.managedFields`` itself, as on the real server
(``decodeLiveOrNew`` and ``skipNonAppliedManager`` in k8s.io/apimachinery's
``pkg/util/managedfields/internal``): a valid list that differs from the stored one replaces
it before the write's own changes are tracked; ``[]`` or ``[{}]`` resets it to nothing; an
invalid list is ignored. An update of an object without managedFields tracks nothing, and the
next apply first attributes every existing field to ``before-first-apply``.
"""

from __future__ import annotations

import copy
import json
from typing import TYPE_CHECKING, Any

from gitopsbot.sandbox.apiserver.errors import Conflict
from gitopsbot.sandbox.apiserver.merge import apply_merge, item_key, merge_key

if TYPE_CHECKING:
    from gitopsbot.sandbox.apiserver.resources import ResourceType

Obj = dict[str, Any]
Path = tuple[str, ...]
_MISSING = object()
OWNED_META = ("labels", "annotations", "finalizers", "ownerReferences")


def managed_root(obj: Obj, *, status: bool) -> Obj:
    """The part of an object whose fields are owned: spec-like fields and some metadata,
    or only status for the status subresource."""
    if status:
        return {"status": obj["status"]} if "status" in obj else {}
    out = {k: v for k, v in obj.items() if k not in ("status", "apiVersion", "kind", "metadata")}
    meta = {k: v for k, v in (obj.get("metadata") or {}).items() if k in OWNED_META}
    if meta:
        out["metadata"] = meta
    return out


def leaves(value: Any, *, keyed: bool, prefix: Path = (), field: str = "") -> dict[Path, Any]:
    out: dict[Path, Any] = {}
    if isinstance(value, dict):
        if not value and prefix:
            out[prefix] = value
        for k, v in value.items():
            out.update(leaves(v, keyed=keyed, prefix=(*prefix, "f:" + k), field=k))
        return out
    if isinstance(value, list) and keyed:
        key = merge_key(field, value)
        if key is not None and value and all(isinstance(i, dict) for i in value):
            for item in value:
                kp = (*prefix, _kseg(item, key))
                out[(*kp, ".")] = True
                out.update(leaves(item, keyed=keyed, prefix=kp))
            return out
    if prefix:
        out[prefix] = value
    return out


def _kseg(item: Obj, key: tuple[str, ...]) -> str:
    return "k:" + json.dumps({k: item.get(k) for k in key}, sort_keys=True, separators=(",", ":"))


def fields_of(root: Obj, rt: ResourceType) -> dict[str, Any]:
    return to_fieldsv1(set(leaves(root, keyed=not rt.custom)))


def to_fieldsv1(paths: set[Path]) -> dict[str, Any]:
    tree: dict[str, Any] = {}
    for p in sorted(paths):
        node = tree
        for seg in p:
            node = node.setdefault(seg, {})
    return tree


def from_fieldsv1(tree: Any, prefix: Path = ()) -> set[Path]:
    out: set[Path] = set()
    if not isinstance(tree, dict) or not tree:
        return {prefix} if prefix else set()
    for seg, sub in tree.items():
        out |= from_fieldsv1(sub, (*prefix, seg))
    return out


def entry(
    manager: str,
    operation: str,
    api_version: str,
    fields: dict[str, Any],
    time: str,
    subresource: str | None = None,
) -> Obj:
    e: Obj = {
        "manager": manager,
        "operation": operation,
        "apiVersion": api_version,
        "time": time,
        "fieldsType": "FieldsV1",
        "fieldsV1": fields,
    }
    if subresource:
        e["subresource"] = subresource
    return e


Owners = dict[tuple[str, str, str], tuple[set[Path], str]]  # (manager, op, sub) -> (paths, av)
BEFORE_FIRST_APPLY = "before-first-apply"


def is_reset(entries: Any) -> bool:
    """``[]`` or ``[{}]`` given by a write: the real server's ``isResetManagedFields``."""
    return isinstance(entries, list) and (not entries or entries == [{}])


def decodable(entries: Any) -> bool:
    """Whether a managedFields list given by a write is one the real server decodes: every
    entry an Apply or Update with FieldsV1 fields. An undecodable list is ignored there."""
    return (
        isinstance(entries, list)
        and bool(entries)
        and all(
            isinstance(e, dict)
            and e.get("operation") in ("Apply", "Update")
            and e.get("fieldsType") == "FieldsV1"
            and isinstance(e.get("fieldsV1", {}), dict)
            for e in entries
        )
    )


def requested_entries(given: Any, live: list[Obj]) -> list[Obj]:
    """The managedFields a non-apply write of the main resource starts from: the stored list,
    unless the write gives a decodable one of its own, or resets it with ``[]``/``[{}]``."""
    if is_reset(given):
        return []
    if decodable(given):
        return list(given)
    return live


def _owners(obj: Obj | None) -> Owners:
    return _owners_of(((obj or {}).get("metadata") or {}).get("managedFields") or [])


def _owners_of(entries: list[Obj]) -> Owners:
    out: Owners = {}
    for e in entries:
        key = (e.get("manager", ""), e.get("operation", "Update"), e.get("subresource", ""))
        out[key] = (from_fieldsv1(e.get("fieldsV1")), e.get("apiVersion", ""))
    return out


def _entries(
    owners: Owners, times: dict[tuple[str, str, str], str], previous: list[Obj]
) -> list[Obj]:
    prev = {
        (e.get("manager", ""), e.get("operation", "Update"), e.get("subresource", "")): e
        for e in previous
    }
    out = []
    for key, (paths, av) in owners.items():
        if not paths:
            continue
        time = times.get(key) or prev.get(key, {}).get("time", "")
        out.append(entry(key[0], key[1], av, to_fieldsv1(paths), time, key[2] or None))
    return out


def _covers(owned: set[Path], p: Path) -> bool:
    return any(p[: len(o)] == o or o[: len(p)] == p for o in owned)


def track_update(
    old: Obj,
    new: Obj,
    rt: ResourceType,
    *,
    manager: str,
    operation: str,
    subresource: str | None,
    api_version: str,
    time: str,
    base: list[Obj] | None = None,
) -> list[Obj]:
    """The managedFields after an update from ``old`` to ``new``: ``manager`` takes every
    field it changed from the others. ``base`` (default: ``old``'s list) is where ownership
    starts, for a write that sets managedFields itself."""
    previous = base if base is not None else (old.get("metadata") or {}).get("managedFields") or []
    status = subresource == "status"
    keyed = not rt.custom
    before = leaves(managed_root(old, status=status), keyed=keyed)
    after = leaves(managed_root(new, status=status), keyed=keyed)
    changed = {p for p, v in after.items() if before.get(p, _MISSING) != v}
    gone = {p for p in before if p not in after}
    owners = _owners_of(previous)
    if not changed and not gone:
        return copy.deepcopy(previous)
    for key, (paths, av) in owners.items():
        owners[key] = (
            {
                p
                for p in paths
                if p not in gone
                and p not in changed
                and not any(g[: len(p)] == p or p[: len(g)] == g for g in gone)
            },
            av,
        )
    key = (manager, operation, subresource or "")
    paths, _ = owners.get(key, (set(), api_version))
    owners[key] = (paths | changed, api_version)
    return _entries(owners, {key: time}, previous)


def server_side_apply(
    old: Obj | None,
    applied: Obj,
    rt: ResourceType,
    *,
    manager: str,
    force: bool,
    subresource: str | None,
    api_version: str,
    time: str,
) -> tuple[Obj, list[Obj]]:
    """Return (new object, new managedFields). Raises Conflict listing the contested fields."""
    status = subresource == "status"
    keyed = not rt.custom
    base: Obj = copy.deepcopy(old) if old is not None else {}
    root = managed_root(applied, status=status)
    mine = leaves(root, keyed=keyed)
    owners = _owners(old)
    if old is not None and not owners:
        # The real skipNonAppliedManager: an object without managedFields (reset by a write)
        # gets its existing fields attributed to "before-first-apply" before the first apply.
        existing = leaves(managed_root(old, status=status), keyed=keyed)
        if existing:
            owners[(BEFORE_FIRST_APPLY, "Update", "")] = (set(existing), api_version)
    me = (manager, "Apply", subresource or "")
    conflicts: list[tuple[str, Path]] = []
    hits: dict[tuple[str, str, str], set[Path]] = {}
    for key, (paths, _av) in owners.items():
        if key[0] == manager:
            continue
        hit = {p for p in paths if p in mine and _value_at(base, p) != mine[p] and p[-1] != "."}
        if hit:
            hits[key] = hit
            conflicts.extend((key[0], p) for p in sorted(hit))
    if (
        conflicts
        and not force
        and manager == "kubectl"
        and _from_last_applied(base, conflicts, keyed=keyed)
    ):
        force = True
    if force:
        for key, hit in hits.items():
            owners[key] = (owners[key][0] - hit, owners[key][1])
        conflicts = []
    if conflicts:
        lines = "\n".join(f'- conflict with "{m}": {_dotted(p)}' for m, p in conflicts)
        raise Conflict(
            f"Apply failed with {len(conflicts)} conflict"
            f"{'s' if len(conflicts) > 1 else ''}: {lines}",
            causes=[
                ("FieldManagerConflict", _dotted(p), f'conflict with "{m}"') for m, p in conflicts
            ],
        )
    previous, _ = owners.get(me, (set(), api_version))
    others = set().union(*(p for k, (p, _) in owners.items() if k != me)) if owners else set()
    # whole list items ("." paths) first: removing a key field first would lose the item
    for p in sorted(previous - set(mine), key=lambda q: (q[-1] != ".", -len(q))):
        if _covers(others, p) or _covers(set(mine), p):
            continue
        _delete_at(base, p[:-1] if p[-1] == "." else p)
    merged = apply_merge(base, root, keyed=keyed)
    owners[me] = (set(mine), api_version)
    entries = ((old or {}).get("metadata") or {}).get("managedFields") or []
    return merged, _entries(owners, {me: time}, entries)


LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"


def _from_last_applied(obj: Obj, conflicts: list[tuple[str, Path]], *, keyed: bool) -> bool:
    # The real server's lastAppliedManager: kubectl's first server-side apply after client-side
    # applies takes over, without conflicts, fields whose live value is the last-applied one.
    text = ((obj.get("metadata") or {}).get("annotations") or {}).get(LAST_APPLIED)
    if not text:
        return False
    try:
        last = json.loads(text)
    except ValueError:
        return False
    if not isinstance(last, dict):
        return False
    applied = leaves(managed_root(last, status=False), keyed=keyed)
    return all(p in applied and _value_at(obj, p) == applied[p] for _, p in conflicts)


def _dotted(p: Path) -> str:
    return "".join(
        "." + s[2:] if s.startswith("f:") else ("[" + s[2:] + "]" if s.startswith("k:") else "")
        for s in p
    )


def _step(node: Any, seg: str) -> Any:
    if seg.startswith("f:"):
        return node.get(seg[2:], _MISSING) if isinstance(node, dict) else _MISSING
    if seg.startswith("k:") and isinstance(node, list):
        want = json.loads(seg[2:])
        key = tuple(want)
        for item in node:
            if item_key(item, key) == tuple(want[k] for k in key):
                return item
        return _MISSING
    if seg == ".":
        return node
    return _MISSING


def _value_at(obj: Any, path: Path) -> Any:
    node = obj
    for seg in path:
        node = _step(node, seg)
        if node is _MISSING:
            return _MISSING
    return node


def _delete_at(obj: Any, path: Path) -> None:
    parent = _value_at(obj, path[:-1])
    seg = path[-1]
    if seg.startswith("f:") and isinstance(parent, dict):
        parent.pop(seg[2:], None)
    elif seg.startswith("k:") and isinstance(parent, list):
        item = _step(parent, seg)
        if item is not _MISSING:
            parent.remove(item)
