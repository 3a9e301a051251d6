"""Pagination under conditional GETs: a page 2 that appears behind an unchanged page 1.

The bug this guards: page 1 of the comments was cached with no "next" link; the bot's own
comment then landed on a new page 2; page 1's body did not change, so a body-only ETag
answered 304 and the client reused the cached (stale, Link-less) headers, stopped at page 1,
never saw its comment and created another one on every upsert.

Real HTTP on loopback against the local GitHub forge, in three server flavours: GitHub's
(the ETag covers body and Link, Link repeated on a 304), a lax ETag that still sends Link on
a 304, and a lax ETag with a bare 304 (the client must then ask for the page after a full
cached page itself).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from gitopsbot.core.forge.forge_types import PullRequestDraft
from gitopsbot.sandbox.forges.base import Comment, now_utc
from gitopsbot.sandbox.forges.github import GitHubForge as GitHubServer
from tests.forge.forge_harness import TOKEN, FakeClock, make_client

MARKER = "plan/a"

# (ETag covers headers, headers on a 304, page size)
FLAVOURS = {
    "github": (True, True, 2),
    "lax-etag-link-on-304": (False, True, 2),
    # The client asks for per_page=100: only a page that full is known to be "full".
    "lax-etag-bare-304": (False, False, 100),
}


@pytest.fixture(params=sorted(FLAVOURS))
def server(request: pytest.FixtureRequest) -> Iterator[GitHubServer]:
    covers, on_304, page_size = FLAVOURS[request.param]
    srv = GitHubServer(token=TOKEN, page_size=page_size)
    srv.etag_covers_headers = covers
    srv.headers_on_304 = on_304
    with srv:
        yield srv


def _human_comment(srv: GitHubServer, number: int, text: str) -> None:
    with srv.lock:
        cid = srv.next_id()
        now = now_utc()
        srv.comments[cid] = Comment(cid, number, text, now, now)


def _bot_bodies(srv: GitHubServer, number: int) -> list[str]:
    with srv.lock:
        found = sorted((c for c in srv.comments.values() if c.number == number), key=lambda c: c.id)
        return [c.body for c in found if MARKER in c.body]


def test_a_new_page_behind_an_unchanged_page_one_does_not_duplicate_the_comment(
    server: GitHubServer, clock: FakeClock
) -> None:
    forge = make_client(server, clock)
    pr = forge.open_or_update_pull_request(
        PullRequestDraft(branch="gitopsbot/a", base="main", title="t", body="b", marker="a/1")
    )
    for i in range(server.page_size):  # page 1 is full, and the only page
        _human_comment(server, pr.number, f"human {i}")
    forge.upsert_comment(pr.number, marker=MARKER, body="plan v1")  # lands on a new page 2
    assert len(_bot_bodies(server, pr.number)) == 1
    forge.upsert_comment(pr.number, marker=MARKER, body="plan v2")  # page 1 is unchanged
    forge.upsert_comment(pr.number, marker=MARKER, body="plan v3")
    bodies = _bot_bodies(server, pr.number)
    assert len(bodies) == 1, bodies
    assert "plan v3" in bodies[0]

    # Once settled, an upsert with nothing new is answered by 304s only: free on GitHub.
    forge.upsert_comment(pr.number, marker=MARKER, body="plan v3")
    counted = server.counted_requests
    forge.upsert_comment(pr.number, marker=MARKER, body="plan v3")
    assert server.counted_requests == counted
    assert len(_bot_bodies(server, pr.number)) == 1
