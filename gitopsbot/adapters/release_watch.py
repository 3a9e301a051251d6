"""The ReleaseWatch port: each idle cluster's Helm release Secrets watched through the API's
watch, metadata only (docs/executor.md "The idle check").

Per cluster, one list then one long watch of the release's Secrets (label selector
``owner=helm,name=<release>``, Accept ``as=PartialObjectMetadata``, so no record crosses the
wire), with ``allowWatchBookmarks``, resumed from the last resourceVersion seen. Any event
(ADDED, MODIFIED, DELETED) is a change: ``take_change`` says so and ``on_change(cluster)`` (the
scheduler's ``nudge``) runs the cluster's pass at once; so does a healthy watch breaking (no
change then: the pass only learns that its idle look is due every minute again). 410 Gone (the
resourceVersion was compacted away) re-lists, and the re-list counts as a change (events may
have been missed). A watch the server ends (its ``timeoutSeconds``, 30 minutes) is resumed at
once and stays healthy. A quiet watch hears nothing at all (the real server sends no bookmark
while nothing of the resource changes), so silence is not taken for a stall: a dead peer is
found by TCP keepalive (~60 s, no request), a server that stalls a live stream by the idle
check's own look every 10 minutes. A request that fails (refused, reset, keepalive timeout,
TLS, 401/403, 5xx) makes the watch unhealthy at once and is tried again with a backoff (1 s
doubling to ``backoff_max``).

Bounded: every watch runs on ONE thread, an asyncio event loop with httpx's async streaming
(one connection per watched cluster, one thread whatever the number of clusters, plus
IO_THREADS for name resolution and token hooks: 3 threads at 1,000 clusters). Threads
with a cap would leave clusters beyond the cap on the periodic list and cost a stack each;
the event loop costs a socket and a few KB per cluster. The connection is the one the
kubernetes client uses (``kubernetes.client.Configuration`` from the cluster's kubeconfig,
in-cluster files or kubeconfigSecret, ``adapters.cluster_access``): host, CA, client
certificate and the bearer token, taken afresh at every (re)connect through the
configuration's ``refresh_api_key_hook`` (exec plugins, rotated token files). The hook may
run a plugin: it runs on asyncio's small default executor, never on the loop. Proxies of
the kubeconfig are not followed (the watch then fails and the idle check keeps its list).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import logging
import socket
import ssl
import threading
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import Any

import httpx
from kubernetes.client import Configuration

from gitopsbot.adapters.kube import METADATA_LIST
from gitopsbot.core.fleet.model import ClusterSpec
from gitopsbot.ports.release_watch import ReleaseWatch

log = logging.getLogger(__name__)

# The watch's objects as metadata only (client-go's metadata client asks the same); JSON
# after it: a server that does not know the form sends whole objects, of which only the
# metadata is read. The list before it asks as ``KubeCluster.list_metadata`` does.
METADATA_WATCH = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json"
# How long one watch request asks the server to keep the stream (then resumed, one request):
# the real server's own default is 30 to 60 minutes (--min-request-timeout 1800).
WATCH_SECONDS = 1800
# A quiet watch is silent: the real server sends no bookmark while nothing of the resource
# changes (measured on the real control plane tier: none in 200 s), so silence is no sign of a
# stall. A stream is only given up when it outlives the server's own end by this much.
READ_GRACE_SECONDS = 60.0
# A dead peer (a cluster gone, a network that drops everything) is found by TCP keepalive:
# probes after 30 s of silence, every 10 s, 3 unanswered fail the stream (~60 s), no request.
KEEPALIVE = ((30, 10, 3),)
CONNECT_TIMEOUT_SECONDS = 10.0
LIST_TIMEOUT = httpx.Timeout(CONNECT_TIMEOUT_SECONDS, read=30.0)
BACKOFF_MAX_SECONDS = 30.0
# The loop's executor for what cannot run on it: name resolution (getaddrinfo) and a token
# hook that may run an exec plugin. Small and fixed: 1 + IO_THREADS threads for any fleet.
IO_THREADS = 2


class _Gone(Exception):
    """410: the resourceVersion is too old; list again."""


class _Refused(Exception):
    """The server answered with an error status."""


@dataclass(slots=True)
class _State:
    namespace: str
    release: str
    healthy: bool = False
    changed: bool = False
    task: concurrent.futures.Future[None] | None = None
    error: str = ""
    lists: int = 0
    watches: int = 0
    events: list[str] = field(default_factory=list)  # the last few, for tests and logs


class ReleaseWatches(ReleaseWatch):
    """``follow(spec)`` starts a cluster's watch on the shared event loop; ``connect(spec)``
    gives the cluster's client configuration (``ClusterAccess`` through the app)."""

    def __init__(
        self,
        connect: Callable[[ClusterSpec], Configuration],
        *,
        on_change: Callable[[str], None] | None = None,
        watch_seconds: int = WATCH_SECONDS,
        backoff_max: float = BACKOFF_MAX_SECONDS,
    ) -> None:
        self._connect = connect
        self.on_change = on_change
        self._watch_seconds = watch_seconds
        self._read_timeout = watch_seconds + READ_GRACE_SECONDS
        self._backoff_max = backoff_max
        self._lock = threading.Lock()
        self._states: dict[str, _State] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self.requests = 0  # every list and watch request sent, for benchmarks
        self.breaks = 0  # healthy watches that failed (each woke its cluster), for /metrics

    # -- the port ---------------------------------------------------------------------------

    def follow(self, spec: ClusterSpec) -> None:
        rel = spec.release
        with self._lock:
            known = self._states.get(spec.name)
            if known is not None and (known.namespace, known.release) == (
                rel.namespace,
                rel.release_name,
            ):
                return
        try:
            configuration = self._connect(spec)
        except Exception as e:  # noqa: BLE001 - a watch that cannot start is only unhealthy
            log.info("%s: release watch not started: %s", spec.name, type(e).__name__)
            return
        self.watch(spec.name, configuration, rel.namespace, rel.release_name)

    def healthy(self, cluster: str) -> bool:
        with self._lock:
            state = self._states.get(cluster)
            return state is not None and state.healthy

    def take_change(self, cluster: str) -> bool:
        with self._lock:
            state = self._states.get(cluster)
            if state is None or not state.changed:
                return False
            state.changed = False
            return True

    # -- the watches ------------------------------------------------------------------------

    def watch(
        self, cluster: str, configuration: Configuration, namespace: str, release: str
    ) -> None:
        """Watch ``release`` in ``namespace`` over ``configuration`` as ``cluster`` (a watch
        of the cluster already running is replaced)."""
        loop = self._running_loop()
        state = _State(namespace, release)
        with self._lock:
            old = self._states.get(cluster)
            self._states[cluster] = state
        if old is not None and old.task is not None:
            old.task.cancel()
        state.task = asyncio.run_coroutine_threadsafe(
            self._run(cluster, state, configuration), loop
        )

    def counts(self) -> tuple[int, int, int]:
        """(watches healthy, watches not healthy, healthy watches that broke so far), for
        ``/metrics`` (one lock, no I/O)."""
        with self._lock:
            healthy = sum(1 for state in self._states.values() if state.healthy)
            return healthy, len(self._states) - healthy, self.breaks

    def keep_only(self, clusters: Collection[str]) -> None:
        """Stop the watches of every cluster not in ``clusters`` (a replica that gave up or
        lost a shard: its nudges would do nothing, and its sockets are the new holder's
        to open)."""
        with self._lock:
            gone = [name for name in self._states if name not in clusters]
            states = [self._states.pop(name) for name in gone]
        for state in states:
            if state.task is not None:
                state.task.cancel()

    def state(self, cluster: str) -> _State | None:
        with self._lock:
            return self._states.get(cluster)

    @staticmethod
    def threads() -> int:
        """Threads the watches run on (the loop's and its executor's), whatever their number."""
        return sum(t.name.startswith("release-watches") for t in threading.enumerate())

    def close(self) -> None:
        with self._lock:
            loop, thread = self._loop, self._thread
            states = list(self._states.values())
            self._states.clear()
            self._loop = self._thread = None
        if loop is None or thread is None:
            return
        for state in states:
            if state.task is not None:
                state.task.cancel()
        with contextlib.suppress(Exception):  # the watches' clients closed, the executor too
            asyncio.run_coroutine_threadsafe(_drained(loop), loop).result(timeout=10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
        if not thread.is_alive():
            loop.close()

    def _running_loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                loop.set_default_executor(
                    concurrent.futures.ThreadPoolExecutor(
                        IO_THREADS, thread_name_prefix="release-watches-io"
                    )
                )
                thread = threading.Thread(
                    target=loop.run_forever, name="release-watches", daemon=True
                )
                thread.start()
                self._loop, self._thread = loop, thread
            return self._loop

    async def _run(self, cluster: str, state: _State, configuration: Configuration) -> None:
        client = _client(configuration, self._read_timeout)
        path = f"/api/v1/namespaces/{state.namespace}/secrets"
        selector = f"owner=helm,name={state.release}"
        version = ""
        failures = 0
        try:
            while True:
                try:
                    hook: object = getattr(configuration, "refresh_api_key_hook", None)
                    if hook is None:
                        headers = _auth_headers(configuration)
                    else:  # may run an exec plugin: off the loop
                        headers = await asyncio.to_thread(_auth_headers, configuration)
                    if not version:
                        version = await self._list(client, path, selector, headers)
                        if state.lists:  # a re-list: events may have been missed
                            self._changed(cluster, state, "RELIST")
                        state.lists += 1
                        state.healthy, state.error = True, ""
                    version = await self._stream(cluster, state, client, path, selector,
                                                 version, headers)  # fmt: skip
                    failures = 0
                except _Gone:
                    version = ""
                except httpx.ReadTimeout:
                    continue  # a stream the server did not end: resumed at once
                except (httpx.HTTPError, _Refused, OSError, ValueError, ssl.SSLError) as e:
                    failures += 1
                    was_healthy = state.healthy
                    first = was_healthy or failures == 1
                    state.healthy, state.error = False, f"{type(e).__name__}: {e}"[:200]
                    if first:
                        log.info("%s: release watch broke (%s); the idle check lists the "
                                 "release until it is back", cluster, state.error)  # fmt: skip
                    if was_healthy:
                        # A resting cluster's next look was set for a healthy watch (10
                        # minutes): its pass now sets it for a broken one (a minute).
                        self.breaks += 1
                        self._wake(cluster)
                    await asyncio.sleep(min(self._backoff_max, 2.0 ** (failures - 1)))
        finally:
            state.healthy = False
            with contextlib.suppress(Exception):
                await client.aclose()

    async def _list(
        self, client: httpx.AsyncClient, path: str, selector: str, headers: dict[str, str]
    ) -> str:
        self.requests += 1
        try:
            response = await client.get(
                path, params={"labelSelector": selector},
                headers={**headers, "Accept": METADATA_LIST}, timeout=LIST_TIMEOUT,
            )  # fmt: skip
        except httpx.TimeoutException as e:
            raise _Refused(f"list: no answer ({type(e).__name__})") from None
        if response.status_code != 200:
            raise _Refused(f"list answered {response.status_code}")
        decoded = response.json()
        return str((decoded.get("metadata") or {}).get("resourceVersion") or "")

    async def _stream(
        self,
        cluster: str,
        state: _State,
        client: httpx.AsyncClient,
        path: str,
        selector: str,
        version: str,
        headers: dict[str, str],
    ) -> str:
        """One watch request, until the server ends it; the last resourceVersion seen."""
        params = {
            "watch": "true",
            "labelSelector": selector,
            "resourceVersion": version,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": str(self._watch_seconds),
        }
        self.requests += 1
        state.watches += 1
        request = client.build_request(
            "GET", path, params=params, headers={**headers, "Accept": METADATA_WATCH}
        )
        response = await client.send(request, stream=True)
        try:
            if response.status_code == 410:
                raise _Gone()
            if response.status_code != 200:
                raise _Refused(f"watch answered {response.status_code}")
            state.healthy, state.error = True, ""
            async for line in response.aiter_lines():
                if not line.strip():
                    continue
                event = json.loads(line)
                kind = str(event.get("type") or "")
                obj = event.get("object") or {}
                if kind == "ERROR":
                    if obj.get("code") == 410:
                        raise _Gone()
                    raise _Refused(f"watch error {obj.get('code')}: {obj.get('reason')}")
                found = str((obj.get("metadata") or {}).get("resourceVersion") or "")
                version = found or version
                if kind != "BOOKMARK":
                    self._changed(cluster, state, kind)
        finally:
            await response.aclose()
        return version

    def _changed(self, cluster: str, state: _State, kind: str) -> None:
        with self._lock:
            state.changed = True
            state.events = [*state.events[-9:], kind]
        self._wake(cluster)

    def _wake(self, cluster: str) -> None:
        if self.on_change is not None:
            try:
                self.on_change(cluster)
            except Exception:  # the watch outlives a failing listener
                log.exception("%s: release watch listener failed", cluster)


async def _drained(loop: asyncio.AbstractEventLoop) -> None:
    others = [t for t in asyncio.all_tasks(loop) if t is not asyncio.current_task()]
    await asyncio.gather(*others, return_exceptions=True)
    await loop.shutdown_default_executor()


def _client(configuration: Configuration, read_timeout: float) -> httpx.AsyncClient:
    host = str(configuration.host).rstrip("/")
    verify: ssl.SSLContext | bool = False
    if host.startswith("https:"):
        if configuration.verify_ssl:
            context = ssl.create_default_context(cafile=configuration.ssl_ca_cert or None)
        else:
            context = ssl.create_default_context()
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        if configuration.cert_file:
            context.load_cert_chain(configuration.cert_file, configuration.key_file or None)
        verify = context
    timeout = httpx.Timeout(CONNECT_TIMEOUT_SECONDS, read=read_timeout)
    limits = httpx.Limits(max_connections=2, max_keepalive_connections=1)
    transport = httpx.AsyncHTTPTransport(
        verify=verify, limits=limits, trust_env=False, socket_options=_keepalive()
    )
    return httpx.AsyncClient(base_url=host, timeout=timeout, transport=transport, trust_env=False)


def _keepalive() -> list[tuple[int, int, int]]:
    ((idle, interval, count),) = KEEPALIVE
    options = [(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)]
    for name, value in (
        ("TCP_KEEPIDLE", idle),
        ("TCP_KEEPINTVL", interval),
        ("TCP_KEEPCNT", count),
    ):
        if hasattr(socket, name):  # Linux; elsewhere the system's keepalive timing
            options.append((socket.IPPROTO_TCP, getattr(socket, name), value))
    return options


def _auth_headers(configuration: Configuration) -> dict[str, str]:
    """The bearer token as the kubernetes client would send it now (its refresh hook run)."""
    settings: Any = configuration.auth_settings()
    bearer = settings.get("BearerToken") or {}
    value = bearer.get("value")
    return {"Authorization": str(value)} if value else {}
