"""Fixtures for the Git side: a real smart-HTTP remote (git http-backend) and file:// remotes."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from gitopsbot.adapters.git import GitRepo, GitSettings
from gitopsbot.adapters.git_credentials import HttpsPassword
from gitopsbot.sandbox.gitremote import GitRemote, create_fleet_repo

USER = "fleet-bot"
PASSWORD = "pw-for-tests"

CLUSTER_FILES = {
    "gitopsbot.yaml": "watchedBranch: main\n",
    "clusters/alpha/release.yaml": "version: 1.0.0\n",
    "clusters/alpha/values.yaml": "hypervisor:\n  image: hv:1.0.0\n",
    "clusters/alpha/rollout.yaml": "pools: {}\n",
    "clusters/beta/release.yaml": "version: 1.0.0\n",
    "clusters/beta/values.yaml": "{}\n",
}


def git(*args: str, cwd: Path) -> str:
    """The git CLI as a human would run it (fixed identity, no user config)."""
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "Human",
        "GIT_AUTHOR_EMAIL": "human@example.com",
        "GIT_COMMITTER_NAME": "Human",
        "GIT_COMMITTER_EMAIL": "human@example.com",
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_TERMINAL_PROMPT": "0",
    }
    done = subprocess.run(
        ["git", *args], cwd=cwd, env=env, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, f"git {' '.join(args)}: {done.stderr}"
    return done.stdout


@dataclass
class Human:
    """A person's clone of the fleet repository, driven with the git CLI."""

    path: Path

    def write(self, path: str, text: str) -> None:
        full = self.path / path
        full.parent.mkdir(parents=True, exist_ok=True)
        full.write_text(text)

    def commit(self, message: str, files: dict[str, str] | None = None) -> str:
        for path, text in (files or {}).items():
            self.write(path, text)
        git("add", "--all", cwd=self.path)
        git("commit", "--quiet", "--allow-empty", "-m", message, cwd=self.path)
        return self.sha("HEAD")

    def git(self, *args: str) -> str:
        return git(*args, cwd=self.path)

    def sha(self, rev: str) -> str:
        return git("rev-parse", rev, cwd=self.path).strip()

    def push(self, branch: str = "main") -> None:
        git("push", "--quiet", "origin", branch, cwd=self.path)

    def pull(self) -> None:
        git("fetch", "--quiet", "origin", cwd=self.path)
        git("merge", "--quiet", "--ff-only", "origin/main", cwd=self.path)

    def show(self, rev_path: str) -> str:
        return git("show", rev_path, cwd=self.path)


@dataclass
class Fleet:
    """One fleet repository on a remote: the bot's URL and a way to make human clones."""

    url: str  # as the bot sees it (no credentials inside)
    human_url: str  # as the git CLI sees it (credentials inside for HTTP)
    tmp: Path
    credentials: HttpsPassword | None
    files: dict[str, str]

    def human(self, name: str = "human") -> Human:
        path = self.tmp / name
        git("clone", "--quiet", self.human_url, str(path), cwd=self.tmp)
        return Human(path)

    def bot(self, name: str = "mirror", **kwargs: object) -> GitRepo:
        settings = GitSettings(
            url=self.url,
            mirror_dir=self.tmp / name,
            credentials=self.credentials,
            author_name="gitopsbot",
            author_email="bot@example.com",
            **kwargs,  # type: ignore[arg-type]
        )
        repo = GitRepo(settings)
        repo.fetch()
        return repo


@pytest.fixture
def run_git() -> Callable[..., str]:
    """The git CLI as a human runs it: ``run_git(*args, cwd=path)``."""
    return git


@pytest.fixture(scope="module")
def http_remote(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GitRemote]:
    remote = GitRemote(tmp_path_factory.mktemp("remote"), username=USER, password=PASSWORD)
    remote.start()
    yield remote
    remote.stop()


@pytest.fixture
def fleet_source(tmp_path: Path) -> Path:
    src = tmp_path / "fleet-src"
    for path, text in CLUSTER_FILES.items():
        (src / path).parent.mkdir(parents=True, exist_ok=True)
        (src / path).write_text(text)
    return src


