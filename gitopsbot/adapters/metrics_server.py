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
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, make_wsgi_app
from waitress.task import ThreadedTaskDispatcher

from gitopsbot.adapters.fleet_page import FleetPages
from gitopsbot.adapters.waitress_server import ClosableServer, ServedOnThread
from gitopsbot.core.replicas.health import Verdict

if TYPE_CHECKING:
    from _typeshed.wsgi import StartResponse, WSGIEnvironment

log = logging.getLogger("gitopsbot.metrics")

Probe = Callable[[], Verdict]


class MetricsServer(ServedOnThread[ClosableServer]):
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

    def start(self) -> MetricsServer:
        host, port = self._address

        def bind(socket_map: dict[int, Any], dispatcher: ThreadedTaskDispatcher) -> ClosableServer:
            return ClosableServer(
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

        self._serve(bind, threads=self._threads, name="metrics-server")
        return self

    @property
    def serves_fleet(self) -> bool:
        return self._fleet is not None

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
