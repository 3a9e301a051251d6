"""The emulator's object store: thread-safe, in memory, with an event log for watches.

The HTTP layer and an in-process controller simulator share one ``Store`` (``ApiServer.store``).
Objects are plain JSON dicts. Every call returns deep copies; nothing a caller holds is ever
shared with the store.

Public API (stable; the controller simulator codes against it)::

    store.get(api_version, kind, namespace, name) -> dict | None
        # None if absent; every call raises NotFound if the kind is not registered (a CRD
        # not installed). namespace is ignored (pass None) for cluster-scoped kinds.
    store.list(api_version, kind, namespace=None, label_selector=None) -> list[dict]
        # namespace None = all namespaces; label_selector is the Kubernetes string form
        # ("app=x,tier in (a,b),!legacy") or a dict of equalities {"app": "x"}
    store.create(obj, *, manager="sandbox") -> dict
        # obj carries apiVersion, kind, metadata.name (or generateName) and, for namespaced
        # kinds, metadata.namespace (the namespace must exist). Unlike HTTP, a given
        # ``status`` is kept, so a simulator can create a Pod already Running.
        # Raises AlreadyExists, NotFound (unknown kind or namespace), Invalid.
    store.update(obj, *, manager="sandbox") -> dict
        # PUT semantics: replaces everything but status (kept from the stored object when
        # the kind has a status subresource). If obj.metadata.resourceVersion is set and
        # stale, raises Conflict (HTTP 409); if absent, the update is unconditional.
    store.update_status(obj, *, manager="sandbox") -> dict
        # replaces only .status (same resourceVersion rule); generation is not bumped.
    store.patch_merge(api_version, kind, namespace, name, patch, *, manager="sandbox",
                      subresource=None) -> dict
        # RFC 7386 JSON merge patch (None deletes a key); subresource="status" patches status.
    store.delete(api_version, kind, namespace, name) -> dict | None
        # With finalizers: sets deletionTimestamp and returns the object (it goes once the
        # finalizers are removed by an update). Otherwise removes it and returns the last
        # state. Dependents (ownerReferences) are garbage-collected; deleting a Namespace
        # deletes its contents. Returns None if it did not exist (no exception).
    store.subscribe(callback) -> unsubscribe
        # callback(event_type, obj) with event_type "ADDED" | "MODIFIED" | "DELETED", for
        # every change of every kind, in order, called OUTSIDE the store lock (a callback may
        # write to the store; those events are delivered after it returns). Callbacks run on
        # a writing thread (whichever is delivering; with delay 0 the emulator's kubelet
        # reacts inside the write that triggered it); keep them short or hand work to your
        # own thread. An exception in a callback is logged and never reaches the writer.
    store.resource_version -> int   # the current global resourceVersion
    store.compact() -> None         # forget event history: older watch resumes get 410 Gone

Exceptions (all subclasses of ``ApiError``, carrying ``code``/``reason`` as the HTTP Status
would): ``NotFound`` 404, ``AlreadyExists`` 409, ``Conflict`` 409, ``Invalid`` 422,
``Gone`` 410, ``BadRequest`` 400, ``UnsupportedMediaType`` 415, ``MethodNotAllowed`` 405.

Semantics kept close to a real API server: a global integer resourceVersion; uid and
creationTimestamp on create; generation bumped only when something outside metadata and status
changes; a write that changes nothing keeps its resourceVersion and emits no event;
managedFields per field manager; Secret ``stringData`` folded into ``data``; custom resources
validated, pruned and defaulted against their CRD's openAPIV3Schema; CRDs registering their
kinds at once with Established and NamesAccepted conditions.
"""

from __future__ import annotations

import base64
import bisect
import json
import logging
import secrets
import threading
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from gitopsbot.sandbox.apiserver import fieldsets
from gitopsbot.sandbox.apiserver.errors import (
    AlreadyExists,
    ApiError,
    BadRequest,
    Conflict,
    Gone,
    Invalid,
    MethodNotAllowed,
    NotFound,
    UnsupportedMediaType,
)
from gitopsbot.sandbox.apiserver.merge import json_merge_patch
from gitopsbot.sandbox.apiserver.resources import Registry, ResourceType
from gitopsbot.sandbox.apiserver.schema import validate_custom_resource
from gitopsbot.sandbox.apiserver.selectors import LabelSelector, parse_label_selector
from gitopsbot.sandbox.apiserver.services import admit_service

