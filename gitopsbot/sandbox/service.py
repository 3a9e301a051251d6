"""A sandbox service's life: started, stopped, used in a ``with``; an HTTP one served by a thread.

Every server and process of the sandbox (the emulator, the chart repository, Prometheus, the
Git remote, the local forges, the real control plane, Gitea and registry, the controller
simulator) is a ``Service``: ``start()`` returns it, ``stop()`` ends it whatever happened, and
a ``with`` block does both. Those that answer HTTP in this process (``HTTPService``) serve a
stdlib ``ThreadingHTTPServer`` from a daemon thread (``ServedHTTP``); those run as child
processes start, wait for and stop them through server_process.py.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from http.server import ThreadingHTTPServer
from types import TracebackType
from typing import Generic, Self, TypeVar

JOIN_SECONDS = 10.0  # the serving thread ends once shutdown() returns: a safety net only

S = TypeVar("S", bound=ThreadingHTTPServer)


class Service(ABC):
    """Started by ``start()`` (or entering a ``with``), ended by ``stop()`` (or leaving it)."""

    @abstractmethod
    def start(self) -> Self:
        """Start serving; returns the service."""

    @abstractmethod
    def stop(self) -> None:
        """Stop serving; a stopped or never started service stays as it is."""

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


class ServedHTTP(Generic[S]):
    """``server`` served by a daemon thread named ``name`` from construction until ``stop()``.

    Each request gets a daemon thread of its own too: a client that never hangs up does not
    keep the test run alive. ``poll_interval`` is how often the loop looks for ``stop()``.
    """

    def __init__(self, server: S, *, name: str, poll_interval: float = 0.5) -> None:
        server.daemon_threads = True
        self.server = server
        self._thread = threading.Thread(
            target=server.serve_forever,
            kwargs={"poll_interval": poll_interval},
            name=name,
            daemon=True,
        )
        self._thread.start()

    @property
    def port(self) -> int:
        return int(self.server.server_address[1])

    @property
    def url(self) -> str:
        """``http://HOST:PORT``, no trailing slash."""
        host, port = self.server.server_address[:2]
        return f"http://{host!s}:{port}"

    def stop(self) -> None:
        """Stop accepting, close the socket, and wait for the serving thread to end."""
        self.server.shutdown()
        self.server.server_close()
        self._thread.join(timeout=JOIN_SECONDS)


class HTTPService(Service):
    """A service answering HTTP in this process: its ``start`` hands ``serve_http`` the server."""

    _http: ServedHTTP[ThreadingHTTPServer] | None = None

    @property
    def serving(self) -> bool:
        return self._http is not None

    @property
    def url(self) -> str:
        """``http://HOST:PORT`` of the started service, no trailing slash."""
        return self._served().url

    @property
    def port(self) -> int:
        return self._served().port

    @property
    def server(self) -> ThreadingHTTPServer:
        """The running HTTP server (benchmarks wrap its handler to count requests)."""
        return self._served().server

    def serve_http(
        self, server: ThreadingHTTPServer, *, name: str, poll_interval: float = 0.5
    ) -> None:
        """Serve ``server`` from a thread named ``name`` until ``stop()``."""
        self._http = ServedHTTP(server, name=name, poll_interval=poll_interval)

    def stop(self) -> None:
        http, self._http = self._http, None
        if http is not None:
            http.stop()

    def _served(self) -> ServedHTTP[ThreadingHTTPServer]:
        if self._http is None:
            raise RuntimeError(f"{type(self).__name__} is not started")
        return self._http
