"""A Prometheus-compatible HTTP server on loopback for tests and the sandbox.

Serves ``GET /api/v1/query`` and ``GET /api/v1/alerts`` in Prometheus's JSON format
(``{"status": "success", "data": {"resultType": ..., "result": ...}}``; errors as
``{"status": "error", "errorType": ..., "error": ...}``) with answers the caller sets per
query string: instant vectors, scalars, matrices, Prometheus errors, bare HTTP failures,
slow answers. A query nobody set answers an empty vector, as Prometheus does for a series
that does not exist. With ``token`` set, a request without ``Authorization: Bearer <token>``
gets 401. Every request is recorded (path, query, Authorization header) for assertions.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self
from urllib.parse import parse_qs, urlsplit

from gitopsbot.sandbox.service import HTTPService

log = logging.getLogger(__name__)

_NOW = 1_700_000_000.0  # a fixed evaluation timestamp: answers are reproducible


@dataclass(frozen=True)
class Answer:
    """One canned answer: HTTP status, JSON body (or raw bytes), delay before it."""

    status: int = 200
    body: Any = None
    raw: bytes | None = None
    delay: float = 0.0


@dataclass(frozen=True)
class Request:
    path: str
    query: str
    authorization: str


def _ok(data: Any) -> Any:
    return {"status": "success", "data": data}


def _sample(labels: dict[str, str], value: float) -> Any:
    return {"metric": dict(labels), "value": [_NOW, _text(value)]}


def _text(value: float) -> str:
    # Prometheus formats special values as Go does.
    if value != value:
        return "NaN"
    if value in (float("inf"), float("-inf")):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value)) if value != int(value) else str(int(value))


@dataclass
class PromServer(HTTPService):
    """Serves at ``.url`` between ``start()`` and ``stop()`` (or as a context manager)."""

    token: str | None = None
    host: str = "127.0.0.1"
    answers: dict[str, Answer] = field(default_factory=dict)
    alert_list: list[Any] = field(default_factory=list)
    alerts_answer: Answer | None = None
    requests: list[Request] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    # -- what to answer --

    def vector(self, query: str, *samples: tuple[dict[str, str], float]) -> None:
        body = _ok({"resultType": "vector", "result": [_sample(lb, v) for lb, v in samples]})
        self.answers[query] = Answer(body=body)

    def scalar(self, query: str, value: float) -> None:
        self.answers[query] = Answer(
            body=_ok({"resultType": "scalar", "result": [_NOW, _text(value)]})
        )

    def matrix(self, query: str, labels: dict[str, str], *values: float) -> None:
        points = [[_NOW - 15 * i, _text(v)] for i, v in enumerate(values)]
        body = _ok({"resultType": "matrix", "result": [{"metric": labels, "values": points}]})
        self.answers[query] = Answer(body=body)

    def error(self, query: str, error_type: str, error: str, *, status: int = 400) -> None:
        """Prometheus's own error answer (``bad_data`` 400, ``execution`` 422,
        ``timeout``/``unavailable`` 503, ``internal`` 500)."""
        body = {"status": "error", "errorType": error_type, "error": error}
        self.answers[query] = Answer(status=status, body=body)

    def http(self, query: str, status: int, raw: bytes = b"") -> None:
        """A bare HTTP answer (a proxy's 502 page, garbage with 200)."""
        self.answers[query] = Answer(status=status, raw=raw)

    def slow(self, query: str, seconds: float) -> None:
        """The query's answer (empty vector if unset) after ``seconds``."""
        old = self.answers.get(query, Answer(body=_ok({"resultType": "vector", "result": []})))
        self.answers[query] = Answer(old.status, old.body, old.raw, seconds)

    def alert(self, labels: dict[str, str], *, state: str = "firing", value: float = 1) -> None:
        self.alert_list.append(
            {
                "labels": dict(labels),
                "annotations": {"summary": labels.get("alertname", "")},
                "state": state,
                "activeAt": "2023-11-14T22:13:20Z",
                "value": _text(value),
            }
        )

    # -- serving --

    def start(self) -> Self:
        if self.serving:
            return self
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                server._serve(self)

            def log_message(self, format: str, *args: Any) -> None:
                log.debug("prometheus: %s", format % args)

        httpd = ThreadingHTTPServer((self.host, 0), Handler)
        # A slow answer still sleeping must not hold up stop().
        httpd.block_on_close = False
        self.serve_http(httpd, name="prometheus", poll_interval=0.05)
        return self

    def _answer(self, path: str, query: str) -> Answer:
        if path == "/api/v1/query":
            if not query:
                return Answer(
                    400, {"status": "error", "errorType": "bad_data", "error": "no query"}
                )
            empty = _ok({"resultType": "vector", "result": []})
            return self.answers.get(query, Answer(body=empty))
        if path == "/api/v1/alerts":
            return self.alerts_answer or Answer(body=_ok({"alerts": list(self.alert_list)}))
        return Answer(404, raw=b"404 page not found\n")

    def _serve(self, handler: BaseHTTPRequestHandler) -> None:
        parts = urlsplit(handler.path)
        query = (parse_qs(parts.query).get("query") or [""])[0]
        auth = handler.headers.get("Authorization", "")
        with self._lock:
            self.requests.append(Request(parts.path, query, auth))
        if self.token is not None and auth != f"Bearer {self.token}":
            answer = Answer(401, raw=b"Unauthorized\n")
        else:
            answer = self._answer(parts.path, query)
        if answer.delay:
            time.sleep(answer.delay)
        data = answer.raw if answer.raw is not None else json.dumps(answer.body).encode()
        ctype = "text/plain" if answer.raw is not None else "application/json"
        try:
            handler.send_response(answer.status)
            handler.send_header("Content-Type", ctype)
            handler.send_header("Content-Length", str(len(data)))
            handler.end_headers()
            handler.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (a timeout test): nothing to tell it
