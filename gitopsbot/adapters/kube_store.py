"""A Store-compatible backend over a real Kubernetes API server, for the controller simulator.

``KubeStore`` offers what the simulator calls on the emulator's ``Store``
(``sandbox/simulator/store_port.py``) through the official client's ``ApiClient``, as a real
controller talks to its server: writes carry the caller's field manager, status goes through
the ``/status`` subresource, and changes arrive from one watch per kind (``watch_kinds``),
each started with a list and followed from its resourceVersion. A watch that ends is resumed
from the last resourceVersion; one that expires (410) relists and emits DELETED for objects
that vanished meanwhile; a kind not served yet (a CRD not installed) is retried until it is,
and a kind that stops being served emits DELETED for what it had.

HTTP failures become the emulator's ``ApiError`` subclasses (NotFound, Conflict,
AlreadyExists, Invalid, Gone, ...: the emulator's ``error_from_answer``), so code written
against the emulator handles them as is.
Requests are sent and checked as every Kubernetes adapter sends them (kube_request.py).
"""

from __future__ import annotations

import builtins
import copy
import json
import logging
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from kubernetes.client import ApiClient

from gitopsbot.adapters.kube_request import (
    Failures,
    Served,
    configuration_from_kubeconfig,
    discovery_path,
    open_checked,
    served_kinds,
    stream_lines,
    watch_query,
)
from gitopsbot.sandbox.apiserver.errors import (
    ApiError,
    BadRequest,
    Conflict,
    Gone,
    NotFound,
    error_from_answer,
)

log = logging.getLogger(__name__)

Obj = dict[str, Any]
Callback = Callable[[str, Obj], None]
DEFAULT_MANAGER = "sandbox"
WATCH_SECONDS = 20  # the server ends each watch after this; it is then resumed
RETRY_SECONDS = 0.5  # between attempts at a kind not served yet, or after a failure


def _selector(label_selector: str | dict[str, str] | None) -> str:
    if not label_selector:
        return ""
    if isinstance(label_selector, dict):
        return ",".join(f"{k}={v}" for k, v in sorted(label_selector.items()))
    return label_selector


def _key(obj: Obj) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return (str(meta.get("namespace") or ""), str(meta.get("name") or ""))


def _rv(obj: Obj) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion") or "")


