"""``notifications:`` in gitopsbot.yaml: read with defaults; every wrong entry named by file,
line and field (the URL never echoed); nothing applied while a problem remains; ``gitopsbot
validate`` reports them; a URL is resolved from its reference at start, and a bad one is a
ConfigError naming the target, not the value."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from gitopsbot.adapters.chat_notifier import resolve_targets
from gitopsbot.adapters.secrets import SecretResolver
from gitopsbot.cli import main
from gitopsbot.core.fleet.model import NOTIFICATION_EVENTS
from gitopsbot.core.fleet.settings_file import parse_settings
from gitopsbot.errors import ConfigError, FleetError

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "fleet"
TOKEN = "T000-B000-canaryXYZ123"

GOOD = """\
pollInterval: 30s
notifications:
  - kind: slack
    url: {env: GITOPSBOT_SLACK_WEBHOOK}
    on: [halted, failed, halted]
    clusters: ["prod-*"]
  - kind: webhook
    url:
      file: /var/run/secrets/ops-hook-url
"""


def test_read_with_defaults() -> None:
    slack, hook = parse_settings(GOOD).notifications
    assert (slack.kind, slack.on, slack.clusters, slack.line) == (
        "slack",
        ("halted", "failed"),
        ("prod-*",),
        3,
    )
    assert slack.label == "gitopsbot.yaml:3: notifications[0] (slack)"
    assert (slack.url.source, slack.url.name) == ("env", "GITOPSBOT_SLACK_WEBHOOK")
    assert hook.on == NOTIFICATION_EVENTS and hook.clusters == ()
    assert (hook.url.source, hook.url.name) == ("file", "/var/run/secrets/ops-hook-url")
    assert parse_settings("").notifications == ()


BAD = f"""\
notifications:
  - kind: slak
    url: https://hooks.slack.com/services/{TOKEN}
    on: [halted, faild]
    clusters: prod
  - url: {{env: X}}
    on: []
  - kind: webhook
    url: {{env: 1BAD}}
    colour: red
  - 3
"""


def test_bad_settings_name_file_line_and_field_and_never_the_url() -> None:
    with pytest.raises(FleetError) as caught:
        parse_settings(BAD)
    text = str(caught.value)
    assert TOKEN not in text
    for expected in (
        "gitopsbot.yaml:2:11: notifications[0].kind: 'slak' is not one of slack, webhook "
        "(did you mean 'slack'?)",
        "gitopsbot.yaml:3:10: notifications[0].url: a URL is not allowed here",
        "gitopsbot.yaml:4:18: notifications[0].on[1]: 'faild' is not one of",
        "gitopsbot.yaml:5:15: notifications[0].clusters: expected a list, got string",
        "gitopsbot.yaml:6:5: notifications[1].kind: required key is missing",
        "gitopsbot.yaml:7:9: notifications[1].on: names no event",
        "gitopsbot.yaml:9:",
        "notifications[2].url.env: not a valid environment variable name",
        "gitopsbot.yaml:10:5: notifications[2].colour: unknown key",
        "gitopsbot.yaml:11:5: notifications[3]: expected a mapping, got integer",
    ):
        assert expected in text, text


def test_notifications_must_be_a_list() -> None:
    with pytest.raises(FleetError, match=r"gitopsbot.yaml:1:16: notifications: expected a list"):
        parse_settings("notifications: {kind: slack}\n")


def test_validate_reports_bad_notification_settings(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fleet = tmp_path / "fleet"
    shutil.copytree(EXAMPLE, fleet)
    settings = fleet / "gitopsbot.yaml"
    settings.write_text(settings.read_text() + BAD)
    assert main(["validate", str(fleet)]) == 1
    err = capsys.readouterr().err
    assert "notifications[0].kind" in err and "notifications[0].on[1]" in err
    assert TOKEN not in err
    settings.write_text(settings.read_text().replace(BAD, GOOD.replace("pollInterval: 30s\n", "")))
    assert main(["validate", str(fleet)]) == 0, capsys.readouterr().err


def test_urls_are_resolved_at_start_and_a_bad_one_names_the_target() -> None:
    (slack, _) = parse_settings(GOOD).notifications
    env = {"GITOPSBOT_SLACK_WEBHOOK": f"https://hooks.example/{TOKEN}"}
    resolver = SecretResolver(environment=env.get)
    ((target, url),) = resolve_targets([slack], resolver)
    assert target is slack and url.endswith(TOKEN)
    env["GITOPSBOT_SLACK_WEBHOOK"] = f"hooks.example/{TOKEN}"  # no scheme
    with pytest.raises(ConfigError) as caught:
        resolve_targets([slack], resolver)
    label = "gitopsbot.yaml:3: notifications[0] (slack)"
    assert f"{label}: url: the value is not an http(s) URL" in str(caught.value)
    assert TOKEN not in str(caught.value)
    del env["GITOPSBOT_SLACK_WEBHOOK"]
    with pytest.raises(ConfigError, match=r"notifications\[0\] \(slack\): url: .*not set"):
        resolve_targets([slack], resolver)


DOC = Path(__file__).resolve().parents[2] / "docs" / "notifications.md"


def test_the_docs_example_loads_and_its_errors_are_real() -> None:
    text = DOC.read_text()
    snippet = text.split("<!-- file: gitopsbot.yaml -->\n```yaml\n", 1)[1].split("```", 1)[0]
    slack, hook = parse_settings(snippet).notifications
    assert slack.clusters == ("gpu-prod-*",) and hook.kind == "webhook"
    with pytest.raises(FleetError) as caught:
        parse_settings(BAD)
    shown = text.split("one remains):\n\n```\n", 1)[1].split("```", 1)[0]
    for line in shown.splitlines():
        assert line in str(caught.value), line
