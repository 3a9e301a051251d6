"""Server-side printing: ``Table`` answers for ``kubectl get`` (Accept ``as=Table``), with the
columns kubectl shows for the common built-in kinds and a CRD's additionalPrinterColumns; and
``PartialObjectMetadataList`` answers (Accept ``as=PartialObjectMetadataList``): metadata only."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from gitopsbot.sandbox.apiserver.resources import ResourceType

Obj = dict[str, Any]
Column = tuple[str, str, Callable[[Obj], Any], int]  # (name, type, cell, priority)


def wants_table(accept: str) -> bool:
    return any("as=Table" in offer for offer in accept.split(",")[:1])


def wants_metadata(accept: str) -> bool:
    """The client asks for metadata only (its first choice, as the real server reads it)."""
    return "as=PartialObjectMetadataList" in accept.split(",")[0]


def wants_metadata_object(accept: str) -> bool:
    """A watch asks for its objects as metadata only (``as=PartialObjectMetadata``)."""
    return "as=PartialObjectMetadata;" in accept.split(",")[0] + ";"


def partial_metadata(obj: Obj) -> Obj:
    """One object as a ``PartialObjectMetadata``: its metadata, nothing else."""
    return {
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": obj["metadata"],
    }


def metadata_list(items: list[Obj], resource_version: int) -> Obj:
    """A ``PartialObjectMetadataList``: each object's metadata, nothing else (a Secret's data
    stays on the server)."""
    return {
        "kind": "PartialObjectMetadataList",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {"resourceVersion": str(resource_version)},
        "items": [partial_metadata(o) for o in items],
    }


def age(obj: Obj) -> str:
    stamp = (obj.get("metadata") or {}).get("creationTimestamp")
    if not stamp:
        return "<unknown>"
    then = datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    secs = max(0, int((datetime.now(UTC) - then).total_seconds()))
    if secs < 120:
        return f"{secs}s"
    if secs < 3600:
        return f"{secs // 60}m"
    if secs < 2 * 86400:
        return f"{secs // 3600}h"
    return f"{secs // 86400}d"


def _get(obj: Any, *path: str, default: Any = 0) -> Any:
    for p in path:
        if not isinstance(obj, dict) or p not in obj:
            return default
        obj = obj[p]
    return obj


def _pod_ready(o: Obj) -> str:
    statuses = _get(o, "status", "containerStatuses", default=[]) or []
    total = len(_get(o, "spec", "containers", default=[]) or [])
    return f"{sum(1 for s in statuses if s.get('ready'))}/{total}"


def _pod_status(o: Obj) -> str:
    if _get(o, "metadata", "deletionTimestamp", default=None):
        return "Terminating"
    for s in _get(o, "status", "containerStatuses", default=[]) or []:
        reason = _get(s, "state", "waiting", "reason", default=None)
        if reason:
            return str(reason)
    return str(_get(o, "status", "phase", default="Pending"))


def _node_status(o: Obj) -> str:
    for c in _get(o, "status", "conditions", default=[]) or []:
        if c.get("type") == "Ready":
            return "Ready" if c.get("status") == "True" else "NotReady"
    return "Unknown"


_BUILTIN: dict[tuple[str, str], list[tuple[str, str, Callable[[Obj], Any]]]] = {
    ("", "Pod"): [
        ("Ready", "string", _pod_ready),
        ("Status", "string", _pod_status),
        (
            "Restarts",
            "integer",
            lambda o: sum(
                s.get("restartCount", 0)
                for s in _get(o, "status", "containerStatuses", default=[]) or []
            ),
        ),
    ],
    ("apps", "Deployment"): [
        (
            "Ready",
            "string",
            lambda o: (
                f"{_get(o, 'status', 'readyReplicas')}/{_get(o, 'spec', 'replicas', default=1)}"
            ),
        ),
        ("Up-to-date", "integer", lambda o: _get(o, "status", "updatedReplicas")),
        ("Available", "integer", lambda o: _get(o, "status", "availableReplicas")),
    ],
    ("apps", "ReplicaSet"): [
        ("Desired", "integer", lambda o: _get(o, "spec", "replicas", default=1)),
        ("Current", "integer", lambda o: _get(o, "status", "replicas")),
        ("Ready", "integer", lambda o: _get(o, "status", "readyReplicas")),
    ],
    ("apps", "StatefulSet"): [
        (
            "Ready",
            "string",
            lambda o: (
                f"{_get(o, 'status', 'readyReplicas')}/{_get(o, 'spec', 'replicas', default=1)}"
            ),
        ),
    ],
    ("apps", "DaemonSet"): [
        ("Desired", "integer", lambda o: _get(o, "status", "desiredNumberScheduled")),
        ("Current", "integer", lambda o: _get(o, "status", "currentNumberScheduled")),
        ("Ready", "integer", lambda o: _get(o, "status", "numberReady")),
        ("Up-to-date", "integer", lambda o: _get(o, "status", "updatedNumberScheduled")),
        ("Available", "integer", lambda o: _get(o, "status", "numberAvailable")),
    ],
    ("", "Node"): [
        ("Status", "string", _node_status),
        (
            "Version",
            "string",
            lambda o: _get(o, "status", "nodeInfo", "kubeletVersion", default=""),
        ),
    ],
    ("", "Namespace"): [("Status", "string", lambda o: _get(o, "status", "phase", default=""))],
    ("", "ConfigMap"): [
        ("Data", "integer", lambda o: len(o.get("data") or {}) + len(o.get("binaryData") or {}))
    ],
    ("", "Secret"): [
        ("Type", "string", lambda o: o.get("type", "")),
        ("Data", "integer", lambda o: len(o.get("data") or {})),
    ],
}

BUILTIN: dict[tuple[str, str], list[Column]] = {
    k: [(n, t, fn, 0) for n, t, fn in cols] for k, cols in _BUILTIN.items()
}

# The "simple JSONPath" CRD printer columns allow (the API server rejects anything else):
# ``.a.b`` (``\.`` escapes a dot in a key: ``.metadata.labels.app\.kubernetes\.io/name``),
# ``["key"]`` / ``['key']``, ``[0]``, ``[*]`` and the ``[?(@.type=="Ready")]`` filter kubectl's
# own columns use.
_SEGMENT = re.compile(
    r"\.((?:[^.\[\\]|\\.)+)"
    r"|\[(\d+|\*)\]"
    r"|\[([\"'])(.*?)\3\]"
    r"|\[\?\(@\.([A-Za-z0-9_]+)==[\"']([^\"']*)[\"']\)\]"
)


def _step(nodes: list[Any], m: re.Match[str]) -> list[Any]:
    field, index, _, key, fkey, fvalue = m.groups()
    if field is not None:
        key = re.sub(r"\\(.)", r"\1", field)
    out: list[Any] = []
    for n in nodes:
        if key is not None:
            if isinstance(n, dict) and key in n:
                out.append(n[key])
        elif index == "*":
            out.extend(n.values() if isinstance(n, dict) else n if isinstance(n, list) else [])
        elif index is not None:
            if isinstance(n, list) and int(index) < len(n):
                out.append(n[int(index)])
        elif fkey is not None and isinstance(n, list):
            out.extend(i for i in n if isinstance(i, dict) and str(i.get(fkey)) == fvalue)
    return out


def json_path(obj: Any, path: str) -> Any:
    """The first value at a printer column's JSONPath, or None (as the API server prints)."""
    path = path.strip().removeprefix("{").removesuffix("}")
    nodes = [obj]
    for m in _SEGMENT.finditer(path):
        nodes = _step(nodes, m)
    # Like the API server's table convertor: only the first result is shown.
    return nodes[0] if nodes else None