class KubeStore:
    """See the module docstring. ``close()`` stops the watches."""

    def __init__(
        self,
        api_client: ApiClient,
        *,
        watch_kinds: Iterable[tuple[str, str]] = (),
        request_timeout_seconds: float = 30.0,
    ) -> None:
        self._client = api_client
        self._timeout = request_timeout_seconds
        self._kinds = list(dict.fromkeys(watch_kinds))
        self._discovery: dict[str, dict[str, Served] | None] = {}
        self._lock = threading.Lock()
        self._deliver = threading.Lock()  # callbacks run one at a time, in arrival order
        self._subscribers: list[Callback] = []
        self._stopping = threading.Event()
        self._watchers: list[_Watcher] = []

    @classmethod
    def from_kubeconfig(
        cls, path: Path | str, context: str | None = None, **kwargs: Any
    ) -> KubeStore:
        # (no retries by the client: a failed write is the caller's to look at again)
        configuration = configuration_from_kubeconfig(path, context or "")
        # One long-lived connection per watch plus the writers: more than the default pool.
        configuration.connection_pool_maxsize = 64
        return cls(ApiClient(configuration), **kwargs)

    def close(self) -> None:
        self._stopping.set()
        for watcher in self._watchers:
            watcher.interrupt()
        for watcher in self._watchers:
            watcher.join(timeout=5)
        self._watchers.clear()
        self._client.close()  # type: ignore[no-untyped-call]

    # ------------------------------------------------------------------ reads

    def get(self, api_version: str, kind: str, namespace: str | None, name: str) -> Obj | None:
        res = self._require(api_version, kind)
        try:
            obj = self._call("GET", res.path(api_version, namespace, name))
        except NotFound:
            return None
        return self._typed(obj, api_version, kind)

    def list(
        self,
        api_version: str,
        kind: str,
        namespace: str | None = None,
        label_selector: str | dict[str, str] | None = None,
    ) -> builtins.list[Obj]:
        items, _ = self.list_with_version(api_version, kind, namespace, label_selector)
        return items

    def list_with_version(
        self,
        api_version: str,
        kind: str,
        namespace: str | None = None,
        label_selector: str | dict[str, str] | None = None,
    ) -> tuple[builtins.list[Obj], str]:
        """The objects (sorted by namespace, name) and the list's resourceVersion."""
        res = self._require(api_version, kind)
        query = [("labelSelector", _selector(label_selector))] if label_selector else []
        data = self._call("GET", res.path(api_version, namespace, None), query=query)
        items = [self._typed(o, api_version, kind) for o in data.get("items") or []]
        return sorted(items, key=_key), str((data.get("metadata") or {}).get("resourceVersion"))

    # ------------------------------------------------------------------ writes

    def create(self, obj: Obj, *, manager: str = DEFAULT_MANAGER) -> Obj:
        api_version, kind, namespace, _ = self._identity(obj)
        res = self._require(api_version, kind)
        path = res.path(api_version, namespace, None)
        created = self._call("POST", path, query=[("fieldManager", manager)], body=obj)
        created = self._typed(created, api_version, kind)
        status = obj.get("status")
        if status and res.status and created.get("status") != status:
            # The server drops a given status on create; the Store keeps it (a simulator
            # creates pods already Running), so it is written in a second request.
            # Controllers may write it first (the TTL controller annotates a new Node): on a
            # conflict, read it again.
            for _ in range(5):
                created["status"] = copy.deepcopy(status)
                try:
                    return self.update_status(created, manager=manager)
                except Conflict:
                    fresh = self.get(api_version, kind, namespace, self._identity(obj)[3])
                    if fresh is None:
                        raise
                    created = fresh
        return created

    def update(self, obj: Obj, *, manager: str = DEFAULT_MANAGER) -> Obj:
        return self._put(obj, manager, subresource=None)

    def update_status(self, obj: Obj, *, manager: str = DEFAULT_MANAGER) -> Obj:
        api_version, kind, _, _ = self._identity(obj)
        res = self._require(api_version, kind)
        return self._put(obj, manager, subresource="status" if res.status else None)

    def patch_merge(
        self,
        api_version: str,
        kind: str,
        namespace: str | None,
        name: str,
        patch: Obj,
        *,
        manager: str = DEFAULT_MANAGER,
        subresource: str | None = None,
    ) -> Obj:
        res = self._require(api_version, kind)
        path = res.path(api_version, namespace, name)
        if subresource:
            path += f"/{subresource}"
        out = self._call(
            "PATCH",
            path,
            query=[("fieldManager", manager)],
            body=patch,
            content_type="application/merge-patch+json",
        )
        return self._typed(out, api_version, kind)

    def delete(
        self,
        api_version: str,
        kind: str,
        namespace: str | None,
        name: str,
        *,
        grace_period_seconds: int | None = None,
    ) -> Obj | None:
        """Deletes; a Pod at once unless ``grace_period_seconds`` says otherwise (the
        simulated kubelet has nothing to stop, and no kubelet would confirm a graceful
        deletion)."""
        res = self._require(api_version, kind)
        grace = grace_period_seconds
        if grace is None and (api_version, kind) == ("v1", "Pod"):
            grace = 0
        query = [] if grace is None else [("gracePeriodSeconds", str(grace))]
        try:
            out = self._call("DELETE", res.path(api_version, namespace, name), query=query)
        except NotFound:
            return None
        if out.get("kind") == "Status":  # gone already; the server does not echo it
            return None
        return self._typed(out, api_version, kind)

    def bind(self, namespace: str, name: str, node: str, *, manager: str = DEFAULT_MANAGER) -> None:
        """What the scheduler does: POST ``pods/<name>/binding`` to ``node``."""
        binding = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": name, "namespace": namespace},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        path = f"/api/v1/namespaces/{namespace}/pods/{name}/binding"
        self._call("POST", path, query=[("fieldManager", manager)], body=binding)

    # ------------------------------------------------------------------ events

    def subscribe(self, callback: Callback) -> Callable[[], None]:
        """``callback(event_type, obj)`` for changes of the ``watch_kinds``; the first
        subscriber starts the watches (each begins by sending its objects as ADDED)."""
        with self._lock:
            self._subscribers.append(callback)
            if not self._watchers and not self._stopping.is_set():
                for api_version, kind in self._kinds:
                    watcher = _Watcher(self, api_version, kind)
                    self._watchers.append(watcher)
                    watcher.start()

        def unsubscribe() -> None:
            with self._lock:
                if callback in self._subscribers:
                    self._subscribers.remove(callback)

        return unsubscribe

    def synced(self) -> bool:
        """True once every watched kind has been listed (a kind not served yet counts not)."""
        with self._lock:
            return bool(self._watchers) and all(w.listed.is_set() for w in self._watchers)

    def _emit(self, etype: str, obj: Obj) -> None:
        with self._lock:
            callbacks = list(self._subscribers)
        with self._deliver:
            for callback in callbacks:
                try:
                    callback(etype, obj)
                except Exception:  # as the emulator: a subscriber's bug never stops the feed
                    log.exception("kube store: event callback failed")

    # ------------------------------------------------------------------ plumbing

    def _put(self, obj: Obj, manager: str, *, subresource: str | None) -> Obj:
        api_version, kind, namespace, name = self._identity(obj)
        res = self._require(api_version, kind)
        path = res.path(api_version, namespace, name)
        if subresource:
            path += f"/{subresource}"
        out = self._call("PUT", path, query=[("fieldManager", manager)], body=obj)
        return self._typed(out, api_version, kind)

    @staticmethod
    def _identity(obj: Obj) -> tuple[str, str, str | None, str]:
        meta = obj.get("metadata") or {}
        api_version, kind = str(obj.get("apiVersion") or ""), str(obj.get("kind") or "")
        if not api_version or not kind:
            raise BadRequest("object needs apiVersion and kind")
        return api_version, kind, meta.get("namespace") or None, str(meta.get("name") or "")

    @staticmethod
    def _typed(obj: Obj, api_version: str, kind: str) -> Obj:
        # List items carry no apiVersion/kind of their own; the Store's objects always do.
        obj.setdefault("apiVersion", api_version)
        obj.setdefault("kind", kind)
        return obj

    def resource(self, api_version: str, kind: str) -> Served | None:
        """The served resource (plural, scope), from discovery: cached, looked up again on a
        miss (a CRD installed a moment ago)."""
        with self._lock:
            cached = self._discovery.get(api_version)
        if cached is not None and kind in cached:
            return cached[kind]
        try:
            found: dict[str, Served] | None = served_kinds(
                self._call("GET", discovery_path(api_version))
            )
        except NotFound:
            found = None
        with self._lock:
            self._discovery[api_version] = found
        return None if found is None else found.get(kind)

    def _require(self, api_version: str, kind: str) -> Served:
        res = self.resource(api_version, kind)
        if res is None:
            raise NotFound(f"the server does not serve {kind} in {api_version}", kind=kind)
        return res

    def _call(
        self,
        method: str,
        path: str,
        *,
        query: builtins.list[tuple[str, str]] | None = None,
        body: Any = None,
        content_type: str = "application/json",
    ) -> Obj:
        data = self._raw(method, path, query or [], body, content_type, self._timeout).read()
        decoded = json.loads(data) if data else {}
        return decoded if isinstance(decoded, dict) else {}

    def _raw(
        self,
        method: str,
        path: str,
        query: builtins.list[tuple[str, str]],
        body: Any,
        content_type: str,
        timeout: float | tuple[float, float],
        *,
        stream: bool = False,
    ) -> Any:
        failures = Failures(
            status=lambda status, body, _headers: error_from_answer(status, body),
            transport=lambda e: ApiError(503, "ServiceUnavailable", f"{method} {path}: {e}"),
        )
        response = open_checked(
            self._client, method, path, failures=failures, query=query, body=body,
            content_type=content_type if body is not None else None, timeout=timeout,
        )  # fmt: skip
        # The client never preloads: the urllib3 response underneath streams a watch.
        return response.response if stream else response


