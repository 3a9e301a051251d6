"""``chartRegistries`` in gitopsbot.yaml: the logins of OCI chart registries, their password a
secret reference on the bot's machine; refused with file, line and field otherwise (and a
password written in the file is never echoed)."""

from __future__ import annotations

import pytest

from gitopsbot.core.fleet.model import ChartRegistry, SecretRef
from gitopsbot.core.fleet.settings_file import parse_settings
from gitopsbot.errors import FleetError


def test_a_registry_login_is_read() -> None:
    text = (
        "chartRegistries:\n"
        "  - host: registry.example.com:5000\n"
        "    username: gitopsbot\n"
        "    password:\n"
        "      env: GITOPSBOT_REGISTRY_PASSWORD\n"
        "  - host: ghcr.io\n"
        "  - host: 127.0.0.1:5077\n"
        "    plainHttp: true\n"
    )
    assert parse_settings(text).chart_registries == (
        ChartRegistry(
            host="registry.example.com:5000",
            username="gitopsbot",
            password=SecretRef(
                "gitopsbot.yaml:5: chartRegistries[0].password",
                "env",
                "GITOPSBOT_REGISTRY_PASSWORD",
            ),
        ),
        ChartRegistry(host="ghcr.io"),
        ChartRegistry(host="127.0.0.1:5077", plain_http=True),
    )
    assert parse_settings("").chart_registries == ()


@pytest.mark.parametrize(
    ("entry", "expected"),
    [
        (
            "  - host: oci://registry.example.com\n",
            "gitopsbot.yaml:2:11: chartRegistries[0].host: not a valid registry host",
        ),
        (
            "  - host: r.example.com\n    username: bot\n    password: hunter2-literal\n",
            "gitopsbot.yaml:4:15: chartRegistries[0].password: a password is not allowed here",
        ),
        (
            "  - host: r.example.com\n    username: bot\n    password:\n"
            "      kubernetesSecret: {name: s, key: k}\n",
            "chartRegistries[0].password: the registry password must be on the bot's machine",
        ),
        (
            "  - host: r.example.com\n    username: bot\n",
            "chartRegistries[0]: give both username and password, or neither",
        ),
        (
            "  - host: r.example.com\n  - host: r.example.com\n",
            "chartRegistries[1].host: 'r.example.com' is listed twice",
        ),
        (
            "  - host: r.example.com\n    plainHttp: yes\n",
            "chartRegistries[0].plainHttp: expected true or false, got string",
        ),
        (
            "  - host: r.example.com\n    user: bot\n",
            "chartRegistries[0].user: unknown key",
        ),
    ],
    ids=["url-not-host", "literal-password", "kubernetes-secret", "half-login", "twice",
         "plain-http-string", "unknown-key"],
)  # fmt: skip
def test_a_wrong_entry_is_refused_where_it_is(entry: str, expected: str) -> None:
    with pytest.raises(FleetError) as refused:
        parse_settings("chartRegistries:\n" + entry)
    text = str(refused.value)
    assert expected in text
    assert "hunter2-literal" not in text
