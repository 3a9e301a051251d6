"""A watch-fed cache of the kinds the simulator reads, as a real controller's informers are.

Listing the Store copies every object; with 500 nodes that dominates a reconcile. The informer
lists each kind once, then follows the Store's change events. Reads return the cached dicts:
callers must not mutate them (copy first). Writes the simulator makes are applied at once too,
so its next read sees them even if another thread is still delivering the events.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import Any

from gitopsbot.sandbox.apiserver.errors import ApiError
from gitopsbot.sandbox.simulator.store_port import StorePort

Obj = dict[str, Any]
KindKey = tuple[str, str]  # (group, kind)
ObjKey = tuple[str, str]  # (namespace, name)


def _group(api_version: str) -> str:
    return api_version.rpartition("/")[0]


def _rv(obj: Obj) -> int:
    try:
        return int((obj.get("metadata") or {}).get("resourceVersion") or 0)
    except ValueError:
        return 0


class Informer:
    """Cached objects of ``kinds`` ((api_version, kind) pairs), kept current from events."""

    def __init__(
        self,
        store: StorePort,
        kinds: Iterable[tuple[str, str]],
        *,
        on_change: Callable[[], None] | None = None,
    ) -> None:
        self._store = store
        self._on_change = on_change
        self._lock = threading.Lock()
        self._objects: dict[KindKey, dict[ObjKey, Obj]] = {}
        wanted = list(kinds)
        for api_version, kind in wanted:
            self._objects[(_group(api_version), kind)] = {}
        # Subscribe first, then list: an event racing the list is merged by resourceVersion.
        self._unsubscribe = store.subscribe(self._event)
        for api_version, kind in wanted:
            try:
                items = store.list(api_version, kind)
            except ApiError:
                continue  # a CRD not installed yet: its objects will all arrive as events
            for obj in items:
                self.apply(obj)

    def close(self) -> None:
        self._unsubscribe()

    def _event(self, etype: str, obj: Obj) -> None:
        key = (_group(str(obj.get("apiVersion", ""))), str(obj.get("kind", "")))
        if key in self._objects:
            if etype == "DELETED":
                self.forget(obj)
            else:
                self.apply(obj)
        if self._on_change is not None:
            self._on_change()

    def apply(self, obj: Obj) -> None:
        key = (_group(str(obj.get("apiVersion", ""))), str(obj.get("kind", "")))
        meta = obj.get("metadata") or {}
        okey = (str(meta.get("namespace") or ""), str(meta.get("name") or ""))
        with self._lock:
            bucket = self._objects.get(key)
            if bucket is None:
                return
            old = bucket.get(okey)
            if old is None or _rv(obj) >= _rv(old):
                bucket[okey] = obj

    def forget(self, obj: Obj) -> None:
        key = (_group(str(obj.get("apiVersion", ""))), str(obj.get("kind", "")))
        meta = obj.get("metadata") or {}
        okey = (str(meta.get("namespace") or ""), str(meta.get("name") or ""))
        with self._lock:
            bucket = self._objects.get(key)
            if bucket is not None:
                bucket.pop(okey, None)

    def get(self, api_version: str, kind: str, namespace: str | None, name: str) -> Obj | None:
        with self._lock:
            return self._objects.get((_group(api_version), kind), {}).get((namespace or "", name))

    def list(
        self,
        api_version: str,
        kind: str,
        namespace: str | None = None,
        labels: dict[str, str] | None = None,
    ) -> list[Obj]:
        """Objects (sorted by namespace, name) in ``namespace`` (None: all) matching ``labels``."""
        with self._lock:
            items = sorted(self._objects.get((_group(api_version), kind), {}).items())
        out = []
        for (ns, _), obj in items:
            if namespace is not None and ns != namespace:
                continue
            if labels:
                have = (obj.get("metadata") or {}).get("labels") or {}
                if any(have.get(k) != v for k, v in labels.items()):
                    continue
            out.append(obj)
        return out
