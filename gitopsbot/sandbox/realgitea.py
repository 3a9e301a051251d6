"""A real Gitea on loopback, for the tests that must know what the real server does.

The local Gitea (``sandbox/forges/gitea.py``) is ours, written from the API documentation;
this is upstream's ``gitea`` command, built by ``tests/realgitea/build.sh`` from one Gitea
release's Go module (the directory it prints holds the binary and the release's templates/,
options/ and public/, which a build without the bindata tag reads at run time).

    with RealGitea(gitea_dir, work_dir) as gitea:
        gitea.api("POST", "/orgs", {"username": "acme"})       # as the admin
        gitea.create_user("bot"); token = gitea.create_token("bot", ["write:repository"])

What it sets up, and why:

- app.ini with INSTALL_LOCK (no install page), SQLite in ``work_dir`` (the release's pure-Go
  driver), HTTP on a free loopback port, no SSH, offline (no avatars fetched), and
  ``[security] ALLOWED_HOST_LIST = loopback``: Gitea refuses webhook deliveries to loopback
  otherwise, and the tests' receiver listens on 127.0.0.1.
- The database is migrated and the admin created (with a token of scope ``all``) by the
  ``gitea migrate`` and ``gitea admin user create`` commands before the server starts.
- The server runs as ``sandbox/server_process.py`` starts it (it dies with this process, in
  its own session), with its log in ``work_dir``; ``stop()`` ends it whatever happened.
"""

from __future__ import annotations

import base64
import getpass
import json
import os
import re
import secrets
import subprocess
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Self

from gitopsbot.errors import GitOpsBotError
from gitopsbot.sandbox import server_process as proc
from gitopsbot.sandbox.service import Service

START_TIMEOUT_SECONDS = 60.0
ADMIN_USER = "gitea-admin"


class RealGiteaError(GitOpsBotError):
    """Gitea could not be set up (the message carries the command's output or the log tail)."""


