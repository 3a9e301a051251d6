"""A Helm chart repository over HTTP on loopback: serves a directory of index.yaml + archives.

The index is rewritten on the fly so that every chart URL points at this server (the committed
index in examples/charts/repo holds relative URLs), and helm can ``repo add`` / ``pull`` /
``install --repo`` against it as against any chart repository.
"""

from __future__ import annotations

import io
import logging
import os
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Self
from urllib.parse import unquote, urlsplit

from ruamel.yaml import YAML

from gitopsbot.errors import GitOpsBotError
from gitopsbot.sandbox.service import HTTPService

log = logging.getLogger(__name__)

INDEX = "index.yaml"


class ChartRepoError(GitOpsBotError):
    """The chart repository cannot be served (missing directory or index)."""


def rewrite_index(text: str, base_url: str) -> str:
    """The index with every entry's URLs pointing at ``base_url`` (file name kept)."""
    yaml = YAML(typ="safe")
    doc: Any = yaml.load(text)
    base = base_url.rstrip("/")
    entries = doc.get("entries") or {} if isinstance(doc, dict) else {}
    for versions in entries.values():
        for entry in versions or []:
            urls = entry.get("urls") or []
            entry["urls"] = [f"{base}/{Path(urlsplit(u).path).name}" for u in urls]
    out = io.StringIO()
    yaml.default_flow_style = False
    yaml.dump(doc, out)
    return out.getvalue()


class ChartRepo(HTTPService):
    """Serves ``directory`` (which must hold index.yaml) at ``.url`` until ``.stop()``."""

    def __init__(self, directory: Path, *, host: str = "127.0.0.1", port: int = 0) -> None:
        self.directory = Path(directory).resolve()
        if not (self.directory / INDEX).is_file():
            raise ChartRepoError(f"{self.directory}: no {INDEX}; run examples/charts/package.py")
        self._host = host
        self._port = port

    def start(self) -> Self:
        if self.serving:
            return self
        repo = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                repo._serve(self, body=True)

            def do_HEAD(self) -> None:
                repo._serve(self, body=False)

            def log_message(self, format: str, *args: Any) -> None:
                log.debug("chartrepo: %s", format % args)

        server = ThreadingHTTPServer((self._host, self._port), Handler)
        self.serve_http(server, name="chartrepo")
        return self

    def _serve(self, handler: BaseHTTPRequestHandler, *, body: bool) -> None:
        name = unquote(urlsplit(handler.path).path).strip("/")
        # Flat repository: only files directly in the directory, never a path out of it.
        if not name or "/" in name or name.startswith("."):
            self._send(handler, HTTPStatus.NOT_FOUND, b"not found\n", "text/plain", body=body)
            return
        path = self.directory / name
        if not path.is_file():
            self._send(handler, HTTPStatus.NOT_FOUND, b"not found\n", "text/plain", body=body)
            return
        if name == INDEX:
            data = rewrite_index(path.read_text(), self.url).encode()
            ctype = "application/x-yaml"
        else:
            data = path.read_bytes()
            ctype = "application/gzip" if name.endswith(".tgz") else "application/octet-stream"
        self._send(handler, HTTPStatus.OK, data, ctype, body=body)

    @staticmethod
    def _send(
        handler: BaseHTTPRequestHandler,
        status: HTTPStatus,
        data: bytes,
        ctype: str,
        *,
        body: bool,
    ) -> None:
        handler.send_response(status)
        handler.send_header("Content-Type", ctype)
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        if body:
            handler.wfile.write(data)


def republish(directory: Path, name: str, version: str, description: str) -> str:
    """Re-publish chart ``name`` ``version`` in the repository ``directory`` with different
    bytes under the same version (what a careless or compromised publisher does): its
    ``Chart.yaml`` description replaced, the archive re-packed and the index digest updated.
    Returns the new archive's sha256."""
    import hashlib
    import tarfile

    archive = directory / f"{name}-{version}.tgz"
    members: list[tuple[tarfile.TarInfo, bytes]] = []
    with tarfile.open(archive, "r:gz") as tar:
        for member in tar:
            data = b""
            if member.isfile():
                handle = tar.extractfile(member)
                data = handle.read() if handle is not None else b""
            if member.name == f"{name}/Chart.yaml":
                lines = [
                    f"description: {description}" if line.startswith("description:") else line
                    for line in data.decode().splitlines()
                ]
                data = ("\n".join(lines) + "\n").encode()
                member.size = len(data)
            members.append((member, data))
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as tar:
        for member, data in members:
            tar.addfile(member, io.BytesIO(data) if member.isfile() else None)
    payload = out.getvalue()
    archive.write_bytes(payload)
    digest = hashlib.sha256(payload).hexdigest()
    _index_digest(directory, name, version, digest)
    return digest


def sign(
    directory: Path, name: str, version: str, *, helm: Path, key: str, secret_keyring: Path
) -> str:
    """Sign chart ``name`` ``version`` of the repository ``directory`` as its publisher does:
    the archive unpacked and packaged again with ``helm package --sign --key KEY --keyring
    SECRET_KEYRING`` (a GnuPG secret keyring in the legacy format, ``gpg
    --export-secret-keys``), the archive and its ``<archive>.prov`` put in the repository and
    the index digest updated (helm 4 packages the sandbox charts byte for byte: unchanged).
    Returns the archive's sha256."""
    import hashlib
    import subprocess
    import tarfile
    import tempfile

    archive = directory / f"{name}-{version}.tgz"
    with tempfile.TemporaryDirectory(prefix="chart-sign-") as work:
        unpacked, out = Path(work) / "src", Path(work) / "out"
        with tarfile.open(archive, "r:gz") as tar:
            tar.extractall(unpacked, filter="data")
        done = subprocess.run(
            [str(helm), "package", "--sign", "--key", key, "--keyring", str(secret_keyring),
             str(unpacked / name), "--destination", str(out)],
            capture_output=True, text=True, check=False, timeout=120,
            env={"PATH": os.environ.get("PATH", os.defpath), "HOME": work},
        )  # fmt: skip
        if done.returncode != 0:
            raise ChartRepoError(f"helm package --sign {name} {version}: {done.stderr.strip()}")
        payload = (out / archive.name).read_bytes()
        signed = (out / f"{archive.name}.prov").read_bytes()
    archive.write_bytes(payload)
    archive.with_name(f"{archive.name}.prov").write_bytes(signed)
    digest = hashlib.sha256(payload).hexdigest()
    _index_digest(directory, name, version, digest)
    return digest


def _index_digest(directory: Path, name: str, version: str, digest: str) -> None:
    yaml = YAML(typ="safe")
    index: Any = yaml.load((directory / INDEX).read_text())
    for entry in index["entries"][name]:
        if str(entry["version"]) == version:
            entry["digest"] = digest
    text = io.StringIO()
    yaml.default_flow_style = False
    yaml.dump(index, text)
    (directory / INDEX).write_text(text.getvalue())
