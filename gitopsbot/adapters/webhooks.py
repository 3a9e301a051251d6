"""The webhook receiver: verifies deliveries, answers 202 at once, and nudges the loop.

A stdlib HTTP server in a daemon thread, listening on ``POST /webhooks/<provider>``
(github, gitlab, gitea). It never does work for a delivery beyond verifying and parsing it:
the answer goes out first (GitHub gives up after 10 s and never redelivers), then
``nudge(event)`` is called, which should only wake the reconcile loop. Polling remains the
safety net. Rejected deliveries (401: unsigned, bad signature, no secret configured) are
logged with provider, event, delivery id and reason, never with their body.
"""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from gitopsbot.core.webhook_events import (
    PayloadError,
    WebhookEvent,
    WebhookProvider,
    delivery_id,
    event_name,
    parse,
    verify,
)

log = logging.getLogger("gitopsbot.webhooks")

MAX_BODY = 25 * 1024 * 1024  # GitHub caps payloads at 25 MB
Nudge = Callable[[WebhookEvent], None]


@dataclass(slots=True)
class WebhookStats:
    accepted: int = 0
    ignored: int = 0
    rejected: int = 0


class WebhookReceiver:
    """``with WebhookReceiver({"github": secret}, nudge) as rx: rx.url`` → http://127.0.0.1:PORT."""

    def __init__(
        self,
        secrets: Mapping[str, str],
        nudge: Nudge,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        self._secrets = {WebhookProvider(k): v for k, v in secrets.items()}
        self._nudge = nudge
        self._address = (host, port)
        self._server: ThreadingHTTPServer | None = None
        self.stats = WebhookStats()
        self._lock = threading.Lock()

    def start(self) -> WebhookReceiver:
        self._server = ThreadingHTTPServer(self._address, _handler_for(self))
        self._server.daemon_threads = True
        threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True
        ).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> WebhookReceiver:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        assert self._server is not None, "receiver not started"
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    # -- one delivery ----------------------------------------------------------------------
    def judge(
        self, path: str, headers: Mapping[str, str], body: bytes
    ) -> tuple[int, str, WebhookEvent | None]:
        """(HTTP status, short reason, event to nudge with) for one delivery."""
        name = path.rstrip("/").rsplit("/", 1)[-1]
        try:
            provider = WebhookProvider(name)
        except ValueError:
            return 404, "unknown webhook path", None
        reason = verify(provider, headers, body, self._secrets.get(provider, ""))
        event_id = delivery_id(provider, headers)
        meta = f"{provider.value} event={event_name(provider, headers)!r} delivery={event_id!r}"
        if reason:
            with self._lock:
                self.stats.rejected += 1
            log.warning("webhook rejected: %s: %s", meta, reason)  # never the body
            return 401, reason, None
        try:
            event = parse(provider, headers, body)
        except PayloadError as err:
            with self._lock:
                self.stats.rejected += 1
            log.warning("webhook rejected: %s: %s", meta, err)
            return 400, str(err), None
        with self._lock:
            if event is None:
                self.stats.ignored += 1
            else:
                self.stats.accepted += 1
        log.info("webhook accepted: %s%s", meta, "" if event else " (ignored)")
        return 202, "accepted", event

    def deliver(self, event: WebhookEvent) -> None:
        try:
            self._nudge(event)
        except Exception:  # a failing nudge must not kill the receiver thread
            log.exception("webhook nudge failed for %s %s", event.provider, event.kind)


def _handler_for(rx: WebhookReceiver) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            """Quiet: the receiver logs each delivery itself, without bodies."""

        def setup(self) -> None:
            super().setup()
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            if length > MAX_BODY:
                self._answer(413, "payload too large")
                self.close_connection = True
                return
            body = self.rfile.read(length) if length else b""
            headers = {k.lower(): v for k, v in self.headers.items()}
            status, reason, event = rx.judge(self.path, headers, body)
            self._answer(status, reason)
            if event is not None:
                rx.deliver(event)  # after the answer is out

        def do_GET(self) -> None:
            self._answer(405, "POST webhooks here")

        def _answer(self, status: int, reason: str) -> None:
            payload = reason.encode() + b"\n"
            self.send_response(status)
            self.send_header("Content-Type", "text/plain; charset=utf-8")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)
            self.wfile.flush()

    return Handler
