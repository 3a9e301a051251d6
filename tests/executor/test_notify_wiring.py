"""``gitopsbot run`` wires the chat notifier (issue #12 part 8): ``build_bot`` reads the
webhook URLs from their references and adds the notifier to the announcer's listeners, next to
the others; an unset reference stops the start with a one-line message naming the entry, never
the URL; the forge token is among the secrets masked in messages."""

from __future__ import annotations

from pathlib import Path

import pytest

from gitopsbot import app
from gitopsbot.adapters.chat_notifier import Notifier
from gitopsbot.cli import main
from tests.executor.conftest import Env

URL_TOKEN = "hook-url-canary-77c1"
SETTINGS = (
    "watchedBranch: main\nstateBranch: gitopsbot/state\npollInterval: 1h\n"
    "forge:\n  kind: github\n  url: http://127.0.0.1:9\n  repository: acme/fleet\n"
    "  token:\n    env: TEST_NOTIFY_FORGE_TOKEN\n"
    "notifications:\n"
    "  - kind: slack\n"
    "    url: {env: TEST_NOTIFY_SLACK_URL}\n"
)


@pytest.fixture(autouse=True)
def _helm_and_kubectl(binaries: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GITOPSBOT_HELM", str(binaries["helm4"]))
    monkeypatch.setenv("GITOPSBOT_KUBECTL", str(binaries["kubectl"]))
    monkeypatch.setenv("TEST_NOTIFY_FORGE_TOKEN", "forge-token-canary-19af")


def test_build_bot_adds_the_notifier(
    env: Env, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env.human.commit("notifications", {"gitopsbot.yaml": SETTINGS})
    monkeypatch.setenv("TEST_NOTIFY_SLACK_URL", f"http://127.0.0.1:9/hooks/{URL_TOKEN}")
    bot = app.build_bot(app.RunOptions(fleet_url=env.url, cache=tmp_path / "cache", push=False))
    try:
        assert isinstance(bot.notifier, Notifier)
        assert bot.notifier in bot.reconciler.announcer.listeners
        assert "forge-token-canary-19af" in bot.notifier._secrets
    finally:
        bot.close(timeout=1.0)


def test_an_unset_url_stops_the_start_naming_the_entry(
    env: Env, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    env.human.commit("notifications", {"gitopsbot.yaml": SETTINGS})
    monkeypatch.setenv("GITOPSBOT_CACHE", str(env.tmp / "cli-cache"))
    monkeypatch.delenv("TEST_NOTIFY_SLACK_URL", raising=False)
    assert main(["run", "--fleet-url", env.url, "--once"]) != 0
    err = capsys.readouterr().err
    line = SETTINGS.splitlines().index("  - kind: slack") + 1
    assert err.startswith(
        f"gitopsbot run: gitopsbot.yaml:{line}: notifications[0] (slack): url: "
    ), err
    assert "TEST_NOTIFY_SLACK_URL" in err and "not set" in err and len(err.splitlines()) == 1
