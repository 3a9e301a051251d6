"""``forge.app`` in gitopsbot.yaml: the fields, and each bad input located (file, line, field)."""

from __future__ import annotations

import pytest

from gitopsbot.core.fleet.model import GitHubAppSettings, SecretRef
from gitopsbot.core.fleet.settings_file import parse_settings
from gitopsbot.errors import FleetError

HEAD = "forge:\n  kind: github\n  repository: acme/fleet\n"


def test_app_fields() -> None:
    text = HEAD + (
        "  app:\n    appId: 12345\n    installationId: 678\n"
        "    privateKey: {env: GITOPSBOT_GITHUB_APP_KEY}\n"
    )
    app = parse_settings(text).forge.app
    assert app == GitHubAppSettings(
        app_id=12345,
        private_key=SecretRef(
            "gitopsbot.yaml:7: forge.app.privateKey", "env", "GITOPSBOT_GITHUB_APP_KEY"
        ),
        installation_id=678,
    )
    assert parse_settings(HEAD).forge.app is None


@pytest.mark.parametrize(
    ("text", "where"),
    [
        (
            HEAD + "  token: {env: T}\n  app: {appId: 1, privateKey: {env: K}}\n",
            "gitopsbot.yaml:5:8: forge.app: give forge.token or forge.app, not both",
        ),
        (
            "forge:\n  kind: gitlab\n  repository: a/b\n  app: {appId: 1, privateKey: {env: K}}\n",
            "gitopsbot.yaml:4:8: forge.app: a GitHub App needs kind github, not gitlab",
        ),
        (HEAD + "  app: {privateKey: {env: K}}\n", "forge.app.appId: required key is missing"),
        (HEAD + "  app: {appId: one, privateKey: {env: K}}\n", "forge.app.appId: expected an"),
        (HEAD + "  app: {appId: 1}\n", "forge.app.privateKey: required key is missing"),
        (
            HEAD + "  app:\n    appId: 1\n    privateKey: {kubernetesSecret: {name: a, key: b}}\n",
            "gitopsbot.yaml:6:17: forge.app.privateKey: the app's key must reach the bot's own",
        ),
        (HEAD + "  app: {appId: 1, privateKey: {env: K}, bogus: 2}\n", "forge.app.bogus: unknown"),
    ],
)
def test_bad_app_settings_are_located(text: str, where: str) -> None:
    with pytest.raises(FleetError) as e:
        parse_settings(text)
    assert where in str(e.value)
