"""A Git remote over smart HTTP on loopback: git's own ``git http-backend`` behind basic auth.

Each request runs the CGI once (as a web server would), with the request body streamed in and
the CGI's response headers (``Status`` included) parsed and passed on. Chunked and gzip
request bodies are decoded here, since git and libgit2 send both for large pushes.
``create_fleet_repo`` makes a bare repository from a directory with the ``git`` CLI (the
sandbox does not import pygit2); ``protect_branch`` installs an ``update`` hook that refuses
pushes to a branch, as a forge's protected branch does (hooks run over smart HTTP and for the
git CLI's local pushes; libgit2's own file:// transport runs none). ``on_push`` callbacks run
after every push over HTTP (a local forge follows the repository with one).
"""

from __future__ import annotations

import base64
import hmac
import logging
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import zlib
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import IO, ClassVar, Self
from urllib.parse import urlsplit

from gitopsbot.sandbox.service import HTTPService

log = logging.getLogger(__name__)

HTTP_BACKEND = Path("/usr/lib/git-core/git-http-backend")
_CHUNK = 64 * 1024


def _git_exec_path() -> Path:
    found = shutil.which("git")
    if found is None:
        return HTTP_BACKEND
    out = subprocess.run([found, "--exec-path"], capture_output=True, text=True, check=False)
    candidate = Path(out.stdout.strip()) / "git-http-backend"
    return candidate if candidate.is_file() else HTTP_BACKEND


APP_TOKEN_USER = "x-access-token"


