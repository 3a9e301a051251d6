"""The metrics and health server: ``/metrics``, ``/healthz`` and ``/readyz`` on one port.

One waitress server (the webhook receiver's server, ``adapters.webhooks`` says why waitress),
on its own port so the webhook Service faces the forge and this one only the cluster's
Prometheus and kubelet. ``/metrics`` is prometheus_client's own WSGI application over the
bot's registry (it answers the text format, OpenMetrics when asked, and gzip); the two health
paths answer ``200 ok`` or ``503`` with a one-line plain-text reason (docs/metrics.md).
With ``fleet``, the read-only fleet page is served under ``/fleet`` too (``adapters.fleet_page``,
docs/fleet-page.md): off by default, so the port's surface is the probes' and Prometheus'.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, Protocol, cast

from prometheus_client import CollectorRegistry, make_wsgi_app
from waitress.channel import HTTPChannel
from waitress.server import TcpWSGIServer
from waitress.task import ThreadedTaskDispatcher

from gitopsbot.adapters.fleet_page import FleetPages
from gitopsbot.core.replicas.health import Verdict

if TYPE_CHECKING:
    from _typeshed.wsgi import StartResponse, WSGIEnvironment

log = logging.getLogger("gitopsbot.metrics")

Probe = Callable[[], Verdict]


class MetricsServer:
    """``with MetricsServer(registry, alive, ready) as s: s.url`` → http://127.0.0.1:PORT."""

    def __init__(
        self,
        registry: CollectorRegistry,
        alive: Probe,
        ready: Probe,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        threads: int = 2,
        fleet: FleetPages | None = None,
    ) -> None:
        self._metrics = make_wsgi_app(registry)
        self._fleet = fleet
        self._probes = {"/healthz": alive, "/readyz": ready}
        self._address = (host, port)
        self._threads = threads
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> MetricsServer:
        """Bind (an ``OSError`` for a taken port) and serve on a daemon thread."""
        host, port = self._address
        socket_map: dict[int, Any] = {}
        dispatcher = ThreadedTaskDispatcher()  # started only once bound (see webhooks.py)
        try:
            server = _Server(
                self._wsgi,
                map=socket_map,
                dispatcher=dispatcher,
                host=host,
                port=port,
                threads=self._threads,
                ident="gitopsbot",
                expose_tracebacks=False,
                channel_timeout=30,
                # select() stops at descriptor 1,024; a replica of 1,000 clusters holds
                # thousands of sockets, and /metrics died with it (#29, fleet_bench).
                asyncore_use_poll=True,
            )
        except BaseException:
            for opened in list(socket_map.values()):
                opened.close()
            raise
        dispatcher.set_thread_count(self._threads)
        self._server = server
        self._thread = threading.Thread(target=server.run, name="metrics-server", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        server, thread = self._server, self._thread
        self._server = self._thread = None
        if server is None:
            return
        if thread is not None and thread.is_alive():
            # Closed on the I/O thread itself: the loop ends once nothing is left open.
            try:
                cast("_Trigger", server.trigger).pull_trigger(server.close_everything)
            except OSError:  # the trigger's pipe is already gone: close here
                server.close_everything()
            thread.join(5)
        else:
            server.close_everything()
        server.task_dispatcher.shutdown(cancel_pending=True, timeout=5)

    def __enter__(self) -> MetricsServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def serves_fleet(self) -> bool:
        return self._fleet is not None

    @property
    def url(self) -> str:
        assert self._server is not None and self._server.socket is not None, "not serving"
        host, port = self._server.socket.getsockname()[:2]
        return f"http://{host}:{port}"

    def _wsgi(self, environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        path = str(environ.get("PATH_INFO", ""))
        if path == "/metrics":
            answer: Iterable[bytes] = self._metrics(environ, start_response)
            return answer
        if self._fleet is not None and self._fleet.serves(path):
            return self._fleet(environ, start_response)
        probe = self._probes.get(path)
        if probe is None:
            return _text(start_response, "404 Not Found", "try /metrics, /healthz or /readyz")
        try:
            verdict = probe()
        except Exception as e:  # a probe that breaks is a failing probe, never a traceback
            log.exception("%s failed", path)
            verdict = Verdict(False, f"the check failed: {type(e).__name__}")
        status = "200 OK" if verdict.ok else "503 Service Unavailable"
        return _text(start_response, status, verdict.reason)


class _Trigger(Protocol):
    """What the server's trigger is (the stub types it as int)."""

    def pull_trigger(self, thunk: Callable[[], object] | None = None) -> None: ...


class _Server(TcpWSGIServer):
    def close_everything(self) -> None:
        for channel in list(cast("dict[int, HTTPChannel]", self.active_channels).values()):
            channel.handle_close()
        self.close()


def _text(start_response: StartResponse, status: str, text: str) -> list[bytes]:
    body = (text + "\n").encode()
    start_response(
        status,
        [
            ("Content-Type", "text/plain; charset=utf-8"),
            ("Content-Length", str(len(body))),
            ("Cache-Control", "no-store"),
        ],
    )
    return [body]
