"""The local forges' HTTP plumbing: a request's bytes to the forge's ``serve``, its ``Reply``
back as bytes, with the ETag (and a 304 for a matching If-None-Match) and the rate-limit
headers each provider sends; the request log. The forge's request handling is base.py's.
"""

from __future__ import annotations

import hashlib
import json
import socket
import threading
from http.server import BaseHTTPRequestHandler
from typing import Any, Protocol
from urllib.parse import urlsplit

from gitopsbot.sandbox.forges.model import LoggedRequest, Reply, now_utc


class ServedForge(Protocol):
    """What the handler needs of a forge (``base.LocalForge``)."""

    lock: threading.RLock
    log: list[LoggedRequest]
    etags: bool
    etag_covers_headers: bool
    headers_on_304: bool
    rate_header_prefix: str
    rate_limit: int

    @property
    def counted_requests(self) -> int: ...

    def serve(self, method: str, raw_path: str, headers: dict[str, str], data: bytes) -> Reply: ...


def handler_for(forge: ServedForge) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def setup(self) -> None:
            super().setup()
            # Headers and body go out in separate writes; without this, Nagle plus the
            # client's delayed ACK adds ~40 ms to every answer on loopback.
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

        def log_message(self, format: str, *args: Any) -> None:
            """Quiet: the forge keeps its own request log (without headers)."""

        def _any(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            data = self.rfile.read(length) if length else b""
            headers = {k.lower(): v for k, v in self.headers.items()}
            reply = forge.serve(self.command, self.path, headers, data)
            path = urlsplit(self.path).path
            if reply.status == 0:
                with forge.lock:
                    forge.log.append(LoggedRequest(self.command, path, 0))
                self.close_connection = True
                return
            payload = b"" if reply.body is None else json.dumps(reply.body).encode()
            status = reply.status
            out = dict(reply.headers)
            if self.command == "GET" and status == 200 and forge.etags:
                digest = hashlib.sha256(payload)
                if forge.etag_covers_headers:
                    digest.update(json.dumps(sorted(reply.headers.items())).encode())
                etag = '"' + digest.hexdigest()[:32] + '"'
                out["ETag"] = etag
                if headers.get("if-none-match") == etag:
                    status, payload = 304, b""
                    if not forge.headers_on_304:
                        out = {"ETag": etag}
            with forge.lock:
                forge.log.append(LoggedRequest(self.command, path, status))
                used = forge.counted_requests
            if forge.rate_header_prefix:
                prefix = forge.rate_header_prefix
                out.setdefault(prefix + "Limit", str(forge.rate_limit))
                out.setdefault(prefix + "Remaining", str(max(forge.rate_limit - used, 0)))
                out.setdefault(prefix + "Used", str(used))
                out.setdefault(prefix + "Reset", str(int(now_utc().timestamp()) + 3600))
            self.send_response(status)
            if payload:
                out["Content-Type"] = "application/json; charset=utf-8"
            for k, v in out.items():
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            if payload and self.command != "HEAD":
                self.wfile.write(payload)

        do_GET = do_POST = do_PATCH = do_PUT = do_DELETE = _any

    return Handler
