"""How ``gitopsbot run`` wires a GitHub App (app/forge_access.py, app/git_access.py): the key
from gitopsbot.yaml's ``forge.app.privateKey`` (env), the forge client and Git sharing one
installation token source, the first fetch as the app in the environment, the key masked."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from gitopsbot.adapters.clock import SystemClock
from gitopsbot.adapters.git_credentials import HttpsToken, HttpsTokenSource
from gitopsbot.app.bot import forge_secrets
from gitopsbot.app.forge_access import connect_forge
from gitopsbot.app.git_access import git_credentials
from gitopsbot.core.fleet.settings_file import parse_settings
from gitopsbot.core.forge.forge_types import CommitState, CommitStatus
from gitopsbot.errors import ConfigError, SecretUnavailable
from gitopsbot.sandbox.forges.github import GitHubForge as GitHubServer
from gitopsbot.sandbox.forges.github_apps import new_app_key

APP_ID = 5150


@pytest.fixture(scope="module")
def keys() -> tuple[str, str]:
    return new_app_key()


@pytest.fixture
def server(keys: tuple[str, str]) -> Iterator[GitHubServer]:
    with GitHubServer(token="fixed-token-unused", owner="acme", repo="fleet") as srv:
        assert isinstance(srv, GitHubServer)
        srv.register_app(APP_ID, keys[1], installation_id=9)
        yield srv


def _settings(server: GitHubServer) -> str:
    return (
        f"forge:\n  kind: github\n  url: {server.api_url}\n  repository: acme/fleet\n"
        f"  app:\n    appId: {APP_ID}\n    privateKey: {{env: GITOPSBOT_GITHUB_APP_KEY}}\n"
    )


def test_run_connects_as_the_app_and_git_shares_its_tokens(
    server: GitHubServer, keys: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GITOPSBOT_GITHUB_APP_KEY", keys[0])
    monkeypatch.delenv("GITOPSBOT_GIT_TOKEN", raising=False)
    settings = parse_settings(_settings(server))
    access = connect_forge(settings, SystemClock())
    try:
        assert access.forge is not None and access.tokens is not None
        access.forge.set_status("b" * 40, CommitStatus(CommitState.PENDING, "d"))
        creds = git_credentials(
            "https://example.invalid/acme/fleet.git", settings, tokens=access.tokens
        )
        assert isinstance(creds, HttpsTokenSource) and creds.source is access.tokens
        assert creds.source.current() in server.apps.issued
        # An explicit GITOPSBOT_GIT_TOKEN still wins for Git.
        monkeypatch.setenv("GITOPSBOT_GIT_TOKEN", "ghp_explicit_0123")
        assert git_credentials("https://x/a/b.git", settings, tokens=access.tokens) == HttpsToken(
            "ghp_explicit_0123"
        )
    finally:
        assert access.close is not None
        access.close()
    # The key is masked in notifications like the token it replaces.
    assert keys[0] in forge_secrets(settings)


def test_a_missing_key_variable_is_named(
    server: GitHubServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("GITOPSBOT_GITHUB_APP_KEY", raising=False)
    with pytest.raises(
        SecretUnavailable, match=r"forge\.app\.privateKey \(env GITOPSBOT_GITHUB_APP_KEY\)"
    ):
        connect_forge(parse_settings(_settings(server)), SystemClock())


def test_the_first_fetch_authenticates_as_the_app_in_the_environment(
    server: GitHubServer, keys: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("GITOPSBOT_GIT_TOKEN", raising=False)
    monkeypatch.setenv("GITOPSBOT_GITHUB_APP_ID", str(APP_ID))
    monkeypatch.setenv("GITOPSBOT_GITHUB_APP_KEY", keys[0])
    monkeypatch.setenv("GITOPSBOT_GITHUB_API_URL", server.api_url)
    creds = git_credentials("https://git.example.invalid/acme/fleet.git")
    assert isinstance(creds, HttpsTokenSource)
    assert creds.source.current() in server.apps.issued
    assert ("GET", "/api/v3/repos/acme/fleet/installation", 200) in [
        (r.method, r.path, r.status) for r in server.log
    ]
    monkeypatch.setenv("GITOPSBOT_GITHUB_APP_ID", "my-app")
    with pytest.raises(ConfigError, match="GITOPSBOT_GITHUB_APP_ID: the App ID is a number"):
        git_credentials("https://git.example.invalid/acme/fleet.git")
