"""SSH end to end: pygit2/libssh2 against a real SSH server running git's upload/receive-pack.

The server is asyncssh (a dev dependency; no sshd can run here). It checks the client's key
against an authorized key, and libgit2 checks the server's host key against known_hosts.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from gitopsbot.adapters.git import GitRepo, GitSettings
from gitopsbot.adapters.git_credentials import SshKey
from gitopsbot.errors import GitAuthError
from gitopsbot.sandbox.gitremote import create_fleet_repo

if TYPE_CHECKING:
    from tests.git.conftest import SshServer

CANARY = "CANARY-passphrase-91ab"


@pytest.fixture
def ssh_url(ssh_server: SshServer, fleet_source: Path, request: pytest.FixtureRequest) -> str:
    name = f"ssh-{request.node.name}"
    create_fleet_repo(ssh_server.root, name, fleet_source)
    return ssh_server.url(name)


def test_fetch_read_commit_push_over_ssh(
    ssh_server: SshServer, ssh_url: str, ssh_home: Path, tmp_path: Path
) -> None:
    repo = GitRepo(
        GitSettings(
            url=ssh_url, mirror_dir=tmp_path / "m", credentials=SshKey(ssh_server.client_key)
        )
    )
    repo.fetch()
    assert repo.read("main", "clusters/alpha/release.yaml") == b"version: 1.0.0\n"
    sha = repo.commit_files("gitopsbot/state", {"s.yaml": b"x: 1\n"}, "record", parent=None)
    assert repo.push("gitopsbot/state") == sha
    # A second mirror sees what the first pushed.
    other = GitRepo(
        GitSettings(
            url=ssh_url, mirror_dir=tmp_path / "m2", credentials=SshKey(ssh_server.client_key)
        )
    )
    other.fetch()
    assert other.read("gitopsbot/state", "s.yaml") == b"x: 1\n"


def test_unknown_key_is_refused(
    ssh_server: SshServer,
    ssh_url: str,
    ssh_home: Path,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    repo = GitRepo(
        GitSettings(
            url=ssh_url,
            mirror_dir=tmp_path / "m",
            credentials=SshKey(ssh_server.other_key, passphrase=CANARY),
        )
    )
    with pytest.raises(GitAuthError, match="refused") as info:
        repo.fetch()
    assert CANARY not in str(info.value)
    assert all(CANARY not in r.getMessage() for r in caplog.records)


def test_missing_key_file(ssh_url: str, ssh_home: Path, tmp_path: Path) -> None:
    repo = GitRepo(
        GitSettings(url=ssh_url, mirror_dir=tmp_path / "m", credentials=SshKey(tmp_path / "none"))
    )
    with pytest.raises(GitAuthError, match="SSH private key not found"):
        repo.fetch()


def test_unknown_host_key_is_refused_unless_verification_is_off(
    ssh_server: SshServer, ssh_url: str, tmp_path: Path
) -> None:
    import pygit2

    empty_home = tmp_path / "home"
    (empty_home / ".ssh").mkdir(parents=True)
    previous = pygit2.settings.homedir
    pygit2.settings.homedir = str(empty_home)
    try:
        strict = GitRepo(
            GitSettings(
                url=ssh_url, mirror_dir=tmp_path / "m", credentials=SshKey(ssh_server.client_key)
            )
        )
        with pytest.raises(GitAuthError, match="could not be verified"):
            strict.fetch()
        lax = GitRepo(
            GitSettings(
                url=ssh_url,
                mirror_dir=tmp_path / "m2",
                credentials=SshKey(ssh_server.client_key, verify_host=False),
            )
        )
        lax.fetch()
        assert lax.head("main") is not None
    finally:
        pygit2.settings.homedir = previous
