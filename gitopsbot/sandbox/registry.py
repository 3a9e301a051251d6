"""A real OCI registry for the tests: CNCF distribution's ``registry`` (built by
tests/realregistry/build.sh) on a free loopback port, plain HTTP, htpasswd logins.

Plain HTTP rather than TLS with a self-signed CA: helm 3.18 and helm 4 both take
``--plain-http`` for pull, push and upgrade, so neither needs a CA file nor the system's
trust touched, and the bot's path to the registry (its login, ``--registry-config``) is the
same as against a TLS registry; TLS itself is helm's, not the bot's.

``htpasswd`` lines are made by the same binary (``registry htpasswd USER``, password on
standard input: bcrypt from the registry's own module), so the tests need neither
apache2-utils nor a Python bcrypt. Its data is thrown away with ``work_dir``.
"""

from __future__ import annotations

import os
import re
import subprocess
import urllib.error
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import Self

from gitopsbot.adapters.oci_registry import RegistryLogin, registry_config
from gitopsbot.errors import GitOpsBotError
from gitopsbot.sandbox import server_process as proc
from gitopsbot.sandbox.service import Service

REALM = "gitopsbot-sandbox"


class RealRegistryError(GitOpsBotError):
    """The registry did not start."""


class RealRegistry(Service):
    """``registry serve`` with ``users`` (name → password) allowed to push and pull."""

    def __init__(self, registry_dir: Path, work_dir: Path, users: Mapping[str, str]) -> None:
        self.binary = Path(registry_dir) / "registry"
        self.work = Path(work_dir)
        self.users = dict(users)
        self.port = 0
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def host(self) -> str:
        """``127.0.0.1:PORT``: how helm and gitopsbot.yaml's chartRegistries name it."""
        return f"{proc.HOST}:{self.port}"

    def url(self, path: str = "charts") -> str:
        """An ``oci://`` chart repository under ``path``."""
        return f"oci://{self.host}/{path}"

    @property
    def log_file(self) -> Path:
        return self.work / "registry.log"

    def start(self) -> Self:
        self.work.mkdir(parents=True, exist_ok=True)
        self.port = proc.free_port()
        lines = [self._htpasswd(user, password) for user, password in self.users.items()]
        (self.work / "htpasswd").write_text("".join(lines))
        config = self.work / "config.yml"
        config.write_text(
            "version: 0.1\n"
            "log:\n  level: warn\n"
            f"storage:\n  filesystem:\n    rootdirectory: {self.work / 'data'}\n"
            "  delete:\n    enabled: true\n"
            f"http:\n  addr: {self.host}\n"
            f"auth:\n  htpasswd:\n    realm: {REALM}\n    path: {self.work / 'htpasswd'}\n"
        )
        self._proc = proc.spawn([str(self.binary), "serve", str(config)], self.log_file)
        proc.wait_ready(self._proc, self._answers, timeout=30, failed=self._failed)
        return self

    def push(self, helm: Path, archive: Path, path: str = "charts") -> str:
        """``helm push`` of a chart archive to ``oci://<host>/<path>`` as the first user (a
        publisher, not the bot: its own helm homes and registry config under the work
        directory). Returns the manifest digest helm prints."""
        user, password = next(iter(self.users.items()))
        home = self.work / "publisher"
        home.mkdir(exist_ok=True)
        config = home / "registry-config.json"
        config.write_text(
            registry_config(RegistryLogin(self.host, user, password, plain_http=True))
        )
        env = {
            "PATH": os.environ.get("PATH", os.defpath),
            "HOME": str(home),
            "HELM_CONFIG_HOME": str(home / "config"),
            "HELM_CACHE_HOME": str(home / "cache"),
            "HELM_DATA_HOME": str(home / "data"),
        }
        done = subprocess.run(
            [str(helm), "push", str(archive), self.url(path), "--plain-http",
             "--registry-config", str(config)],
            capture_output=True, text=True, env=env, check=False, timeout=120,
        )  # fmt: skip
        if done.returncode != 0:
            raise RealRegistryError(f"helm push {archive.name}: {done.stderr.strip()}")
        digest = re.search(r"Digest: (sha256:[0-9a-f]{64})", done.stdout + done.stderr)
        return digest.group(1) if digest else ""

    def stop(self) -> None:
        if self._proc is not None:
            proc.stop_all([self._proc])
            self._proc = None

    def _htpasswd(self, user: str, password: str) -> str:
        done = subprocess.run(
            [str(self.binary), "htpasswd", user],
            input=password + "\n",
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            raise RealRegistryError(f"registry htpasswd {user}: {done.stderr.strip()}")
        return done.stdout

    def _answers(self) -> bool:
        """``/v2/`` answers (401 without a login: it is up, with auth on)."""
        try:
            with urllib.request.urlopen(f"http://{self.host}/v2/", timeout=2):
                return True
        except urllib.error.HTTPError as e:
            return e.code == 401
        except OSError:
            return False

    def _failed(self, why: str) -> RealRegistryError:
        return RealRegistryError(f"registry {why}: {proc.log_tail(self.log_file)}")