__all__ = [
    "AlreadyExists",
    "ApiError",
    "BadRequest",
    "Conflict",
    "Event",
    "Gone",
    "Invalid",
    "MethodNotAllowed",
    "NotFound",
    "Store",
    "UnsupportedMediaType",
]

Obj = dict[str, Any]
Callback = Callable[[str, Obj], None]
Key = tuple[str, str]  # (namespace, name); namespace "" for cluster-scoped kinds
ObjList = list[Obj]

_log = logging.getLogger(__name__)

# Events kept for watch resume; older resourceVersions get 410 Gone, as etcd compaction does.
HISTORY = 20_000


@dataclass(frozen=True, slots=True)
class Event:
    """One change. ``obj`` and ``old`` are the stored dicts (never mutated after storing)."""

    rv: int
    type: str  # ADDED | MODIFIED | DELETED
    group: str
    kind: str
    obj: Obj
    old: Obj | None


EventList = list[Event]


def clone(value: Any) -> Any:
    """Deep copy of a JSON value; several times faster than copy.deepcopy (no memo)."""
    if type(value) is dict:
        return {k: clone(v) for k, v in value.items()}
    if type(value) is list:
        return [clone(v) for v in value]
    return value


def now_rfc3339() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def split_api_version(api_version: str) -> tuple[str, str]:
    group, _, version = api_version.rpartition("/")
    return group, version


def _without_volatile(obj: Obj) -> Obj:
    # What decides "did anything change": not the resourceVersion, not managedFields times.
    out = dict(obj)
    meta = dict(out.get("metadata") or {})
    meta.pop("resourceVersion", None)
    meta.pop("managedFields", None)
    out["metadata"] = meta
    return out


def _spec_part(obj: Obj) -> Obj:
    return {k: v for k, v in obj.items() if k not in ("metadata", "status", "apiVersion", "kind")}