class _Watcher(threading.Thread):
    """List, then watch, one kind; resumes, relists after 410, waits for the kind to exist."""

    def __init__(self, store: KubeStore, api_version: str, kind: str) -> None:
        super().__init__(name=f"kube-store-watch-{kind}", daemon=True)
        self.store = store
        self.api_version = api_version
        self.kind = kind
        self.listed = threading.Event()
        self.known: dict[tuple[str, str], Obj] = {}
        self._response: Any = None

    def interrupt(self) -> None:
        response = self._response
        if response is not None:
            try:
                response.shutdown()  # unblocks the reading thread (urllib3 >= 2.3)
            except Exception:  # closing a dead stream is no failure
                log.debug("kube store: closing the %s watch", self.kind, exc_info=True)

    def run(self) -> None:
        stopping = self.store._stopping
        rv = ""
        while not stopping.is_set():
            try:
                if not rv:
                    rv = self._relist()
                if rv:
                    rv = self._watch(rv)
            except ApiError as e:
                if e.code not in (404, 410):
                    log.info("kube store: %s watch: %s", self.kind, e)
                rv = ""
                stopping.wait(RETRY_SECONDS)
            except Exception:  # a broken stream: relist, as an informer does
                if not stopping.is_set():
                    log.debug("kube store: %s watch broke", self.kind, exc_info=True)
                rv = ""
                stopping.wait(RETRY_SECONDS)

    def _relist(self) -> str:
        """List; emit what changed since the last list (DELETED for what vanished). "" while
        the kind is not served."""
        if self.store.resource(self.api_version, self.kind) is None:
            self._vanish(set())
            self.store._stopping.wait(RETRY_SECONDS)
            return ""
        items, rv = self.store.list_with_version(self.api_version, self.kind)
        seen = {_key(o): o for o in items}
        self._vanish(set(seen))
        for key, obj in seen.items():
            old = self.known.get(key)
            if old is None or _rv(old) != _rv(obj):
                self.known[key] = obj
                self.store._emit("ADDED" if old is None else "MODIFIED", obj)
        self.listed.set()
        return rv

    def _vanish(self, present: set[tuple[str, str]]) -> None:
        for key in sorted(set(self.known) - present):
            self.store._emit("DELETED", self.known.pop(key))

    def _watch(self, rv: str) -> str:
        """Follow events from ``rv`` until the server ends the stream; the last rv seen."""
        res = self.store.resource(self.api_version, self.kind)
        if res is None:
            return ""
        path = res.path(self.api_version, None, None)
        query = watch_query(rv, WATCH_SECONDS)
        response = self.store._raw(
            "GET", path, query, None, "", (10.0, WATCH_SECONDS + 15.0), stream=True
        )
        self._response = response
        try:
            if self.store._stopping.is_set():  # close() came while the request was made
                return rv
            for line in stream_lines(response):
                event = json.loads(line)
                etype, obj = str(event.get("type")), event.get("object") or {}
                if etype == "ERROR":
                    code = int(obj.get("code") or 0)
                    raise (
                        error_from_answer(code, json.dumps(obj)) if code != 410 else Gone("expired")
                    )
                rv = _rv(obj) or rv
                if etype == "BOOKMARK":
                    continue
                obj = KubeStore._typed(obj, self.api_version, self.kind)
                if etype == "DELETED":
                    self.known.pop(_key(obj), None)
                else:
                    self.known[_key(obj)] = obj
                self.store._emit(etype, obj)
        finally:
            self._response = None
            response.release_conn()
        return rv