class GitRemote(HTTPService):
    """Serves every bare repository under ``root`` at ``<url>/<name>.git``.

    ``username``/``password`` None: no authentication (pushes are then allowed anonymously
    too, via ``http.receivepack``).
    """

    def __init__(
        self,
        root: Path,
        *,
        username: str | None = "git",
        password: str | None = "secret",
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        self.root = root.resolve()
        self.username = username
        self.password = password
        self._backend = _git_exec_path()
        self._host = host
        self._port = port
        self.requests = 0  # served requests, for tests that want to see traffic
        # Called with the repository's name (``fleet.git``) after each push over HTTP.
        self.on_push: list[Callable[[str], None]] = []
        # Whether a GitHub App installation token is live (the local forge's): such a token
        # is taken as the password of user ``x-access-token``, as GitHub takes it.
        self.accepts_token: Callable[[str], bool] | None = None

    def repo_url(self, name: str) -> str:
        return f"{self.url}/{_bare_name(name)}"

    def start(self) -> Self:
        if self.serving:
            return self
        self.root.mkdir(parents=True, exist_ok=True)
        handler = type("_BoundHandler", (_Handler,), {"remote": self})
        self.serve_http(_Server((self._host, self._port), handler), name="gitremote")
        log.info("git remote serving %s at %s", self.root, self.url)
        return self

    def create_fleet_repo(self, name: str, source_dir: Path | None, *, branch: str = "main") -> str:
        """A bare repository here, initialised from ``source_dir``; returns its HTTP URL."""
        create_fleet_repo(self.root, name, source_dir, branch=branch)
        return self.repo_url(name)

    def protect_branch(
        self,
        name: str,
        branch: str,
        *,
        users: tuple[str, ...] | None = None,
        message: str = "protected branch: changes go through a pull request",
    ) -> None:
        """Refuse pushes to ``branch`` of repository ``name`` (see ``protect_branch``)."""
        protect_branch(self.root, name, branch, users=users, message=message)

    def authorised(self, header: str | None) -> str | None:
        """The user name when the Authorization header is right (or auth is off), else None."""
        if self.username is None or self.password is None:
            return "anonymous"
        if not header or not header.lower().startswith("basic "):
            return None
        try:
            user, _, password = base64.b64decode(header[6:].strip()).decode().partition(":")
        except (ValueError, UnicodeDecodeError):
            return None
        live = self.accepts_token
        if user == APP_TOKEN_USER and live is not None and live(password):
            return user
        ok_user = hmac.compare_digest(user.encode(), self.username.encode())
        ok_pass = hmac.compare_digest(password.encode(), self.password.encode())
        return user if ok_user and ok_pass else None


class _Server(ThreadingHTTPServer):
    def handle_error(self, request: object, client_address: object) -> None:
        # A client hanging up mid-request is normal for git; log instead of printing.
        error = sys.exc_info()[1]
        log.debug("gitremote: request from %s failed: %r", client_address, error)


class _Handler(BaseHTTPRequestHandler):
    remote: ClassVar[GitRemote]
    # HTTP/1.1 with chunked responses: libgit2 does not accept a body ended by close.
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:
        log.debug("gitremote: %s", format % args)

    def do_GET(self) -> None:
        self._serve()

    def do_POST(self) -> None:
        self._serve()

    def _serve(self) -> None:
        remote = self.remote
        remote.requests += 1
        user = remote.authorised(self.headers.get("Authorization"))
        if user is None:
            if self.command == "POST":
                for _ in self._body():
                    pass  # keep the connection usable for the retry with credentials
            self.send_response(401)
            self.send_header("WWW-Authenticate", 'Basic realm="gitopsbot sandbox"')
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", "13")
            self.end_headers()
            self.wfile.write(b"Unauthorized\n")
            return
        parts = urlsplit(self.path)
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "GIT_PROJECT_ROOT": str(remote.root),
            "GIT_HTTP_EXPORT_ALL": "1",
            "PATH_INFO": parts.path,
            "QUERY_STRING": parts.query,
            "REQUEST_METHOD": self.command,
            "REMOTE_USER": user,
            "REMOTE_ADDR": self.client_address[0],
            "CONTENT_TYPE": self.headers.get("Content-Type", ""),
            "GATEWAY_INTERFACE": "CGI/1.1",
            "SERVER_PROTOCOL": "HTTP/1.1",
            "HTTP_GIT_PROTOCOL": self.headers.get("Git-Protocol", ""),
        }
        body: Iterator[bytes] | None = None
        if self.command == "POST":
            body = self._body()
            # Decoded bodies have no known length: the CGI then reads to end of input.
            if not self._decoded and self.headers.get("Content-Length"):
                env["CONTENT_LENGTH"] = self.headers["Content-Length"]
        proc = subprocess.Popen(
            [str(remote._backend)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
        )
        assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
        feeder = threading.Thread(target=_feed, args=(proc.stdin, body), daemon=True)
        feeder.start()
        errors: list[bytes] = []
        drain = threading.Thread(target=_drain, args=(proc.stderr, errors), daemon=True)
        drain.start()
        status, headers = _cgi_headers(proc.stdout)
        code, _, reason = status.partition(" ")
        self.send_response(int(code), reason or None)
        for key, value in headers:
            self.send_header(key, value)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        while chunk := proc.stdout.read1(_CHUNK):  # type: ignore[attr-defined]
            self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()
        feeder.join()
        proc.wait()
        drain.join()
        if errors and errors[0]:
            log.debug("git http-backend: %s", errors[0].decode(errors="replace").strip())
        if self.command == "POST" and parts.path.endswith("/git-receive-pack"):
            name = parts.path.strip("/").rsplit("/", 1)[0]
            for callback in list(remote.on_push):
                try:
                    callback(name)
                except Exception:  # a follower's bug must not fail the push that is done
                    log.exception("gitremote: on_push callback failed for %s", name)

    _decoded = False

    def _body(self) -> Iterator[bytes]:
        chunked = "chunked" in self.headers.get("Transfer-Encoding", "").lower()
        gzipped = self.headers.get("Content-Encoding", "").lower() in ("gzip", "x-gzip")
        self._decoded = chunked or gzipped
        raw = (
            self._chunked() if chunked else self._sized(int(self.headers.get("Content-Length", 0)))
        )
        return _gunzip(raw) if gzipped else raw

    def _sized(self, length: int) -> Iterator[bytes]:
        left = length
        while left > 0:
            chunk = self.rfile.read(min(left, _CHUNK))
            if not chunk:
                return
            left -= len(chunk)
            yield chunk

    def _chunked(self) -> Iterator[bytes]:
        while True:
            line = self.rfile.readline()
            size = int(line.split(b";", 1)[0].strip() or b"0", 16)
            if size == 0:
                # Trailers, up to the blank line.
                while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                    pass
                return
            yield from self._sized(size)
            self.rfile.readline()  # CRLF after the chunk


def _gunzip(chunks: Iterator[bytes]) -> Iterator[bytes]:
    inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
    for chunk in chunks:
        out = inflater.decompress(chunk)
        if out:
            yield out
    tail = inflater.flush()
    if tail:
        yield tail


def _feed(stdin: IO[bytes], body: Iterator[bytes] | None) -> None:
    try:
        if body is not None:
            for chunk in body:
                stdin.write(chunk)
    except (OSError, ValueError, zlib.error):
        # The backend stopped reading (a broken pipe), or the client went away mid-body (a
        # push interrupted: the connection reset): the backend sees the end of its input.
        pass
    finally:
        try:
            stdin.close()
        except BrokenPipeError:
            pass


def _drain(stream: IO[bytes], into: list[bytes]) -> None:
    into.append(stream.read())


def _cgi_headers(stdout: IO[bytes]) -> tuple[str, list[tuple[str, str]]]:
    status = "200 OK"
    headers: list[tuple[str, str]] = []
    while True:
        line = stdout.readline()
        if line in (b"\r\n", b"\n", b""):
            break
        key, _, value = line.decode("latin-1").partition(":")
        key, value = key.strip(), value.strip()
        if key.lower() == "status":
            status = value
        else:
            headers.append((key, value))
    return status, headers


def _bare_name(name: str) -> str:
    if not name or name.startswith("/") or ".." in name.split("/"):
        raise ValueError(f"invalid repository name: {name!r}")
    return name if name.endswith(".git") else f"{name}.git"


def admin_git_env() -> dict[str, str]:
    """The environment of the fleet admin's git commands in the sandbox: their name on every
    commit, no system or user configuration, never a prompt."""
    return {
        **os.environ,
        "GIT_AUTHOR_NAME": "Fleet Admin",
        "GIT_AUTHOR_EMAIL": "admin@example.com",
        "GIT_COMMITTER_NAME": "Fleet Admin",
        "GIT_COMMITTER_EMAIL": "admin@example.com",
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_TERMINAL_PROMPT": "0",
    }


def _git(*args: str, cwd: Path | None = None) -> None:
    done = subprocess.run(
        ["git", *args], cwd=cwd, env=admin_git_env(), capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)} failed: {done.stderr.strip()}")


