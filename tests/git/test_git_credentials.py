"""Credentials: refused passwords, missing credentials, SSH keys, unreachable remotes.

The canary value stands for a real token: it must never appear in an exception or a log line.
"""

from __future__ import annotations

import logging
import socket
import subprocess
from pathlib import Path

import pygit2
import pytest
from pygit2.enums import CredentialType

from gitopsbot.adapters.git import GitRepo, GitSettings
from gitopsbot.adapters.git_credentials import HttpsPassword, HttpsToken, SshKey, redact
from gitopsbot.adapters.git_transfer import TransferCallbacks as _Callbacks
from gitopsbot.errors import GitAuthError, GitError, GitUnavailable
from gitopsbot.sandbox.gitremote import GitRemote

CANARY = "CANARY-s3cr3t-7f1e"


@pytest.fixture
def fleet_url(http_remote: GitRemote, fleet_source: Path, request: pytest.FixtureRequest) -> str:
    return http_remote.create_fleet_repo(f"auth-{request.node.name}", fleet_source)


@pytest.mark.parametrize(
    "credentials",
    [HttpsPassword("fleet-bot", CANARY), HttpsToken(CANARY), HttpsToken(CANARY, "oauth2")],
    ids=["password", "token", "gitlab-token"],
)
def test_refused_credentials_are_auth_errors_without_the_secret(
    fleet_url: str,
    tmp_path: Path,
    credentials: HttpsPassword | HttpsToken,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    repo = GitRepo(GitSettings(url=fleet_url, mirror_dir=tmp_path / "m", credentials=credentials))
    with pytest.raises(GitAuthError) as info:
        repo.fetch()
    assert "refused" in str(info.value)
    assert CANARY not in str(info.value) and CANARY not in repr(info.value)
    assert CANARY not in repr(credentials)
    repo.commit_files("x", {"a": b"1"}, "x", parent=None)
    with pytest.raises(GitAuthError) as pushed:
        repo.push("x")
    assert CANARY not in str(pushed.value)
    assert caplog.records  # the adapter did log something; none of it is the secret
    assert all(CANARY not in r.getMessage() for r in caplog.records)


def test_credentials_in_the_url_are_redacted(
    http_remote: GitRemote, fleet_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    url = fleet_url.replace("http://", f"http://fleet-bot:{CANARY}@")
    repo = GitRepo(GitSettings(url=url, mirror_dir=tmp_path / "m"))
    with pytest.raises(GitError) as info:
        repo.fetch()
    assert CANARY not in str(info.value)
    assert all(CANARY not in r.getMessage() for r in caplog.records)
    assert redact(f"https://u:{CANARY}@host/x and {CANARY}", (CANARY,)) == (
        "https://***@host/x and ***"
    )


def test_missing_credentials_against_a_protected_remote(fleet_url: str, tmp_path: Path) -> None:
    repo = GitRepo(GitSettings(url=fleet_url, mirror_dir=tmp_path / "m"))
    with pytest.raises(GitAuthError, match="none configured"):
        repo.fetch()


def test_unreachable_remote_is_transient(tmp_path: Path) -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    repo = GitRepo(GitSettings(url=f"http://127.0.0.1:{port}/x.git", mirror_dir=tmp_path / "m"))
    with pytest.raises(GitUnavailable):
        repo.fetch()


def test_hung_remote_times_out_as_transient(tmp_path: Path) -> None:
    """A server that accepts the connection and never answers: GitUnavailable, not a hang."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        port = listener.getsockname()[1]
        repo = GitRepo(
            GitSettings(
                url=f"http://127.0.0.1:{port}/x.git",
                mirror_dir=tmp_path / "m",
                timeout_seconds=0.5,
            )
        )
        try:
            with pytest.raises(GitUnavailable, match="timed out"):
                repo.fetch()
        finally:
            GitRepo(GitSettings(url="file:///nonexistent", mirror_dir=tmp_path / "reset"))


# -- SSH: no SSH server can run here, so the plumbing is tested up to the handshake. -------


@pytest.fixture
def ssh_key(tmp_path: Path) -> Path:
    key = tmp_path / "id_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    return key


def test_ssh_key_becomes_a_keypair(ssh_key: Path) -> None:
    callbacks = _Callbacks(SshKey(ssh_key, passphrase=CANARY), "fetch (ssh://x)")
    cred = callbacks.credentials("ssh://git@host/x.git", "git", CredentialType.SSH_KEY)
    assert isinstance(cred, pygit2.Keypair)
    user, public, private, passphrase = cred.credential_tuple
    assert (user, public, private) == ("git", f"{ssh_key}.pub", str(ssh_key))
    assert passphrase == CANARY
    # A second request in the same operation means the server refused the key.
    with pytest.raises(GitAuthError, match="refused"):
        callbacks.credentials("ssh://git@host/x.git", "git", CredentialType.SSH_KEY)


def test_missing_ssh_key_is_an_auth_error(tmp_path: Path) -> None:
    callbacks = _Callbacks(SshKey(tmp_path / "nope"), "fetch (ssh://x)")
    with pytest.raises(GitAuthError, match="SSH private key not found"):
        callbacks.credentials("ssh://git@host/x.git", "git", CredentialType.SSH_KEY)


def test_ssh_key_against_an_https_only_request(ssh_key: Path) -> None:
    callbacks = _Callbacks(SshKey(ssh_key), "fetch")
    with pytest.raises(GitAuthError, match="takes none"):
        callbacks.credentials("https://h/x", None, CredentialType.USERPASS_PLAINTEXT)


def test_ssh_transport_is_wired(tmp_path: Path, ssh_key: Path) -> None:
    """libgit2 is built with SSH, and an ssh:// remote that is not there fails as a GitError."""
    assert pygit2.features & pygit2.enums.Feature.SSH
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    repo = GitRepo(
        GitSettings(
            url=f"ssh://git@127.0.0.1:{port}/fleet.git",
            mirror_dir=tmp_path / "m",
            credentials=SshKey(ssh_key, passphrase=CANARY),
        )
    )
    with pytest.raises(GitUnavailable, match="failed to connect") as info:
        repo.fetch()
    assert CANARY not in str(info.value)
