"""Pure forge values: markers, and splitting a long plan into marked comment parts.

Aspects: marker round trip and validation; a body already carrying a marker is not doubled;
split parts respect the limit, keep every line, and close/reopen code fences across cuts;
an overlong single line is cut hard; docs/forges.md's example runs.
"""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import pytest

from gitopsbot.adapters.forge._http import ForgeHttp
from gitopsbot.core.forge.forge_types import (
    MarkerTag,
    check_marker,
    find_marker,
    marker_comment,
    split_comment,
    with_marker,
)
from gitopsbot.errors import ForgeFailed
from tests.forge.forge_harness import FakeClock

DOCS = Path(__file__).resolve().parents[2] / "docs" / "forges.md"


def test_marker_round_trip_and_validation() -> None:
    assert find_marker("x\n" + marker_comment("prod-a/1.2.4")) == MarkerTag("prod-a/1.2.4")
    assert find_marker(marker_comment("plan", part=2, of=3)) == MarkerTag("plan", 2, 3)
    assert find_marker("no marker <!-- other -->") is None
    with pytest.raises(ValueError, match="marker"):
        check_marker("has space")
    with pytest.raises(ValueError, match="marker"):
        check_marker("--> injected")


def test_with_marker_does_not_double_it() -> None:
    once = with_marker("body", "m")
    assert with_marker(once, "m") == once
    assert once.count("gitopsbot:m") == 1


def test_split_keeps_every_line_and_repairs_code_fences() -> None:
    body = "intro\n```diff\n" + "".join(f"+ line {i}\n" for i in range(400)) + "```\noutro\n"
    parts = split_comment(body, "plan", limit=1500)
    assert len(parts) > 3
    assert all(len(p) <= 1500 for p in parts)
    for p in parts:  # each part renders on its own: fences balanced
        assert p.count("```") % 2 == 0, p
    kept = [ln for p in parts for ln in p.splitlines() if ln.startswith("+ line")]
    assert kept == [f"+ line {i}" for i in range(400)]
    assert [find_marker(p) for p in parts] == [
        MarkerTag("plan", i, len(parts)) for i in range(1, len(parts) + 1)
    ]


def test_short_body_is_one_part_and_overlong_line_is_cut() -> None:
    assert split_comment("short", "plan") == [with_marker("short", "plan")]
    parts = split_comment("x" * 5000, "plan", limit=1000)
    assert all(len(p) <= 1000 for p in parts)
    assert "".join(re.sub(r"[^x]", "", p) for p in parts) == "x" * 5000


def test_pagination_never_follows_a_link_to_another_host() -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        assert request.url.host == "forge.test", "the auth header must not leave the forge"
        link = '<https://evil.test/steal?page=2>; rel="next"'
        return httpx.Response(200, json=[{"n": 1}], headers={"Link": link})

    http = ForgeHttp(
        provider="github",
        base_url="https://forge.test/api/v3",
        token="t",
        auth_header=("Authorization", "Bearer t"),
        clock=FakeClock(),
        transport=httpx.MockTransport(answer),
    )
    with pytest.raises(ForgeFailed, match="leaves"):
        list(http.pages("repos/a/b/pulls"))


def test_docs_example_runs() -> None:
    code = re.findall(r"```python\n(.*?)```", DOCS.read_text(), re.S)
    assert code, "docs/forges.md has a python example"
    exec(compile(code[0], str(DOCS), "exec"), {})