def protect_branch(
    remote_root: Path,
    name: str,
    branch: str,
    *,
    users: tuple[str, ...] | None = None,
    message: str = "protected branch: changes go through a pull request",
) -> Path:
    """Install an ``update`` hook in ``<remote_root>/<name>.git`` refusing every push to
    ``branch`` by one of ``users`` (the HTTP user, ``REMOTE_USER``; None: by anyone), with
    ``message`` on the pusher's stderr. Other branches and users are untouched. Returns the
    hook's path (replaced on each call: one protected branch per repository)."""
    bare = remote_root.resolve() / _bare_name(name)
    if not (bare / "HEAD").is_file():
        raise FileNotFoundError(f"no bare repository at {bare}")
    who = (
        "true"
        if users is None
        else " || ".join(f'[ "${{REMOTE_USER:-}}" = {shlex.quote(u)} ]' for u in users) or "false"
    )
    hook = bare / "hooks" / "update"
    hook.parent.mkdir(exist_ok=True)
    hook.write_text(
        "#!/bin/sh\n"
        "# gitopsbot sandbox: a protected branch (update hook: refname old new)\n"
        f'if [ "$1" = {shlex.quote("refs/heads/" + branch)} ] && {{ {who}; }}; then\n'
        f"  echo {shlex.quote(message)} >&2\n"
        "  exit 1\n"
        "fi\n"
        "exit 0\n"
    )
    hook.chmod(0o755)
    return hook


def create_fleet_repo(
    remote_root: Path, name: str, source_dir: Path | None, *, branch: str = "main"
) -> str:
    """Create ``<remote_root>/<name>.git`` (bare) with one commit of ``source_dir`` on
    ``branch`` (an empty commit when ``source_dir`` is None); returns its file:// URL."""
    bare = remote_root.resolve() / _bare_name(name)
    if bare.exists():
        raise FileExistsError(f"repository already exists: {bare}")
    remote_root.mkdir(parents=True, exist_ok=True)
    _git("init", "--quiet", "--bare", f"--initial-branch={branch}", str(bare))
    # http-backend refuses pushes from unauthenticated users unless told otherwise.
    _git("--git-dir", str(bare), "config", "http.receivepack", "true")
    with tempfile.TemporaryDirectory(prefix="fleet-") as tmp:
        work = Path(tmp) / "work"
        if source_dir is not None:
            shutil.copytree(source_dir, work, ignore=shutil.ignore_patterns(".git"))
        else:
            work.mkdir()
        _git("init", "--quiet", f"--initial-branch={branch}", cwd=work)
        _git("add", "--all", cwd=work)
        _git("commit", "--quiet", "--allow-empty", "-m", "Initial fleet", cwd=work)
        _git("push", "--quiet", str(bare), f"{branch}:{branch}", cwd=work)
    return bare.as_uri()