@pytest.fixture(params=["file", "http"])
def fleet(
    request: pytest.FixtureRequest, tmp_path: Path, fleet_source: Path, http_remote: GitRemote
) -> Fleet:
    """The fleet repository over each real transport: file:// and smart HTTP + basic auth."""
    name = f"fleet-{request.node.name}".replace("[", "-").replace("]", "")
    if request.param == "file":
        url = create_fleet_repo(tmp_path / "remote", name, fleet_source)
        return Fleet(url=url, human_url=url, tmp=tmp_path, credentials=None, files=CLUSTER_FILES)
    url = http_remote.create_fleet_repo(name, fleet_source)
    human_url = url.replace("http://", f"http://{USER}:{PASSWORD}@")
    return Fleet(
        url=url,
        human_url=human_url,
        tmp=tmp_path,
        credentials=HttpsPassword(USER, PASSWORD),
        files=CLUSTER_FILES,
    )


# -- a real SSH server (asyncssh) running git's own upload-pack / receive-pack ----------------


@dataclass
class SshServer:
    """An SSH server on loopback serving the bare repositories under ``root``."""

    root: Path
    port: int
    host_public_key: str  # "ssh-ed25519 AAAA..."
    client_key: Path  # authorised private key (public key at <client_key>.pub)
    other_key: Path  # a key the server does not know

    def url(self, name: str) -> str:
        return f"ssh://git@127.0.0.1:{self.port}/{name}.git"

    def known_hosts_line(self) -> str:
        return f"[127.0.0.1]:{self.port} {self.host_public_key}\n"


def _keygen(path: Path) -> Path:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)
    return path


@pytest.fixture(scope="module")
def ssh_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SshServer]:
    asyncssh = pytest.importorskip("asyncssh", reason="asyncssh (dev extra) runs the SSH server")
    import asyncio
    import shlex
    import threading

    base = tmp_path_factory.mktemp("ssh")
    root = base / "remote"
    root.mkdir()
    host_key = _keygen(base / "host_key")
    client_key = _keygen(base / "client_key")
    other_key = _keygen(base / "other_key")

    async def handle(process: Any) -> None:
        argv = shlex.split(process.command or "")
        if len(argv) != 2 or argv[0] not in ("git-upload-pack", "git-receive-pack"):
            process.exit(1)
            return
        repo = root / argv[1].lstrip("/")
        proc = await asyncio.create_subprocess_exec(
            "git",
            argv[0].removeprefix("git-"),
            str(repo),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,
        )
        assert proc.stdin is not None and proc.stdout is not None

        # Copy by hand (not process.redirect): nothing is left pending once git exits.
        async def client_to_git() -> None:
            assert proc.stdin is not None
            try:
                while data := await process.stdin.read(65536):
                    proc.stdin.write(data)
                    await proc.stdin.drain()
            except (ConnectionError, asyncssh.Error):
                pass
            finally:
                proc.stdin.close()

        feeder = asyncio.ensure_future(client_to_git())
        while data := await proc.stdout.read(65536):
            process.stdout.write(data)
        code = await proc.wait()
        feeder.cancel()
        await asyncio.gather(feeder, return_exceptions=True)
        process.exit(code)

    loop = asyncio.new_event_loop()
    server = loop.run_until_complete(
        asyncssh.listen(
            "127.0.0.1",
            0,
            server_host_keys=[str(host_key)],
            authorized_client_keys=f"{client_key}.pub",
            process_factory=handle,
            encoding=None,
        )
    )
    port = server.sockets[0].getsockname()[1]
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    host_public = " ".join(Path(f"{host_key}.pub").read_text().split()[:2])
    yield SshServer(root, port, host_public, client_key, other_key)

    async def close() -> None:
        server.close()
        await server.wait_closed()

    asyncio.run_coroutine_threadsafe(close(), loop).result(timeout=10)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(timeout=10)
    loop.close()


@pytest.fixture
def ssh_home(tmp_path: Path, ssh_server: SshServer) -> Iterator[Path]:
    """A home directory whose ~/.ssh/known_hosts trusts the test server (libgit2 reads it)."""
    import pygit2

    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "known_hosts").write_text(ssh_server.known_hosts_line())
    previous = pygit2.settings.homedir
    pygit2.settings.homedir = str(home)
    yield home
    pygit2.settings.homedir = previous
