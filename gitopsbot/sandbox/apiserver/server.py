"""The HTTP face of the emulator: routing, verbs, patches, watches, discovery, OpenAPI.

One ``ThreadingHTTPServer`` on loopback, HTTP/1.1 with keep-alive; watches stream newline-
delimited JSON events with chunked transfer encoding. Responses are JSON (a pod's log:
text/plain, pod_logs.py); request bodies may be JSON, YAML (apply patches) or protobuf
(helm's release Secrets/ConfigMaps, kubectl's imperative ``create``).
"""

from __future__ import annotations

import json
import select
import socket
import threading
import time
from collections import deque
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlsplit

import jsonpatch

from gitopsbot.sandbox.apiserver import (
    discovery,
    event_views,
    fieldsets,
    pod_logs,
    protobuf,
    tables,
)
from gitopsbot.sandbox.apiserver.errors import (
    ApiError,
    BadRequest,
    Conflict,
    Gone,
    Invalid,
    MethodNotAllowed,
    NotFound,
    UnsupportedMediaType,
)
from gitopsbot.sandbox.apiserver.merge import json_merge_patch, strategic_merge_patch
from gitopsbot.sandbox.apiserver.resources import ResourceType
from gitopsbot.sandbox.apiserver.schema import typed_patch_errors, unknown_fields
from gitopsbot.sandbox.apiserver.selectors import parse_field_selector, parse_label_selector
from gitopsbot.sandbox.apiserver.store import Event, Store, now_rfc3339

if TYPE_CHECKING:
    from gitopsbot.sandbox.apiserver.faults import Faults

Obj = dict[str, Any]
JSON = "application/json"


class _Dropped(Exception):
    """A fault rule cut this watch."""


class EmulatorHTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    allow_reuse_address = True

    def __init__(self, addr: tuple[str, int], store: Store, faults: Faults) -> None:
        self.store = store
        self.faults = faults
        self.bookmark_interval = 1.0
        # How often a quiet watch's thread wakes to see whether its client hung up (events
        # wake it at once): fleet_bench's 1,000 watches set it longer, so the emulator's own
        # wake-ups do not take the CPU the bot under measurement runs on.
        self.watch_poll_seconds = 0.5
        self.requests: deque[tuple[str, str, int]] = deque(maxlen=10_000)
        self.connections: set[socket.socket] = set()
        self.conn_lock = threading.Lock()
        self.stopping = threading.Event()
        super().__init__(addr, Handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        with self.conn_lock:
            self.connections.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        with self.conn_lock:
            self.connections.discard(request)
        super().shutdown_request(request)

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client hanging up mid-request is normal (watch cancelled, tool exited).
        pass

    def server_close(self) -> None:
        # Open watches would hold their threads (and the port's clients) past the stop.
        self.close_connections()
        super().server_close()

    def close_connections(self) -> None:
        with self.conn_lock:
            conns = list(self.connections)
        for c in conns:
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: EmulatorHTTPServer
    server_version = "gitopsbot-sandbox-apiserver"

    def setup(self) -> None:
        super().setup()
        # Headers and body go out in separate writes; without TCP_NODELAY, Nagle's algorithm
        # and the client's delayed ACK add ~40 ms to every request.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, format: str, *args: Any) -> None:
        pass  # requests are kept in server.requests instead

    def do_GET(self) -> None:
        self._handle()

    def do_POST(self) -> None:
        self._handle()

    def do_PUT(self) -> None:
        self._handle()

    def do_PATCH(self) -> None:
        self._handle()

    def do_DELETE(self) -> None:
        self._handle()

    # ------------------------------------------------------------ plumbing

    def _handle(self) -> None:
        url = urlsplit(self.path)
        self.query = {k: v[-1] for k, v in parse_qs(url.query, keep_blank_values=True).items()}
        self.url_path = url.path
        self.status_code = 0
        try:
            body = self._read_body()
            watch = self.query.get("watch") in ("true", "1")
            self._drop_after: float | None = None
            for rule in self.server.faults.matching(self.command, url.path, watch=watch):
                if rule.action == "latency":
                    time.sleep(rule.seconds)
                elif rule.action == "drop_watch":
                    self._drop_after = rule.seconds
                elif rule.action == "error":
                    raise _fault_error(rule.status, rule.retry_after)
            self._route(body)
        except (BrokenPipeError, ConnectionResetError, _Dropped):
            self.close_connection = True
        except Exception as e:  # noqa: BLE001 - a bug must answer 500, not kill the thread
            if self.status_code:  # a watch stream already started: all we can do is hang up
                self.close_connection = True
                return
            err = (
                e
                if isinstance(e, ApiError)
                else ApiError(500, "InternalError", f"emulator error: {type(e).__name__}: {e}")
            )
            headers = {"Retry-After": str(err.retry_after)} if err.retry_after is not None else {}
            try:
                self._send(err.code, err.status(), headers=headers)
            except OSError:
                self.close_connection = True
        finally:
            self.server.requests.append((self.command, self.path, self.status_code))

    def _read_body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            out = b""
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    self.rfile.readline()
                    return out
                out += self.rfile.read(size)
                self.rfile.readline()
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n) if n else b""

    def _send(
        self,
        code: int,
        body: Any,
        *,
        content_type: str = JSON,
        headers: dict[str, str] | None = None,
    ) -> None:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.status_code = code
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def _parse(self, body: bytes, *, yaml_ok: bool = False) -> Any:
        ctype = (self.headers.get("Content-Type") or JSON).split(";")[0].strip()
        if ctype == "application/vnd.kubernetes.protobuf":
            return protobuf.decode(body)
        if not body:
            return None
        try:
            return json.loads(body)
        except ValueError:
            if not yaml_ok:
                raise BadRequest("the request body is not valid JSON") from None
        from ruamel.yaml import YAML
        from ruamel.yaml.error import YAMLError

        try:
            return YAML(typ="safe").load(body.decode())
        except YAMLError as e:
            raise BadRequest(f"the request body is not valid YAML: {e}") from None

    # ------------------------------------------------------------ routing

    def _route(self, body: bytes) -> None:
        path = self.url_path.rstrip("/") or "/"
        parts = [p for p in path.split("/") if p]
        if parts[:3] == ["sandbox", "v1", "faults"]:
            self._faults(parts[3:], body)
            return
        if self.command == "GET":
            fixed = self._fixed_get(path)
            if fixed:
                return
        if len(parts) >= 2 and parts[0] == "api":
            group, version, rest = "", parts[1], parts[2:]
        elif len(parts) >= 3 and parts[0] == "apis":
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            raise NotFound(f"the server could not find the requested resource ({path})")
        if not rest:
            if self.command != "GET":
                raise MethodNotAllowed("method not allowed")
            self._send(200, discovery.resource_list(self.server.store.registry, group, version))
            return
        reg = self.server.store.registry
        namespace: str | None = None
        if rest[0] == "namespaces" and len(rest) >= 3:
            rt_ns = reg.by_plural(group, version, rest[2])
            if rt_ns is not None and rt_ns.namespaced:
                namespace, rest = rest[1], rest[2:]
        rt = reg.by_plural(group, version, rest[0])
        if rt is None or len(rest) > 3:
            raise NotFound(f"the server could not find the requested resource ({path})")
        name = rest[1] if len(rest) > 1 else None
        sub = rest[2] if len(rest) > 2 else None
        if rt.kind == "Pod" and sub == "log" and name is not None and namespace is not None:
            if self.command != "GET":
                raise MethodNotAllowed(f"{self.command} is not supported on pods/log")
            pod = self.server.store.get_stored(rt, namespace, name)
            text = pod_logs.pod_log(pod, self.query)
            self._send(200, text.encode(), content_type="text/plain")
            return
        if (
            sub is not None
            and sub not in rt.subresources
            and not (rt.kind == "Namespace" and sub == "finalize")
        ):
            raise NotFound(f"the server could not find the requested resource ({path})")
        if rt.namespaced and namespace is None and self.command not in ("GET",):
            raise NotFound(f"the server could not find the requested resource ({path})")
        api_version = f"{group}/{version}" if group else version
        Verb(self, rt, api_version, namespace, name, sub).run(body)

    def _faults(self, rest: list[str], body: bytes) -> None:
        """The fault rules over HTTP, for a sandbox running in another process."""
        faults = self.server.faults
        if self.command == "GET" and not rest:
            self._send(200, {"rules": [r.describe() for r in faults.rules]})
        elif self.command == "POST" and not rest:
            try:
                rule = faults.add_from_json(json.loads(body or b"null"))
            except (ValueError, TypeError) as e:
                raise BadRequest(f"bad fault rule: {e}") from None
            self._send(201, rule.describe())
        elif self.command == "DELETE" and not rest:
            faults.clear()
            self._send(200, {"rules": []})
        elif self.command == "DELETE" and len(rest) == 1 and rest[0].isdigit():
            if not faults.remove_id(int(rest[0])):
                raise NotFound(f"no fault rule {rest[0]}")
            self._send(200, {"rules": [r.describe() for r in faults.rules]})
        else:
            raise MethodNotAllowed(f"{self.command} is not supported on /sandbox/v1/faults")

    def _fixed_get(self, path: str) -> bool:
        store = self.server.store
        accept = self.headers.get("Accept") or ""
        if path == "/version":
            self._send(200, discovery.VERSION)
        elif path in ("/healthz", "/readyz", "/livez"):
            self._send(200, b"ok", content_type="text/plain")
        elif path in ("/api", "/apis"):
            aggregated = discovery.wants_aggregated(accept)
            if aggregated:
                body = discovery.aggregated(
                    store.registry, legacy=path == "/api", version=aggregated
                )
                self._send(200, body, content_type=discovery.aggregated_content_type(aggregated))
            elif path == "/api":
                self._send(200, discovery.API_VERSIONS)
            else:
                self._send(200, discovery.group_list(store.registry))
        elif path.startswith("/apis/") and path.count("/") == 2:
            self._send(200, discovery.group(store.registry, path.split("/")[2]))
        elif path == "/openapi/v2":
            # An empty document with the content type Go can parse: no client-side schema
            # validation, no failure. The '@' of the Accept form is rejected by Go's parser.
            if "protobuf" in accept:
                self._send(200, b"", content_type=discovery.OPENAPI_V2_PROTOBUF)
            else:
                self._send(
                    200,
                    {
                        "swagger": "2.0",
                        "info": {"title": "Kubernetes", "version": "v1.33.0"},
                        "paths": {},
                        "definitions": {},
                    },
                )
        elif path == "/openapi/v3":
            self._send(200, {"paths": {}})
        else:
            return False
        return True


