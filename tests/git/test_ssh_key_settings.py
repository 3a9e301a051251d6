"""The composition root turns gitopsbot.yaml's ``git.sshKey`` into SshKey credentials for the
fleet remote (a unit: no SSH server needed; tests/git/test_ssh.py covers the transport)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gitopsbot import app
from gitopsbot.adapters.git_credentials import HttpsToken, SshKey
from gitopsbot.core.fleet.model import BotSettings, GitAccessSettings, SecretRef
from gitopsbot.errors import ConfigError

SSH_URL = "ssh://git@git.example.com/fleet.git"
CANARY = "canary-private-key-material-9f3c"


@pytest.fixture
def key_file(tmp_path: Path) -> Path:
    key = tmp_path / "deploy_key"
    key.write_text("-----BEGIN OPENSSH " + f"PRIVATE KEY-----\n{CANARY}\n")
    key.chmod(0o600)
    return key


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (app.TOKEN_ENV, app.SSH_KEY_ENV, "DEPLOY_KEY_PATH"):
        monkeypatch.delenv(name, raising=False)


def with_key(ref: SecretRef) -> BotSettings:
    return BotSettings(git=GitAccessSettings(ssh_key=ref))


def test_file_ref_builds_ssh_key_credentials(key_file: Path) -> None:
    creds = app.git_credentials(SSH_URL, with_key(SecretRef("", "file", str(key_file))))
    assert creds == SshKey(private_key=key_file)
    assert CANARY not in repr(creds)


def test_env_ref_names_the_key_file(key_file: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DEPLOY_KEY_PATH", str(key_file))
    creds = app.git_credentials(
        "git@git.example.com:org/fleet.git", with_key(SecretRef("", "env", "DEPLOY_KEY_PATH"))
    )
    assert creds == SshKey(private_key=key_file)


def test_settings_key_wins_over_the_bootstrap_environment(
    key_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(app.SSH_KEY_ENV, str(tmp_path / "bootstrap_key"))
    assert app.git_credentials(SSH_URL) == SshKey(private_key=tmp_path / "bootstrap_key")
    configured = app.git_credentials(SSH_URL, with_key(SecretRef("", "file", str(key_file))))
    assert configured == SshKey(private_key=key_file)


def test_https_urls_keep_using_the_token(key_file: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(app.TOKEN_ENV, "tok")
    settings = with_key(SecretRef("", "file", str(key_file)))
    assert app.git_credentials("https://git.example.com/fleet.git", settings) == HttpsToken("tok")


def test_no_key_configured_means_no_credentials() -> None:
    assert app.git_credentials(SSH_URL, BotSettings()) is None


@pytest.mark.parametrize(
    ("ref", "message"),
    [
        (
            SecretRef("", "file", "/nonexistent/deploy_key"),
            "no SSH private key file at /nonexistent/deploy_key",
        ),
        (SecretRef("", "env", "DEPLOY_KEY_PATH"), "DEPLOY_KEY_PATH is not set"),
    ],
    ids=["missing-file", "unset-env"],
)
def test_unusable_reference_is_a_config_error(ref: SecretRef, message: str) -> None:
    with pytest.raises(ConfigError, match=r"git\.sshKey") as info:
        app.git_credentials(SSH_URL, with_key(ref))
    assert message in str(info.value)


@pytest.mark.parametrize(
    ("url", "ssh"),
    [
        ("ssh://git@h/r.git", True),
        ("git@github.com:org/r.git", True),
        ("github.com:org/r.git", True),
        ("https://github.com/org/r.git", False),
        ("https://user@github.com/org/r.git", False),
        ("file:///tmp/r.git", False),
        ("/tmp/r.git", False),
    ],
)
def test_ssh_url_detection(url: str, ssh: bool) -> None:
    assert app.is_ssh_url(url) is ssh
