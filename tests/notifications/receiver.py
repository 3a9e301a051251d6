"""A local webhook receiver: a real HTTP server on a free port that records each POST and
answers as scripted (a status and headers per request, or hanging until released)."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Received:
    path: str
    body: bytes
    at: float  # time.monotonic() when it arrived

    @property
    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class Receiver:
    """``script``: answers for the next requests, in order ((status, headers)); then 200.
    While ``hang`` is set, a request is held until it is cleared (or 30 s)."""

    script: list[tuple[int, dict[str, str]]] = field(default_factory=list)
    received: list[Received] = field(default_factory=list)
    hang: threading.Event = field(default_factory=threading.Event)
    released: threading.Event = field(default_factory=threading.Event)
    _server: ThreadingHTTPServer | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def url(self) -> str:
        assert self._server is not None
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> Receiver:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length)
                with receiver._lock:
                    receiver.received.append(Received(self.path, body, time.monotonic()))
                    status, headers = receiver.script.pop(0) if receiver.script else (200, {})
                if receiver.hang.is_set():
                    receiver.released.wait(30)
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        self.released.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    def bodies(self) -> list[Any]:
        with self._lock:
            return [r.json for r in self.received]

    def raw(self) -> bytes:
        with self._lock:
            return b"\n".join(r.path.encode() + b" " + r.body for r in self.received)