class RealGitea(Service):
    """Start with ``start()``; ``stop()`` ends the server. See the module docstring."""

    def __init__(self, gitea_dir: Path, work_dir: Path, *, page_size: int | None = None) -> None:
        """``page_size``: the most items an API list answers with (Gitea's default is 50); a
        small one makes every list paginate, as the local forges do."""
        self.gitea_dir = gitea_dir
        self.page_size = page_size
        self.binary = gitea_dir / "gitea"
        if not os.access(self.binary, os.X_OK):
            raise RealGiteaError(f"{self.binary}: missing (run tests/realgitea/build.sh)")
        self.work_dir = work_dir
        self.port = 0
        self.admin_password = secrets.token_hex(16)
        self.admin_token = ""
        self.passwords: dict[str, str] = {ADMIN_USER: self.admin_password}
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://{proc.HOST}:{self.port}"

    @property
    def api_url(self) -> str:
        return self.url + "/api/v1"

    @property
    def config(self) -> Path:
        return self.work_dir / "app.ini"

    @property
    def log_file(self) -> Path:
        return self.work_dir / "gitea.log"

    @property
    def database(self) -> Path:
        return self.work_dir / "data" / "gitea.db"

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> Self:
        try:
            self.work_dir.mkdir(parents=True, exist_ok=True)
            self.port = proc.free_port()
            self._write_config()
            self._cli("migrate")
            out = self._cli(
                "admin", "user", "create", "--admin", "--username", ADMIN_USER,
                "--email", f"{ADMIN_USER}@example.invalid", "--password", self.admin_password,
                "--must-change-password=false", "--access-token",
                "--access-token-name", "setup", "--access-token-scopes", "all",
            )  # fmt: skip
            found = re.search(r"Access token was successfully created\.\.\. (\S+)", out)
            if found is None:
                raise RealGiteaError(f"gitea admin user create printed no token: {out[-800:]}")
            self.admin_token = found.group(1)
            self._spawn()
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        child, self._proc = self._proc, None
        if child is not None:
            proc.stop_all([child])

    @property
    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    # ------------------------------------------------------------------ the API, as a person

    def api(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        token: str | None = None,
        basic: tuple[str, str] | None = None,
    ) -> Any:
        """One API call (``path`` below /api/v1); the admin's token unless told. Raises
        urllib.error.HTTPError on an error answer; returns the decoded JSON (None if empty)."""
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.api_url + path, data=data, method=method)
        req.add_header("Content-Type", "application/json")
        req.add_header("Accept", "application/json")
        if basic is not None:
            pair = base64.b64encode(f"{basic[0]}:{basic[1]}".encode()).decode()
            req.add_header("Authorization", f"Basic {pair}")
        else:
            req.add_header("Authorization", f"token {token or self.admin_token}")
        return self._call(req)[0]

    def api_list(self, path: str) -> list[Any]:
        """Every item of a list, following the Link header's rel="next" as clients do (some
        lists, such as an issue's comments, are not paginated and send none)."""
        url: str | None = self.api_url + path
        items: list[Any] = []
        while url is not None:
            req = urllib.request.Request(url)
            req.add_header("Authorization", f"token {self.admin_token}")
            page, link = self._call(req)
            items.extend(page)
            found = re.search(r'<([^>]+)>;\s*rel="next"', link)
            url = found.group(1) if found else None
        return items

    @staticmethod
    def _call(req: urllib.request.Request) -> tuple[Any, str]:
        with urllib.request.urlopen(req, timeout=30) as resp:
            raw = resp.read()
            link = resp.headers.get("Link") or ""
        return (json.loads(raw) if raw else None), link

    def create_user(self, name: str) -> None:
        password = secrets.token_hex(16)
        self.api(
            "POST",
            "/admin/users",
            {
                "username": name,
                "email": f"{name}@example.invalid",
                "password": password,
                "must_change_password": False,
            },
        )
        self.passwords[name] = password

    def create_token(self, user: str, scopes: list[str]) -> str:
        """A new access token of ``user`` with ``scopes`` (Gitea asks for the password)."""
        answer = self.api(
            "POST",
            f"/users/{user}/tokens",
            {"name": f"t-{secrets.token_hex(4)}", "scopes": scopes},
            basic=(user, self.passwords[user]),
        )
        return str(answer["sha1"])

    # ------------------------------------------------------------------ internals

    def _write_config(self) -> None:
        work = self.work_dir
        root = os.getuid() == 0
        lines = [
            "APP_NAME = gitopsbot-realgitea",
            f"RUN_USER = {getpass.getuser()}",
            "RUN_MODE = prod",
            f"WORK_PATH = {work}",
            # CI containers run as root; Gitea refuses that unless told.
            *(["I_AM_BEING_UNSAFE_RUNNING_AS_ROOT = true"] if root else []),
            "[server]",
            "PROTOCOL = http",
            f"HTTP_ADDR = {proc.HOST}",
            f"HTTP_PORT = {self.port}",
            f"ROOT_URL = {self.url}/",
            f"DOMAIN = {proc.HOST}",
            "DISABLE_SSH = true",
            "START_SSH_SERVER = false",
            "OFFLINE_MODE = true",
            "LFS_START_SERVER = false",
            f"APP_DATA_PATH = {work}/data",
            # Templates, options and public come from the release (build.sh copies them).
            f"STATIC_ROOT_PATH = {self.gitea_dir}",
            "[database]",
            "DB_TYPE = sqlite3",
            f"PATH = {self.database}",
            "[repository]",
            f"ROOT = {work}/repositories",
            "DEFAULT_BRANCH = main",
            "[security]",
            "INSTALL_LOCK = true",
            f"SECRET_KEY = {secrets.token_hex(32)}",
            f"INTERNAL_TOKEN = {secrets.token_hex(32)}",
            # Webhooks may call the tests' receiver on 127.0.0.1 (refused by default).
            "ALLOWED_HOST_LIST = loopback",
            "[service]",
            "DISABLE_REGISTRATION = true",
            "[mailer]",
            "ENABLED = false",
            "[log]",
            "MODE = file",
            "LEVEL = Info",
            f"ROOT_PATH = {work}/log",
            "[cron.update_checker]",
            "ENABLED = false",
            *(["[api]", f"MAX_RESPONSE_ITEMS = {self.page_size}"] if self.page_size else []),
        ]
        self.config.write_text("\n".join(lines) + "\n")

    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        env["GITEA_WORK_DIR"] = str(self.work_dir)
        env["GITEA_CUSTOM"] = str(self.work_dir / "custom")
        env["HOME"] = str(self.work_dir)  # gitea writes ~/.gitconfig for its git calls
        return env

    def _cli(self, *args: str) -> str:
        argv = [str(self.binary), "--config", str(self.config), "--work-path", str(self.work_dir)]
        done = subprocess.run(
            [*argv, *args], capture_output=True, text=True, env=self._env(), timeout=120
        )
        if done.returncode != 0:
            raise RealGiteaError(
                f"gitea {' '.join(args[:3])} failed ({done.returncode}): "
                f"{(done.stdout + done.stderr)[-1500:]}"
            )
        return done.stdout

    def _spawn(self) -> None:
        argv = [str(self.binary), "--config", str(self.config), "--work-path", str(self.work_dir)]
        self._proc = proc.spawn([*argv, "web"], self.log_file, env=self._env())

    def _wait_ready(self) -> None:
        assert self._proc is not None
        proc.wait_ready(
            self._proc,
            lambda: proc.http_ok(self.api_url + "/version"),
            timeout=START_TIMEOUT_SECONDS,
            failed=lambda why: RealGiteaError(f"gitea web {why}: {self._tail()}"),
        )

    def _tail(self) -> str:
        return proc.log_tail(self.log_file, self.work_dir / "log" / "gitea.log")
