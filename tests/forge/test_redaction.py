"""Secrets are masked in messages without mangling the text around a very short token."""

from __future__ import annotations

import httpx
import pytest

from gitopsbot.adapters.forge._http import ForgeHttp
from gitopsbot.adapters.git_credentials import redact
from gitopsbot.adapters.redaction import redact_secrets
from gitopsbot.errors import ForgeError
from tests.forge.forge_harness import FakeClock

CANARY = "ghp_canary0123456789"


def test_long_secret_is_masked_everywhere_even_inside_words() -> None:
    assert redact_secrets(f"a{CANARY}b {CANARY}", [CANARY]) == "a***b ***"


def test_short_secret_is_masked_only_as_a_whole_token() -> None:
    text = "push to example-org/fleet refused for token x (x)"
    assert redact_secrets(text, ["x"]) == "push to example-org/fleet refused for token *** (***)"


def test_git_redact_keeps_text_around_a_short_token() -> None:
    out = redact("https://user:x@git.example-org.test/fleet.git: x rejected", ("x",))
    assert out == "https://***@git.example-org.test/fleet.git: *** rejected"


def test_forge_error_message_is_not_mangled_by_a_short_token() -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(422, json={"message": "example-org/fleet: branch exists"})

    http = ForgeHttp(
        provider="github",
        base_url="https://forge.test/api/v3",
        token="x",
        auth_header=("Authorization", "Bearer x"),
        clock=FakeClock(),
        transport=httpx.MockTransport(answer),
    )
    with pytest.raises(ForgeError) as info:
        http.send("POST", "repos/example-org/fleet/git/refs", json={})
    assert "example-org/fleet: branch exists" in str(info.value)
    assert "e***ample" not in str(info.value)


def test_forge_error_message_masks_a_long_token() -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(422, json={"message": f"bad credentials {CANARY}"})

    http = ForgeHttp(
        provider="github",
        base_url="https://forge.test/api/v3",
        token=CANARY,
        auth_header=("Authorization", f"Bearer {CANARY}"),
        clock=FakeClock(),
        transport=httpx.MockTransport(answer),
    )
    with pytest.raises(ForgeError) as info:
        http.send("POST", "repos/a/b/pulls", json={})
    assert CANARY not in str(info.value)
    assert "bad credentials ***" in str(info.value)
