"""sandbox/service.py: a service started and stopped by a ``with`` block, served by a thread."""

from __future__ import annotations

import threading
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self

import pytest

from gitopsbot.sandbox.service import HTTPService


class _Hello(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", "5")
        self.end_headers()
        self.wfile.write(b"hello")

    def log_message(self, format: str, *args: Any) -> None:
        pass


class _HelloService(HTTPService):
    def start(self) -> Self:
        if not self.serving:
            self.serve_http(ThreadingHTTPServer(("127.0.0.1", 0), _Hello), name="hello")
        return self


def _serving_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "hello"]


def test_a_with_block_serves_at_the_url_and_stops_the_thread() -> None:
    with _HelloService() as service:
        assert service.start() is service  # started once: a second start is a no-op
        with urllib.request.urlopen(service.url + "/", timeout=5) as answer:
            assert answer.read() == b"hello"
        port = service.port
        assert service.url == f"http://127.0.0.1:{port}"
        assert len(_serving_threads()) == 1
    assert not service.serving
    assert _serving_threads() == []
    with pytest.raises(OSError):
        urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=2)
    service.stop()  # stopping a stopped service changes nothing


def test_a_service_not_started_has_no_url() -> None:
    with pytest.raises(RuntimeError, match="_HelloService is not started"):
        _ = _HelloService().url
