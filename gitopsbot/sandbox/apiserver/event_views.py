"""``events.k8s.io/v1`` Events as ``/api/v1`` lists show them.

The real API server stores one Event resource and serves it in both groups, converting
(``regarding`` ↔ ``involvedObject``, ``note`` ↔ ``message``, ``reportingController`` ↔
``reportingComponent``, ``deprecatedCount`` ↔ ``count`` …). The emulator stores the two
groups apart; a list of core Events (what ``kubectl get events`` and ``kubectl describe``
read) adds the ``events.k8s.io`` ones, converted. Only lists: not a GET of one by name, not a
watch, and a core Event is not shown through ``events.k8s.io`` (docs/sandbox.md).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Obj = dict[str, Any]

_RENAMED = {
    "regarding": "involvedObject",
    "note": "message",
    "reportingController": "reportingComponent",
    "deprecatedSource": "source",
    "deprecatedCount": "count",
    "deprecatedFirstTimestamp": "firstTimestamp",
    "deprecatedLastTimestamp": "lastTimestamp",
}
_DROPPED = {"apiVersion", "kind"}


def as_core_event(obj: Obj) -> Obj:
    """An ``events.k8s.io/v1`` Event as ``v1`` shows it."""
    out: Obj = {"apiVersion": "v1", "kind": "Event"}
    for key, value in obj.items():
        if key not in _DROPPED:
            out[_RENAMED.get(key, key)] = value
    out.setdefault("involvedObject", {})
    out.setdefault("source", {})
    return out


def with_new_events(
    items: list[Obj], new_events: list[Obj], selector: Callable[[Obj], bool] | None
) -> list[Obj]:
    """``items`` (core Events) and the ``events.k8s.io`` ones, converted and selected, in
    name order (as etcd lists them)."""
    converted = [as_core_event(o) for o in new_events]
    if selector is not None:
        converted = [o for o in converted if selector(o)]
    both = items + converted
    return sorted(both, key=lambda o: (o["metadata"].get("namespace", ""), o["metadata"]["name"]))