def _fault_error(status: int, retry_after: int | None) -> ApiError:
    if status == 409:
        return Conflict(
            "injected fault: the object has been modified; please apply your "
            "changes to the latest version and try again"
        )
    if status == 429:
        return ApiError(
            429,
            "TooManyRequests",
            "injected fault: too many requests",
            retry_after=retry_after if retry_after is not None else 1,
        )
    reason = {503: "ServiceUnavailable", 504: "Timeout"}.get(status, "InternalError")
    return ApiError(status, reason, f"injected fault: {reason}", retry_after=retry_after)


class Verb:
    """One resource request: the verb is decided by method, name and ?watch."""

    def __init__(
        self,
        h: Handler,
        rt: ResourceType,
        api_version: str,
        namespace: str | None,
        name: str | None,
        sub: str | None,
    ) -> None:
        self.h = h
        self.rt = rt
        self.av = api_version
        self.ns = namespace
        self.name = name
        self.sub = sub
        self.store = h.server.store
        self.q = h.query
        self.dry_run = self.q.get("dryRun") == "All"

    def manager(self, default_from_agent: bool = True) -> str:
        m = self.q.get("fieldManager")
        if m:
            return m
        agent = self.h.headers.get("User-Agent") or "unknown"
        return agent.split("/")[0] if default_from_agent else ""

    def out(self, obj: Obj) -> Obj:
        if self.sub == "scale":
            return self.scale(obj)
        return {**obj, "apiVersion": self.av}

    def run(self, body: bytes) -> None:
        m = self.h.command
        if m == "GET":
            if self.name is None:
                if self.h.query.get("watch") in ("true", "1"):
                    self.watch()
                else:
                    self.list_objects()
            elif self.sub is None and tables.wants_table(self.h.headers.get("Accept") or ""):
                obj = self.store.get_stored(self.rt, self.ns, self.name)
                self.h._send(200, tables.table(self.rt, [obj], self.store.resource_version))
            else:
                self.h._send(200, self.out(self.store.get_stored(self.rt, self.ns, self.name)))
        elif m == "POST" and self.name is None:
            self.create(self.h._parse(body))
        elif m == "PUT" and self.name is not None:
            self.update(self.h._parse(body))
        elif m == "PATCH" and self.name is not None:
            self.patch(body)
        elif m == "DELETE":
            if self.name is None:
                self.delete_collection()
            else:
                obj = self.store.remove(self.rt, self.ns, self.name, dry_run=self.dry_run)
                self.h._send(200, self.out(obj))
        else:
            raise MethodNotAllowed(f"{m} is not supported on this path")

    # ------------------------------------------------------------ read

    def selector(self) -> Callable[[Obj], bool] | None:
        ls = self.q.get("labelSelector")
        fs = self.q.get("fieldSelector")
        lsel = parse_label_selector(ls) if ls else None
        fsel = parse_field_selector(fs) if fs else None
        if lsel is None and fsel is None:
            return None

        def match(o: Obj) -> bool:
            return (lsel is None or lsel.matches(o)) and (fsel is None or fsel.matches(o))

        return match

    def list_objects(self) -> None:
        items, rv = self.store.snapshot(self.rt, self.ns, self.selector())
        if (self.rt.group, self.rt.kind) == ("", "Event"):  # events.k8s.io ones too (real)
            new_rt = self.store.registry.get("events.k8s.io", "Event")
            new, rv = self.store.snapshot(new_rt, self.ns, None)
            items = event_views.with_new_events(items, new, self.selector())
        accept = self.h.headers.get("Accept") or ""
        if tables.wants_table(accept):
            self.h._send(200, tables.table(self.rt, items, rv))
            return
        if tables.wants_metadata(accept):
            self.h._send(200, tables.metadata_list(items, rv))
            return
        self.h._send(
            200,
            {
                "kind": self.rt.kind + "List",
                "apiVersion": self.av,
                "metadata": {"resourceVersion": str(rv)},
                "items": [self.out(o) for o in items],
            },
        )

    def watch(self) -> None:
        h = self.h
        match = self.selector() or (lambda _o: True)
        rv_param = self.q.get("resourceVersion", "")
        try:
            timeout = float(self.q.get("timeoutSeconds") or 1800)
            resume = int(rv_param) if rv_param not in ("", "0") else None
        except ValueError:
            raise BadRequest("invalid timeoutSeconds or resourceVersion") from None
        deadline = time.monotonic() + timeout
        drop_at = time.monotonic() + h._drop_after if h._drop_after is not None else None
        bookmarks = self.q.get("allowWatchBookmarks") in ("true", "1")
        initial = self.q.get("sendInitialEvents") in ("true", "1")
        h.status_code = 200
        h.send_response(200)
        h.send_header("Content-Type", JSON)
        h.send_header("Transfer-Encoding", "chunked")
        h.end_headers()

        meta_only = tables.wants_metadata_object(self.h.headers.get("Accept") or "")

        def send(etype: str, obj: Obj) -> None:
            if meta_only and etype not in ("BOOKMARK", "ERROR"):
                obj = tables.partial_metadata(obj)
            line = json.dumps({"type": etype, "object": obj}).encode() + b"\n"
            h.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
            h.wfile.flush()

        def bookmark(rv: int, *, initial_end: bool = False) -> None:
            meta: Obj = {"resourceVersion": str(rv)}
            if initial_end:
                meta["annotations"] = {"k8s.io/initial-events-end": "true"}
            send("BOOKMARK", {"kind": self.rt.kind, "apiVersion": self.av, "metadata": meta})

        try:
            if initial or resume is None:
                items, last = self.store.snapshot(self.rt, self.ns, match)
                for o in items:
                    send("ADDED", self.out(o))
                if initial:
                    bookmark(last, initial_end=True)
            else:
                last = resume
                self.store.events_since(last)  # Gone if compacted
            next_bookmark = time.monotonic() + self.h.server.bookmark_interval
            cond = self.store.changed
            while True:
                now = time.monotonic()
                if now >= deadline or h.server.stopping.is_set() or self.store.closed:
                    break
                if drop_at is not None and now >= drop_at:
                    raise _Dropped()
                if self._client_gone():
                    h.close_connection = True
                    return
                wait = min(deadline, next_bookmark, drop_at or deadline) - now
                with cond:
                    if self.store.resource_version <= last:
                        cond.wait(timeout=max(0.0, min(wait, h.server.watch_poll_seconds)))
                events = self.store.events_since(last)
                for ev in events:
                    last = ev.rv
                    out = self.filter(ev, match)
                    if out is not None:
                        send(out[0], out[1])
                if bookmarks and time.monotonic() >= next_bookmark:
                    bookmark(last)
                    next_bookmark = time.monotonic() + self.h.server.bookmark_interval
        except Gone as e:
            send("ERROR", e.status())
        except _Dropped:
            # Cut without the closing chunk, as a broken connection looks to a client.
            h.close_connection = True
            h.wfile.flush()
            raise
        h.wfile.write(b"0\r\n\r\n")
        h.wfile.flush()

    def _client_gone(self) -> bool:
        # A client that hangs up on a quiet watch would otherwise hold its thread until
        # timeoutSeconds; a readable socket with nothing to read means it closed.
        conn = self.h.connection
        try:
            # poll, not select: select() refuses a descriptor past 1,024, which a server
            # holding 1,000 watches has (each watch then broke at once, #29).
            waiter = select.poll()
            waiter.register(conn, select.POLLIN)
            readable = waiter.poll(0)
            return bool(readable) and conn.recv(1, socket.MSG_PEEK) == b""
        except OSError:
            return True

    def filter(self, ev: Event, match: Callable[[Obj], bool]) -> tuple[str, Obj] | None:
        if ev.group != self.rt.group or ev.kind != self.rt.kind:
            return None
        if self.ns and ev.obj["metadata"].get("namespace") != self.ns:
            return None
        now_in = match(ev.obj)
        if ev.type == "MODIFIED" and ev.old is not None:
            was_in = match(ev.old)
            if now_in and not was_in:
                return "ADDED", self.out(ev.obj)
            if was_in and not now_in:
                return "DELETED", self.out(ev.obj)
        return (ev.type, self.out(ev.obj)) if now_in else None

    # ------------------------------------------------------------ write

    def _check_body(self, obj: Any) -> Obj:
        if not isinstance(obj, dict):
            raise BadRequest("the request body must be a JSON object")
        kind = obj.get("kind")
        if kind == "DeleteOptions":
            return obj
        if kind and kind != self.rt.kind:
            raise BadRequest(f"the body's kind {kind!r} does not match {self.rt.kind!r}")
        meta = obj.setdefault("metadata", {})
        if self.rt.namespaced:
            body_ns = meta.get("namespace")
            if body_ns and self.ns and body_ns != self.ns:
                raise BadRequest(
                    "the namespace of the provided object does not match the "
                    "namespace sent on the request"
                )
            meta["namespace"] = self.ns
        if self.name is not None and meta.get("name") and meta["name"] != self.name:
            raise BadRequest("the name of the object does not match the name on the URL")
        if self.name is not None:
            meta["name"] = self.name
        self._strict_fields(obj)
        return obj

    def _strict_fields(self, obj: Obj) -> None:
        # fieldValidation=Strict (kubectl's default, helm 4's apply): fields the CRD schema
        # would prune are an error instead, as on the real server.
        if self.q.get("fieldValidation") != "Strict" or not self.rt.custom:
            return
        schema = self.store.registry.schema(self.rt, self.av.rpartition("/")[2])
        unknown = unknown_fields(obj, schema)
        if unknown:
            listed = ", ".join(f'unknown field "{u}"' for u in unknown)
            raise BadRequest(
                f"{self.rt.kind} in version {self.av!r} cannot be handled as a "
                f"{self.rt.kind}: strict decoding error: {listed}"
            )

    def _strict_build(self, build: Callable[[Obj], Obj]) -> Callable[[Obj], Obj]:
        def checked(old: Obj) -> Obj:
            new = build(old)
            self._strict_fields(new)
            return new

        return checked

    def create(self, obj: Any) -> None:
        obj = self._check_body(obj)
        obj["apiVersion"] = self.av
        stored = self.store.create_from_request(
            self.rt, obj, manager=self.manager(), dry_run=self.dry_run
        )
        self.h._send(201, self.out(stored))

    def update(self, obj: Any) -> None:
        obj = self._check_body(obj)
        if self.sub == "scale":
            replicas = (obj.get("spec") or {}).get("replicas", 0)
            self._scale_to(replicas, (obj.get("metadata") or {}).get("resourceVersion"))
            return
        obj["apiVersion"] = self.av
        stored = self.store.modify(
            self.rt,
            self.ns,
            self.name or "",
            lambda _old: obj,
            manager=self.manager(),
            subresource=self.sub,
            dry_run=self.dry_run,
        )
        self.h._send(200, self.out(stored))

    def _scale_to(self, replicas: Any, rv: str | None) -> None:
        def build(old: Obj) -> Obj:
            if rv:
                old["metadata"]["resourceVersion"] = rv
            old.setdefault("spec", {})["replicas"] = int(replicas)
            return old

        stored = self.store.modify(
            self.rt, self.ns, self.name or "", build, manager=self.manager(), dry_run=self.dry_run
        )
        self.h._send(200, self.scale(stored))

    def scale(self, obj: Obj) -> Obj:
        meta = obj["metadata"]
        sel = ((obj.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
        return {
            "kind": "Scale",
            "apiVersion": "autoscaling/v1",
            "metadata": {
                k: meta[k]
                for k in ("name", "namespace", "uid", "resourceVersion", "creationTimestamp")
                if k in meta
            },
            "spec": {"replicas": (obj.get("spec") or {}).get("replicas", 0)},
            "status": {
                "replicas": (obj.get("status") or {}).get("replicas", 0),
                "selector": ",".join(f"{k}={v}" for k, v in sel.items()),
            },
        }

    def patch(self, body: bytes) -> None:
        ctype = (self.h.headers.get("Content-Type") or "").split(";")[0].strip()
        if ctype == "application/apply-patch+yaml":
            self.apply(self.h._parse(body, yaml_ok=True))
            return
        patch = self.h._parse(body)
        if ctype == "application/json-patch+json":
            if not isinstance(patch, list):
                raise BadRequest("a JSON patch must be a list of operations")

            def build(old: Obj) -> Obj:
                try:
                    return jsonpatch.apply_patch(old, patch)  # type: ignore[no-any-return]
                except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException) as e:
                    raise Invalid(f"the JSON patch could not be applied: {e}") from None
        elif ctype == "application/merge-patch+json":

            def build(old: Obj) -> Obj:
                return json_merge_patch(old, patch)  # type: ignore[no-any-return]
        elif ctype == "application/strategic-merge-patch+json":
            if self.rt.custom:
                raise UnsupportedMediaType(
                    "strategic merge patch is not supported for custom resources; use a JSON "
                    "merge patch or server-side apply"
                )

            def build(old: Obj) -> Obj:
                return strategic_merge_patch(old, patch)  # type: ignore[no-any-return]
        else:
            raise UnsupportedMediaType(f"the patch content type {ctype!r} is not supported")
        if self.sub == "scale":
            scale = json_merge_patch(
                self.scale(self.store.get_stored(self.rt, self.ns, self.name or "")), patch
            )
            self._scale_to(scale["spec"]["replicas"], None)
            return
        stored = self.store.modify(
            self.rt,
            self.ns,
            self.name or "",
            self._strict_build(build),
            manager=self.manager(),
            subresource=self.sub,
            dry_run=self.dry_run,
        )
        self.h._send(200, self.out(stored))

    def apply(self, applied: Any) -> None:
        if not isinstance(applied, dict):
            raise BadRequest("the apply configuration must be an object")
        manager = self.q.get("fieldManager")
        if not manager:
            raise Invalid(
                "PatchOptions.meta.k8s.io is invalid: fieldManager: Required value:"
                " is required for apply patch"
            )
        force = self.q.get("force") in ("true", "1")
        applied = self._check_body(applied)
        applied.get("metadata", {}).pop("managedFields", None)
        if applied.get("apiVersion") and applied["apiVersion"] != self.av:
            raise BadRequest(f"apiVersion {applied['apiVersion']!r} does not match {self.av!r}")
        if self.rt.custom:
            schema = self.store.registry.schema(self.rt, self.av.rpartition("/")[2])
            mistyped = typed_patch_errors(applied, schema)
            if mistyped:
                where = f"{self.ns}/{self.name}" if self.ns else str(self.name)
                gvk = f"{self.av}, Kind={self.rt.kind}"
                raise ApiError(  # no reason: the real server gives none here
                    500,
                    "",
                    f"failed to create typed patch object ({where}; {gvk}): {mistyped[0]}",
                )
        stamp = now_rfc3339()

        def apply_to(old: Obj | None) -> tuple[Obj, list[Obj]]:
            return fieldsets.server_side_apply(
                old,
                applied,
                self.rt,
                manager=manager,
                force=force,
                subresource=self.sub,
                api_version=self.av,
                time=stamp,
            )

        try:
            self.store.get_stored(self.rt, self.ns, self.name or "")
        except NotFound:
            new, mf = apply_to(None)
            new["apiVersion"] = self.av
            new["kind"] = self.rt.kind
            new.setdefault("metadata", {})["managedFields"] = mf
            new["metadata"]["name"] = self.name
            if self.rt.namespaced:
                new["metadata"]["namespace"] = self.ns
            stored = self.store.create_from_request(
                self.rt, new, manager=manager, dry_run=self.dry_run
            )
            self.h._send(201, self.out(stored))
            return
        result: dict[str, list[Obj]] = {}

        def build(old: Obj) -> Obj:
            new, mf = apply_to(old)
            result["mf"] = mf
            rv = (applied.get("metadata") or {}).get("resourceVersion")
            new["metadata"]["resourceVersion"] = rv or old["metadata"]["resourceVersion"]
            return new

        stored = self.store.modify(
            self.rt,
            self.ns,
            self.name or "",
            build,
            manager=manager,
            subresource=self.sub,
            dry_run=self.dry_run,
            operation="Apply",
            managed=lambda _o, _n: result["mf"],
        )
        self.h._send(200, self.out(stored))

    def delete_collection(self) -> None:
        items, _ = self.store.snapshot(self.rt, self.ns, self.selector())
        gone = []
        for o in items:
            meta = o["metadata"]
            try:
                gone.append(
                    self.store.remove(
                        self.rt, meta.get("namespace"), meta["name"], dry_run=self.dry_run
                    )
                )
            except NotFound:
                continue
        rv = self.store.resource_version
        self.h._send(
            200,
            {
                "kind": self.rt.kind + "List",
                "apiVersion": self.av,
                "metadata": {"resourceVersion": str(rv)},
                "items": [self.out(o) for o in gone],
            },
        )
