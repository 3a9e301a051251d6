"""Kubernetes API emulator: enough of the API server for real helm 3/4, kubectl and the
kubernetes Python client to run the bot's flows on loopback (see docs/sandbox.md).

    with ApiServer() as api:
        api.write_kubeconfig(tmp / "kubeconfig")
        api.store.create({...})           # in-process access (see store.py for the API)
        api.faults.error(503, path="*/secrets*", times=1)
        api.kubelet.exclude("Deployment", "tensor-fusion-sys", "controller")
"""

from __future__ import annotations

import threading
from pathlib import Path
from types import TracebackType

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


class ApiServer:
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
        self._httpd: EmulatorHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._persistence: Persistence | None = None

    def start(self) -> None:
        if self._httpd is not None:
            return
        if self.state_dir is not None:
            self._persistence = Persistence(self.store, self.state_dir)
            self._persistence.load()
            self._persistence.start()
        httpd = EmulatorHTTPServer((self.host, self.port), self.store, self.faults)
        httpd.bookmark_interval = self.bookmark_interval
        self._httpd = httpd
        self.port = httpd.server_address[1]
        self.url = f"http://{self.host}:{self.port}"
        self._thread = threading.Thread(
            target=httpd.serve_forever,
            kwargs={"poll_interval": 0.1},
            name="apiserver",
            daemon=True,
        )
        self._thread.start()

    def stop(self) -> None:
        httpd, self._httpd = self._httpd, None
        if httpd is None:
            return
        httpd.stopping.set()
        self.store.close()
        httpd.shutdown()
        httpd.close_connections()
        httpd.server_close()
        if self._thread is not None:
            self._thread.join()
        self.kubelet.close()
        if self._persistence is not None:
            self._persistence.stop()
            self._persistence = None

    @property
    def requests(self) -> list[tuple[str, str, int]]:
        """(method, path?query, status) of recent requests, oldest first."""
        return list(self._httpd.requests) if self._httpd is not None else []

    @property
    def open_connections(self) -> int:
        """Client connections being served now (watches included)."""
        if self._httpd is None:
            return 0
        with self._httpd.conn_lock:
            return len(self._httpd.connections)

    def __enter__(self) -> ApiServer:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

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