class Store:
    """Objects by (group, kind) then (namespace, name), a global resourceVersion and events."""

    def __init__(self) -> None:
        self.registry = Registry()
        self._lock = threading.RLock()
        self.changed = threading.Condition(self._lock)
        self._objects: dict[tuple[str, str], dict[Key, Obj]] = {}
        # owner uid -> dependents (group, kind, key), for garbage collection without a scan
        self._dependents: dict[str, set[tuple[str, str, Key]]] = {}
        self._rv = 1
        self._log: list[Event] = []
        self._log_rvs: list[int] = []
        self._oldest_rv = 1  # events with rv > _oldest_rv - 1 are retained
        self._subscribers: list[Callback] = []
        self._pending: deque[tuple[str, Obj]] = deque()
        self._dispatching = False
        self._dispatch_lock = threading.Lock()
        self.closed = False
        with self._lock:
            for ns in ("default", "kube-system", "kube-public", "kube-node-lease"):
                self._create(self.registry.get("", "Namespace"), {"metadata": {"name": ns}})

    # ---------------------------------------------------------------- public API

    @property
    def resource_version(self) -> int:
        with self._lock:
            return self._rv

    def get(self, api_version: str, kind: str, namespace: str | None, name: str) -> Obj | None:
        rt = self._type(api_version, kind)
        with self._lock:
            obj = self._objects.get((rt.group, rt.kind), {}).get(self._key(rt, namespace, name))
            return self.present(obj, api_version) if obj is not None else None

    def list(
        self,
        api_version: str,
        kind: str,
        namespace: str | None = None,
        label_selector: str | dict[str, str] | None = None,
    ) -> ObjList:
        rt = self._type(api_version, kind)
        sel = _selector(label_selector)
        with self._lock:
            items = list(self._iter(rt, namespace))
        return [self.present(o, api_version) for o in items if sel is None or sel.matches(o)]

    def create(self, obj: Obj, *, manager: str = "sandbox") -> Obj:
        rt = self._type(obj.get("apiVersion", ""), obj.get("kind", ""))
        with self._lock:
            stored = self._create(rt, obj, manager=manager, keep_status=True)
        self._dispatch()
        return self.present(stored, obj["apiVersion"])

    def update(self, obj: Obj, *, manager: str = "sandbox") -> Obj:
        return self._replace_public(obj, manager=manager, subresource=None)

    def update_status(self, obj: Obj, *, manager: str = "sandbox") -> Obj:
        return self._replace_public(obj, manager=manager, subresource="status")

    def patch_merge(
        self,
        api_version: str,
        kind: str,
        namespace: str | None,
        name: str,
        patch: Obj,
        *,
        manager: str = "sandbox",
        subresource: str | None = None,
    ) -> Obj:
        rt = self._type(api_version, kind)

        def build(old: Obj) -> Obj:
            new = json_merge_patch(old, patch)
            if not isinstance(new, dict):
                raise BadRequest("merge patch must be an object")
            return new

        stored = self.modify(
            rt, namespace, name, build, manager=manager, subresource=subresource, check_rv=True
        )
        return self.present(stored, api_version)

    def delete(self, api_version: str, kind: str, namespace: str | None, name: str) -> Obj | None:
        rt = self._type(api_version, kind)
        try:
            stored = self.remove(rt, namespace, name)
        except NotFound:
            return None
        return self.present(stored, api_version)

    def subscribe(self, callback: Callback) -> Callable[[], None]:
        with self._lock:
            self._subscribers.append(callback)

        def unsubscribe() -> None:
            with self._lock:
                if callback in self._subscribers:
                    self._subscribers.remove(callback)

        return unsubscribe

    # ---------------------------------------------------------------- used by the HTTP layer

    def present(self, obj: Obj, api_version: str | None = None) -> Obj:
        """A deep copy, with apiVersion as the caller asked (one stored copy serves all)."""
        out: Obj = clone(obj)
        if api_version:
            out["apiVersion"] = api_version
        return out

    def get_stored(self, rt: ResourceType, namespace: str | None, name: str) -> Obj:
        with self._lock:
            obj = self._objects.get((rt.group, rt.kind), {}).get(self._key(rt, namespace, name))
            if obj is None:
                raise NotFound(
                    f'{rt.plural}.{rt.group or "core"} "{name}" not found'.replace(".core", ""),
                    kind=rt.plural,
                    name=name,
                    group=rt.group,
                )
            return obj

    def snapshot(
        self, rt: ResourceType, namespace: str | None, selector: Callable[[Obj], bool] | None
    ) -> tuple[ObjList, int]:
        with self._lock:
            items = [o for o in self._iter(rt, namespace) if selector is None or selector(o)]
            return items, self._rv

    def create_from_request(
        self, rt: ResourceType, obj: Obj, *, manager: str, dry_run: bool = False
    ) -> Obj:
        with self._lock:
            stored = self._create(rt, obj, manager=manager, keep_status=False, dry_run=dry_run)
        self._dispatch()
        return stored

    def modify(
        self,
        rt: ResourceType,
        namespace: str | None,
        name: str,
        build: Callable[[Obj], Obj],
        *,
        manager: str,
        subresource: str | None = None,
        check_rv: bool = True,
        dry_run: bool = False,
        operation: str = "Update",
        managed: Callable[[Obj, Obj], ObjList] | None = None,
    ) -> Obj:
        """Read-modify-write under the lock: ``build(old) -> new`` (a fresh dict)."""
        with self._lock:
            old = self.get_stored(rt, namespace, name)
            new = build(clone(old))
            stored = self._write(
                rt,
                old,
                new,
                manager=manager,
                subresource=subresource,
                check_rv=check_rv,
                dry_run=dry_run,
                operation=operation,
                managed=managed,
            )
        self._dispatch()
        return stored

    def remove(
        self, rt: ResourceType, namespace: str | None, name: str, *, dry_run: bool = False
    ) -> Obj:
        with self._lock:
            old = self.get_stored(rt, namespace, name)
            stored = old if dry_run else self._delete(rt, old)
        self._dispatch()
        return stored

    def events_since(self, rv: int) -> EventList:
        """Events with resourceVersion > rv. Raises Gone if rv is older than the history."""
        with self._lock:
            if rv < self._oldest_rv - 1:
                raise Gone(f"too old resource version: {rv} ({self._oldest_rv - 1})")
            i = bisect.bisect_right(self._log_rvs, rv)
            return self._log[i:]

    def compact(self) -> None:
        """Forget the event history, as etcd compaction does: watches resuming from any
        earlier resourceVersion get 410 Gone."""
        with self._lock:
            self._log.clear()
            self._log_rvs.clear()
            self._oldest_rv = self._rv + 1

    def load(self, objects: ObjList, rv: int) -> None:
        """Restore a persisted snapshot (CRDs first so their kinds exist)."""
        with self._lock:
            crd_first = sorted(objects, key=lambda o: o.get("kind") != "CustomResourceDefinition")
            for obj in crd_first:
                group, _ = split_api_version(obj.get("apiVersion", ""))
                rt = self.registry.find(group, obj.get("kind", ""))
                if rt is None:
                    continue
                if rt.kind == "CustomResourceDefinition":
                    self.registry.register_crd(obj)
                self._put(rt, obj)
            self._rv = max(self._rv, rv)
            self._oldest_rv = self._rv + 1
            self._pending.clear()

    def dump(self) -> tuple[ObjList, int]:
        with self._lock:
            return [o for b in self._objects.values() for o in b.values()], self._rv

    def close(self) -> None:
        with self._lock:
            self.closed = True
            self.changed.notify_all()

    # ---------------------------------------------------------------- internals

    def _type(self, api_version: str, kind: str) -> ResourceType:
        group, version = split_api_version(api_version)
        rt = self.registry.find(group, kind)
        if rt is None or (version and version not in rt.versions):
            raise NotFound(f'no kind "{kind}" is registered for version "{api_version}"')
        return rt

    @staticmethod
    def _key(rt: ResourceType, namespace: str | None, name: str) -> Key:
        return (namespace or "", name) if rt.namespaced else ("", name)

    def _bucket(self, rt: ResourceType) -> dict[Key, Obj]:
        return self._objects.setdefault((rt.group, rt.kind), {})

    def _put(self, rt: ResourceType, obj: Obj) -> None:
        meta = obj["metadata"]
        key = self._key(rt, meta.get("namespace"), meta["name"])
        bucket = self._bucket(rt)
        old = bucket.get(key)
        if old is not None:
            self._unindex(rt, key, old)
        bucket[key] = obj
        for ref in meta.get("ownerReferences") or []:
            if ref.get("uid"):
                self._dependents.setdefault(ref["uid"], set()).add((rt.group, rt.kind, key))

    def _drop(self, rt: ResourceType, obj: Obj) -> None:
        meta = obj["metadata"]
        key = self._key(rt, meta.get("namespace"), meta["name"])
        old = self._bucket(rt).pop(key, None)
        if old is not None:
            self._unindex(rt, key, old)

    def _unindex(self, rt: ResourceType, key: Key, obj: Obj) -> None:
        for ref in obj["metadata"].get("ownerReferences") or []:
            deps = self._dependents.get(ref.get("uid", ""))
            if deps is not None:
                deps.discard((rt.group, rt.kind, key))
                if not deps:
                    del self._dependents[ref["uid"]]

    def _iter(self, rt: ResourceType, namespace: str | None) -> Iterator[Obj]:
        bucket = self._objects.get((rt.group, rt.kind), {})
        if namespace and rt.namespaced:
            return (o for (ns, _), o in sorted(bucket.items()) if ns == namespace)
        return (o for _, o in sorted(bucket.items()))

    def _replace_public(self, obj: Obj, *, manager: str, subresource: str | None) -> Obj:
        rt = self._type(obj.get("apiVersion", ""), obj.get("kind", ""))
        meta = obj.get("metadata") or {}
        stored = self.modify(
            rt,
            meta.get("namespace"),
            meta.get("name", ""),
            lambda _old: clone(obj),
            manager=manager,
            subresource=subresource,
        )
        return self.present(stored, obj["apiVersion"])

    def _next_rv(self) -> int:
        self._rv += 1
        return self._rv

    def _record(self, rt: ResourceType, etype: str, obj: Obj, old: Obj | None) -> None:
        rv = int(obj["metadata"]["resourceVersion"])
        self._log.append(Event(rv, etype, rt.group, rt.kind, obj, old))
        self._log_rvs.append(rv)
        if len(self._log) > 2 * HISTORY:
            cut = len(self._log) - HISTORY
            del self._log[:cut]
            del self._log_rvs[:cut]
            self._oldest_rv = self._log_rvs[0]
        if self._subscribers:
            self._pending.append((etype, obj))
        self.changed.notify_all()

    def _dispatch(self) -> None:
        # Deliver queued events outside the store lock, in order. A callback that writes
        # enqueues more events; the thread already dispatching delivers them after it returns.
        with self._dispatch_lock:
            if self._dispatching:
                return
            self._dispatching = True
        try:
            while True:
                with self._lock:
                    if not self._pending:
                        with self._dispatch_lock:
                            self._dispatching = False
                        return
                    etype, obj = self._pending.popleft()
                    subs = list(self._subscribers)
                for cb in subs:
                    try:
                        cb(etype, self.present(obj))
                    except Exception:  # noqa: BLE001 - any subscriber bug is contained here
                        # A broken subscriber must not fail the writer (maybe helm's request).
                        _log.exception("store subscriber %r failed on %s", cb, etype)
        except BaseException:
            with self._dispatch_lock:
                self._dispatching = False
            raise

    def _create(
        self,
        rt: ResourceType,
        obj: Obj,
        *,
        manager: str = "sandbox",
        keep_status: bool = False,
        dry_run: bool = False,
    ) -> Obj:
        new: Obj = clone(obj)
        meta = new.setdefault("metadata", {})
        if not isinstance(meta, dict):
            raise BadRequest("metadata must be an object")
        if not meta.get("name"):
            prefix = meta.get("generateName")
            if not prefix:
                raise Invalid(
                    f"{rt.kind} is invalid: metadata.name: Required value",
                    kind=rt.kind,
                    causes=[("FieldValueRequired", "metadata.name", "Required value")],
                )
            meta["name"] = prefix + "".join(
                secrets.choice("bcdfghjklmnpqrstvwxz2456789") for _ in range(5)
            )
        name = meta["name"]
        if rt.namespaced:
            ns = meta.get("namespace") or "default"
            meta["namespace"] = ns
            ns_obj = self._objects.get(("", "Namespace"), {}).get(("", ns))
            if ns_obj is None:
                raise NotFound(f'namespaces "{ns}" not found', kind="namespaces", name=ns)
            if ns_obj["metadata"].get("deletionTimestamp"):
                raise ApiError(
                    403,
                    "Forbidden",
                    f"unable to create new content in namespace {ns} because it is"
                    " being terminated",
                )
        else:
            meta.pop("namespace", None)
        key = self._key(rt, meta.get("namespace"), name)
        if key in self._bucket(rt):
            raise AlreadyExists(
                f'{rt.plural}{"." + rt.group if rt.group else ""} "{name}" already exists',
                kind=rt.plural,
                name=name,
                group=rt.group,
            )
        new["apiVersion"] = rt.api_version
        new["kind"] = rt.kind
        if not keep_status and rt.has_status:
            new.pop("status", None)
        for k in ("deletionTimestamp", "deletionGracePeriodSeconds", "resourceVersion"):
            meta.pop(k, None)
        meta["uid"] = _uid()
        meta["creationTimestamp"] = now_rfc3339()
        meta["generation"] = 1
        self._admit(rt, new, None)
        if dry_run:
            meta["resourceVersion"] = str(self._rv)
            return new
        if not fieldsets.decodable(meta.get("managedFields")):
            meta.pop("managedFields", None)
            fields = fieldsets.fields_of(_spec_and_meta(new), rt)
            if fields:
                meta["managedFields"] = [
                    fieldsets.entry(manager, "Update", rt.api_version, fields, now_rfc3339())
                ]
        meta["resourceVersion"] = str(self._next_rv())
        self._put(rt, new)
        self._record(rt, "ADDED", new, None)
        if rt.kind == "CustomResourceDefinition":
            self._crd_changed(new)
        return new

    def _write(
        self,
        rt: ResourceType,
        old: Obj,
        new: Obj,
        *,
        manager: str,
        subresource: str | None,
        check_rv: bool,
        dry_run: bool = False,
        operation: str = "Update",
        managed: Callable[[Obj, Obj], ObjList] | None = None,
    ) -> Obj:
        if not isinstance(new, dict):
            raise BadRequest("the object must be a JSON object")
        old_meta = old["metadata"]
        meta = new.get("metadata")
        if not isinstance(meta, dict):
            meta = new["metadata"] = {}
        want_rv = meta.get("resourceVersion")
        if check_rv and want_rv and str(want_rv) != old_meta["resourceVersion"]:
            raise Conflict(
                f"Operation cannot be fulfilled on {rt.plural}{'.' + rt.group if rt.group else ''}"
                f' "{old_meta["name"]}": the object has been modified; please apply your changes'
                " to the latest version and try again",
                kind=rt.plural,
                name=old_meta["name"],
                group=rt.group,
            )
        if meta.get("name", old_meta["name"]) != old_meta["name"]:
            raise BadRequest("the name of the object does not match the name in the URL")
        if subresource == "status":
            status = new.get("status")
            new = clone(old)
            if status is None:
                new.pop("status", None)
            else:
                new["status"] = status
            meta = new["metadata"]
        elif rt.has_status:
            if "status" in old:
                new["status"] = clone(old["status"])
            else:
                new.pop("status", None)
        new["apiVersion"] = rt.api_version
        new["kind"] = rt.kind
        for k in ("uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds"):
            if k in old_meta:
                meta[k] = old_meta[k]
            else:
                meta.pop(k, None)
        if rt.namespaced:
            meta["namespace"] = old_meta["namespace"]
        meta["name"] = old_meta["name"]
        if old_meta.get("deletionTimestamp"):
            # Like the real server: no new finalizers once deletion has begun.
            added = set(meta.get("finalizers") or []) - set(old_meta.get("finalizers") or [])
            if added:
                raise Invalid(
                    f"{rt.kind} is invalid: metadata.finalizers: Forbidden: no new "
                    "finalizers can be added if the object is being deleted",
                    kind=rt.kind,
                    name=old_meta["name"],
                )
        self._admit(rt, new, old)
        meta["generation"] = old_meta.get("generation", 1)
        if _spec_part(new) != _spec_part(old):
            meta["generation"] = int(meta["generation"]) + 1
        if managed is not None:
            meta["managedFields"] = managed(old, new)
        else:
            # As the real server: a list the write sets itself (kubectl's CSA→SSA migration, a
            # person or the bot releasing a manager's fields, [{}] to reset) is where ownership
            # starts; a subresource write cannot set it. Nothing is tracked once it is empty.
            live = old_meta.get("managedFields") or []
            given = meta.get("managedFields") if subresource is None else live
            base = fieldsets.requested_entries(given, live)
            meta["managedFields"] = (
                fieldsets.track_update(
                    old,
                    new,
                    rt,
                    manager=manager,
                    operation=operation,
                    subresource=subresource,
                    api_version=rt.api_version,
                    time=now_rfc3339(),
                    base=base,
                )
                if base
                else []
            )
        if not meta.get("managedFields"):
            meta.pop("managedFields", None)
        meta["resourceVersion"] = old_meta["resourceVersion"]
        if _without_volatile(new) == _without_volatile(old) and _same_managers(
            meta.get("managedFields"), old_meta.get("managedFields")
        ):
            return old  # a no-op write (e.g. re-applying the same manifest) changes nothing
        if dry_run:
            return new
        if old_meta.get("deletionTimestamp") and not meta.get("finalizers"):
            meta["resourceVersion"] = str(self._next_rv())
            self._put(rt, new)
            self._record(rt, "MODIFIED", new, old)
            return self._finalize(rt, new)
        meta["resourceVersion"] = str(self._next_rv())
        self._put(rt, new)
        self._record(rt, "MODIFIED", new, old)
        if rt.kind == "CustomResourceDefinition" and subresource != "status":
            self._crd_changed(new)
        return new

    def _delete(self, rt: ResourceType, old: Obj) -> Obj:
        meta = old["metadata"]
        if meta.get("deletionTimestamp"):
            return old
        if meta.get("finalizers") or rt.kind == "Namespace":
            new: Obj = clone(old)
            new["metadata"]["deletionTimestamp"] = now_rfc3339()
            new["metadata"]["deletionGracePeriodSeconds"] = 0
            if rt.kind == "Namespace":
                new.setdefault("status", {})["phase"] = "Terminating"
            new["metadata"]["resourceVersion"] = str(self._next_rv())
            self._put(rt, new)
            self._record(rt, "MODIFIED", new, old)
            if rt.kind == "Namespace":
                self._empty_namespace(meta["name"])
                if not meta.get("finalizers"):
                    return self._finalize(rt, new)
            return new
        return self._finalize(rt, old)

    def _finalize(self, rt: ResourceType, obj: Obj) -> Obj:
        self._drop(rt, obj)
        # The DELETED event carries the deletion's resourceVersion, as informers expect.
        obj = {**obj, "metadata": {**obj["metadata"], "resourceVersion": str(self._next_rv())}}
        meta = obj["metadata"]
        self._record(rt, "DELETED", obj, None)
        if rt.kind == "CustomResourceDefinition":
            self._crd_removed(obj)
        self._collect_garbage(meta["uid"])
        return obj

    def _empty_namespace(self, namespace: str) -> None:
        for (group, kind), bucket in list(self._objects.items()):
            rt = self.registry.find(group, kind)
            if rt is None or not rt.namespaced:
                continue
            for (ns, _), obj in list(bucket.items()):
                if ns == namespace:
                    self._delete(rt, obj)

    def _collect_garbage(self, owner_uid: str) -> None:
        # Background propagation, done at once: dependents whose owner is gone are deleted.
        for group, kind, key in sorted(self._dependents.pop(owner_uid, set())):
            rt = self.registry.find(group, kind)
            obj = self._objects.get((group, kind), {}).get(key)
            if rt is not None and obj is not None:
                self._delete(rt, obj)

    def _admit(self, rt: ResourceType, new: Obj, old: Obj | None) -> None:
        """Defaults and validation per kind."""
        if rt.group == "" and rt.kind == "Secret":
            string_data = new.pop("stringData", None) or {}
            if string_data:
                data = new.setdefault("data", {}) or {}
                for k, v in string_data.items():
                    data[k] = base64.b64encode(str(v).encode()).decode()
                new["data"] = data
            if not new.get("type"):  # protobuf bodies carry "" for unset
                new["type"] = "Opaque"
        elif rt.group == "" and rt.kind == "Service":
            admit_service(new, old, in_use=self._cluster_ips(exclude=new))
        elif rt.group == "" and rt.kind == "Pod" and old is None:
            new.setdefault("status", {}).setdefault("phase", "Pending")
        elif rt.group == "" and rt.kind == "Namespace":
            meta = new["metadata"]
            meta.setdefault("labels", {})["kubernetes.io/metadata.name"] = meta["name"]
            new.setdefault("spec", {}).setdefault("finalizers", ["kubernetes"])
            new.setdefault("status", {}).setdefault("phase", "Active")
        elif rt.group == "apps" and rt.kind in ("Deployment", "StatefulSet", "ReplicaSet"):
            spec = new.setdefault("spec", {})
            spec.setdefault("replicas", 1)
            if rt.kind == "Deployment":
                spec.setdefault("revisionHistoryLimit", 10)
                spec.setdefault("progressDeadlineSeconds", 600)
                spec.setdefault(
                    "strategy",
                    {
                        "type": "RollingUpdate",
                        "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"},
                    },
                )
        elif rt.kind == "CustomResourceDefinition":
            _check_crd(new)
        if rt.custom:
            schema = self.registry.schema(rt, split_api_version(new.get("apiVersion", ""))[1])
            validate_custom_resource(new, schema, rt, old)

    def _cluster_ips(self, *, exclude: Obj) -> set[str]:
        meta = exclude.get("metadata") or {}
        key = (meta.get("namespace") or "", meta.get("name"))
        return {
            str((o.get("spec") or {}).get("clusterIP"))
            for k, o in self._objects.get(("", "Service"), {}).items()
            if k != key and (o.get("spec") or {}).get("clusterIP") not in (None, "", "None")
        }

    def _crd_changed(self, crd: Obj) -> None:
        # Registration happens at once, and the conditions are set in the same write, because
        # helm and `kubectl wait --for=condition=Established` look for them right away.
        self.registry.register_crd(crd)
        rt = self.registry.get("apiextensions.k8s.io", "CustomResourceDefinition")
        spec = crd["spec"]
        names = spec["names"]
        stamp = now_rfc3339()
        accepted = {
            k: v
            for k, v in names.items()
            if k in ("plural", "singular", "kind", "listKind", "shortNames", "categories")
        }
        accepted.setdefault("singular", names["kind"].lower())
        accepted.setdefault("listKind", names["kind"] + "List")
        status = {
            "acceptedNames": accepted,
            "conditions": [
                {
                    "type": "NamesAccepted",
                    "status": "True",
                    "reason": "NoConflicts",
                    "message": "no conflicts found",
                    "lastTransitionTime": stamp,
                },
                {
                    "type": "Established",
                    "status": "True",
                    "reason": "InitialNamesAccepted",
                    "message": "the initial names have been accepted",
                    "lastTransitionTime": stamp,
                },
            ],
            "storedVersions": sorted(
                {v["name"] for v in spec.get("versions", []) if v.get("storage")}
                | set((crd.get("status") or {}).get("storedVersions", []))
            ),
        }
        old_status = crd.get("status") or {}
        if _same_conditions(old_status, status):
            return
        new: Obj = clone(crd)
        new["status"] = status
        new["metadata"]["resourceVersion"] = str(self._next_rv())
        self._put(rt, new)
        self._record(rt, "MODIFIED", new, crd)

    def _crd_removed(self, crd: Obj) -> None:
        names = crd["spec"]["names"]
        group = crd["spec"]["group"]
        rt = self.registry.find(group, names["kind"])
        if rt is not None:
            for obj in list(self._objects.get((group, names["kind"]), {}).values()):
                self._finalize(rt, obj)
        self.registry.unregister_crd(crd)