def _text(v: Any) -> str:
    return v if isinstance(v, str) else json.dumps(v)


def go_text(v: Any) -> str:
    """A value as Go's fmt prints it, which is what a string printer column shows."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, dict):
        return "map[" + " ".join(f"{k}:{go_text(v[k])}" for k in sorted(v)) + "]"
    if isinstance(v, list):
        return "[" + " ".join(go_text(i) for i in v) + "]"
    if isinstance(v, float) and v.is_integer() and abs(v) < 1e21:
        return str(int(v))
    return "<nil>" if v is None else str(v)


def typed_cell(ctype: str, value: Any) -> Any:
    """A cell for a non-string column type; None where the value does not fit the type."""
    if value is None:
        return None
    if ctype == "integer":
        if isinstance(value, bool):
            return None
        if isinstance(value, int):
            return value
        if isinstance(value, float):
            return int(value)
        if isinstance(value, str):
            try:
                return int(value)
            except ValueError:
                return None
        return None
    if ctype == "number":
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return value
        if isinstance(value, str):
            try:
                return float(value)
            except ValueError:
                return None
        return None
    if ctype == "boolean":
        return value if isinstance(value, bool) else None
    return go_text(value)


def _columns(rt: ResourceType) -> tuple[list[Column], bool]:
    if rt.custom:
        cols: list[Column] = []
        has_age = False
        for name, ctype, path, priority in rt.printer_columns:
            if ctype == "date":
                has_age = has_age or name.lower() == "age"
                cols.append((name, "string", _path_cell(path, ctype), priority))
            else:
                cols.append((name, ctype, _path_cell(path, ctype), priority))
        return cols, not has_age
    return BUILTIN.get((rt.group, rt.kind), []), True


def _path_cell(path: str, ctype: str) -> Callable[[Obj], Any]:
    def cell(o: Obj) -> Any:
        value = json_path(o, path)
        return _date_cell(value) if ctype == "date" else typed_cell(ctype, value)

    return cell


def _date_cell(value: Any) -> str:
    if not isinstance(value, str):
        return "<unknown>"
    return age({"metadata": {"creationTimestamp": value}})


def _event_seen(o: Obj) -> str:
    series = o.get("series") or {}
    stamp = series.get("lastObservedTime") or o.get("lastTimestamp") or o.get("eventTime")
    return _date_cell(stamp.split(".")[0].removesuffix("Z") + "Z" if stamp else None)


def _event_object(o: Obj) -> str:
    ref = o.get("involvedObject") or o.get("regarding") or {}
    return f"{str(ref.get('kind', '')).lower()}/{ref.get('name', '')}"


# The real server's Event columns (no Name, no Age): kubectl get events.
EVENT_COLUMNS: list[Column] = [
    ("Last Seen", "string", _event_seen, 0),
    ("Type", "string", lambda o: o.get("type", ""), 0),
    ("Reason", "string", lambda o: o.get("reason", ""), 0),
    ("Object", "string", _event_object, 0),
    ("Message", "string", lambda o: o.get("message", o.get("note", "")), 0),
]


def table(rt: ResourceType, items: list[Obj], resource_version: int) -> Obj:
    if rt.kind == "Event" and rt.group in ("", "events.k8s.io"):
        return _table(EVENT_COLUMNS, items, resource_version, named=False, add_age=False)
    cols, add_age = _columns(rt)
    return _table(cols, items, resource_version, named=True, add_age=add_age)


def _table(
    cols: list[Column], items: list[Obj], resource_version: int, *, named: bool, add_age: bool
) -> Obj:
    defs = [{"name": "Name", "type": "string", "format": "name", "description": "", "priority": 0}]
    defs = defs if named else []
    defs += [
        {"name": n, "type": t, "format": "", "description": "", "priority": prio}
        for n, t, _, prio in cols
    ]
    if add_age:
        defs.append(
            {"name": "Age", "type": "string", "format": "", "description": "", "priority": 0}
        )
    rows = []
    for o in items:
        cells: list[Any] = [o["metadata"]["name"]] if named else []
        cells += [_cell(fn, o) for _, _, fn, _ in cols]
        if add_age:
            cells.append(age(o))
        rows.append(
            {
                "cells": cells,
                "object": {
                    "kind": "PartialObjectMetadata",
                    "apiVersion": "meta.k8s.io/v1",
                    "metadata": o["metadata"],
                },
            }
        )
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {"resourceVersion": str(resource_version)},
        "columnDefinitions": defs,
        "rows": rows,
    }


def _cell(fn: Callable[[Obj], Any], o: Obj) -> Any:
    try:
        v = fn(o)
    except (TypeError, ValueError, KeyError, AttributeError):
        return None
    return v if v is None or isinstance(v, (str, int, float, bool)) else _text(v)
