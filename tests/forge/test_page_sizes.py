"""The local forges page as each real one documents: the page size a list answers with when the
request names none, and the most it answers with whatever the request asks.

GitHub: ``per_page`` 30 by default, at most 100 (docs.github.com, "Using pagination in the
REST API"); GitLab: ``per_page`` 20 by default, at most 100 (docs.gitlab.com, "REST API
pagination"); Gitea: ``limit`` by its settings, ``[api] DEFAULT_PAGING_NUM`` 30 and
``MAX_RESPONSE_ITEMS`` 50. Small pages only where a test asks for them (``page_size``).
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator

import pytest

from gitopsbot.sandbox.forges.base import Comment, LocalForge, now_utc
from tests.forge.forge_harness import SERVERS, TOKEN

ITEMS = 130
# provider: (the list's path under the API root, page size parameter, default, maximum)
LISTS = {
    "github": ("/repos/acme/fleet/issues/1/comments", "per_page", 30, 100),
    "gitlab": ("/projects/acme%2Ffleet/merge_requests/1/notes", "per_page", 20, 100),
    "gitea": ("/repos/acme/fleet/pulls", "limit", 30, 50),
}


def _fill(server: LocalForge) -> None:
    """One request (number 1), then ITEMS comments on it (Gitea: ITEMS requests, since its
    comment list does not paginate)."""
    with server.lock:
        for i in range(ITEMS if server.name == "gitea" else 1):
            server.new_pull(head=f"b{i}", base="main", title=f"t{i}", body="")
        for _ in range(ITEMS if server.name != "gitea" else 0):
            now = now_utc()
            cid = server.next_id()
            server.comments[cid] = Comment(cid, 1, f"comment {cid}", now, now, author="alice")


def _get(server: LocalForge, path: str) -> tuple[list[object], dict[str, str]]:
    req = urllib.request.Request(server.api_url + path)
    req.add_header("Authorization", f"Bearer {TOKEN}")
    with urllib.request.urlopen(req, timeout=10) as answer:
        headers = {k.lower(): v for k, v in answer.headers.items()}
        body = json.loads(answer.read())
    assert isinstance(body, list)
    return body, headers


@pytest.fixture(params=sorted(LISTS))
def provider(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def full(provider: str) -> Iterator[LocalForge]:
    with SERVERS[provider](token=TOKEN) as server:
        _fill(server)
        yield server


def test_a_list_without_a_size_answers_the_documented_default(
    provider: str, full: LocalForge
) -> None:
    path, _param, default, _most = LISTS[provider]
    items, headers = _get(full, path)
    assert len(items) == default
    assert 'rel="next"' in headers["link"]
    if provider == "gitlab":
        assert headers["x-per-page"] == str(default) and headers["x-total"] == str(ITEMS)
    if provider == "gitea":
        assert headers["x-total-count"] == str(ITEMS)


def test_a_larger_size_than_the_forge_allows_gets_its_maximum(
    provider: str, full: LocalForge
) -> None:
    path, param, _default, most = LISTS[provider]
    items, _headers = _get(full, f"{path}?{param}=1000")
    assert len(items) == most
    rest, _headers = _get(full, f"{path}?{param}=1000&page=2")
    assert len(items) + len(rest) == min(ITEMS, 2 * most)
    assert len(_get(full, f"{path}?{param}=7")[0]) == 7  # below the maximum: as asked


def test_small_pages_only_where_a_test_asks(provider: str) -> None:
    path, param, _default, _most = LISTS[provider]
    with SERVERS[provider](token=TOKEN, page_size=2) as server:
        _fill(server)
        assert len(_get(server, path)[0]) == 2
        assert len(_get(server, f"{path}?{param}=100")[0]) == 2
