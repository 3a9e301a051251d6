"""Kubernetes API emulator: enough of the API server for real helm 3/4, kubectl and the
kubernetes Python client to run the bot's flows on loopback (see docs/sandbox.md).

    with ApiServer() as api:
        api.write_kubeconfig(tmp / "kubeconfig")
        api.store.create({...})           # in-process access (see store.py for the API)
        api.faults.error(503, path="*/secrets*", times=1)
        api.kubelet.exclude("Deployment", "tensor-fusion-sys", "controller")
"""

from __future__ import annotations

from pathlib import Path
from typing import Self

from gitopsbot.sandbox.apiserver.faults import FaultRule, Faults
from gitopsbot.sandbox.apiserver.kubelet import Kubelet
from gitopsbot.sandbox.apiserver.persistence import Persistence
from gitopsbot.sandbox.apiserver.server import EmulatorHTTPServer
from gitopsbot.sandbox.apiserver.store import (
    AlreadyExists,
    ApiError,
    Conflict,
    Invalid,
    NotFound,
    Store,
)
from gitopsbot.sandbox.service import ServedHTTP, Service

__all__ = [
    "AlreadyExists",
    "ApiError",
    "ApiServer",
    "Conflict",
    "FaultRule",
    "Faults",
    "Invalid",
    "Kubelet",
    "NotFound",
    "Store",
]


class ApiServer(Service):
    """One emulated API server. ``port=0`` picks a free port; ``url`` is set by ``start()``."""

    def __init__(
        self,
        *,
        state_dir: Path | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        kubelet: bool = True,
        kubelet_delay: float = 0.0,
        bookmark_interval: float = 1.0,
    ) -> None:
        self.host = host
        self.port = port
        self.state_dir = state_dir
        self.store = Store()
        self.faults = Faults()
        self.kubelet = Kubelet(self.store, delay=kubelet_delay, enabled=kubelet)
        self.bookmark_interval = bookmark_interval
        self.url = ""
        self._http: ServedHTTP[EmulatorHTTPServer] | None = None
        self._persistence: Persistence | None = None

    def start(self) -> Self:
        if self._http is not None:
            return self
        if self.state_dir is not None:
            self._persistence = Persistence(self.store, self.state_dir)
            self._persistence.load()
            self._persistence.start()
        httpd = EmulatorHTTPServer((self.host, self.port), self.store, self.faults)
        httpd.bookmark_interval = self.bookmark_interval
        self._http = ServedHTTP(httpd, name="apiserver", poll_interval=0.1)
        self.port = self._http.port
        self.url = f"http://{self.host}:{self.port}"
        return self

    def stop(self) -> None:
        http, self._http = self._http, None
        if http is None:
            return
        # Watches end and waiting calls return before the server stops accepting.
        http.server.stopping.set()
        self.store.close()
        http.stop()
        self.kubelet.close()
        if self._persistence is not None:
            self._persistence.stop()
            self._persistence = None

    @property
    def server(self) -> EmulatorHTTPServer:
        """The running HTTP server: benchmarks tune its watch bookmarks and polling and
        replace its request log."""
        if self._http is None:
            raise RuntimeError("ApiServer is not started")
        return self._http.server

    @property
    def requests(self) -> list[tuple[str, str, int]]:
        """(method, path?query, status) of recent requests, oldest first."""
        return list(self._http.server.requests) if self._http is not None else []

    @property
    def open_connections(self) -> int:
        """Client connections being served now (watches included)."""
        if self._http is None:
            return 0
        with self._http.server.conn_lock:
            return len(self._http.server.connections)

    def write_kubeconfig(
        self, path: Path, *, context: str = "sandbox", namespace: str = "default"
    ) -> Path:
        """A kubeconfig for this server (plain HTTP; the token is ignored by the emulator)."""
        if not self.url:
            raise RuntimeError("start() the server before writing its kubeconfig")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(
            "apiVersion: v1\n"
            "kind: Config\n"
            f"current-context: {context}\n"
            "clusters:\n"
            f"- name: {context}\n"
            f"  cluster:\n    server: {self.url}\n"
            "contexts:\n"
            f"- name: {context}\n"
            f"  context:\n    cluster: {context}\n    user: {context}\n"
            f"    namespace: {namespace}\n"
            "users:\n"
            f"- name: {context}\n"
            "  user:\n    token: sandbox\n"
        )
        path.chmod(0o600)
        return path