def _same_managers(a: Any, b: Any) -> bool:
    def strip(entries: Any) -> list[Obj]:
        return [{k: v for k, v in e.items() if k != "time"} for e in entries or []]

    return strip(a) == strip(b)


def _same_conditions(old: Obj, new: Obj) -> bool:
    def strip(s: Obj) -> str:
        conds = [
            {k: v for k, v in c.items() if k != "lastTransitionTime"}
            for c in s.get("conditions") or []
        ]
        return json.dumps([conds, s.get("acceptedNames"), s.get("storedVersions")], sort_keys=True)

    return strip(old) == strip(new)


def _check_crd(crd: Obj) -> None:
    spec = crd.get("spec")
    problems = []
    if not isinstance(spec, dict):
        problems.append("spec: Required value")
    else:
        names = spec.get("names") or {}
        for f in ("plural", "kind"):
            if not names.get(f):
                problems.append(f"spec.names.{f}: Required value")
        if not spec.get("group"):
            problems.append("spec.group: Required value")
        versions = spec.get("versions") or []
        if not versions:
            problems.append("spec.versions: Required value")
        elif sum(1 for v in versions if v.get("storage")) != 1:
            problems.append(
                "spec.versions: Invalid value: must have exactly one version marked"
                " as storage version"
            )
        if not problems and crd["metadata"]["name"] != f"{names['plural']}.{spec['group']}":
            problems.append(
                'metadata.name: Invalid value: must be spec.names.plural+"."+spec.group'
            )
    if problems:
        raise Invalid(
            "CustomResourceDefinition.apiextensions.k8s.io "
            f'"{crd["metadata"].get("name")}" is invalid: ' + ", ".join(problems),
            kind="CustomResourceDefinition",
            group="apiextensions.k8s.io",
            name=crd["metadata"].get("name", ""),
        )


def _spec_and_meta(obj: Obj) -> Obj:
    out = {k: v for k, v in obj.items() if k != "status"}
    meta = {
        k: v
        for k, v in (obj.get("metadata") or {}).items()
        if k in ("labels", "annotations", "finalizers", "ownerReferences")
    }
    if meta:
        out["metadata"] = meta
    else:
        out.pop("metadata", None)
    out.pop("apiVersion", None)
    out.pop("kind", None)
    return out


def _selector(sel: str | dict[str, str] | None) -> LabelSelector | None:
    if sel is None or sel == "" or sel == {}:
        return None
    if isinstance(sel, dict):
        sel = ",".join(f"{k}={v}" for k, v in sel.items())
    return parse_label_selector(sel)


def _uid() -> str:
    h = secrets.token_hex(16)
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"
