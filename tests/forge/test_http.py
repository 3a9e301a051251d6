"""The HTTP choke point against the local forges: retries, rate limits, 304s, pacing, secrets.

Aspects: a create whose answer is lost is retried without a duplicate; 403 secondary limit
and 429 honour Retry-After on the injected clock; too long a wait surfaces ForgeRateLimited;
5xx is retried then surfaces; 304 answers from the cache and costs nothing on GitHub; writes
are paced to at most 80 a minute; the token never appears in URLs, logs or errors.
"""

from __future__ import annotations

import logging
import socket

import pytest

from gitopsbot.adapters.forge._http import WriteBucket
from gitopsbot.adapters.forge.connect import connect
from gitopsbot.adapters.forge.provider import ForgeProvider
from gitopsbot.core.forge.forge_types import PullRequestDraft, PullRequestInfo
from gitopsbot.errors import (
    ForgeRateLimited,
    ForgeServerError,
    ForgeUnauthorized,
)
from gitopsbot.sandbox.forges.base import Fault, LocalForge
from gitopsbot.sandbox.forges.github import GitHubForge as GitHubServer
from tests.forge.forge_harness import TOKEN, FakeClock, make_client

CREATE = r"/(pulls|merge_requests)$"


def _open(forge: ForgeProvider, branch: str = "gitopsbot/a") -> PullRequestInfo:
    return forge.open_or_update_pull_request(
        PullRequestDraft(branch=branch, base="main", title="t", body="b", marker="a/1")
    )


def test_lost_create_answer_is_retried_without_duplicate(
    server: LocalForge, clock: FakeClock
) -> None:
    server.inject(Fault(status=0, method="POST", path=CREATE))  # created, then the line drops
    pr = _open(make_client(server, clock))
    assert [p.number for p in server.pulls.values()] == [pr.number]
    posts = [
        r for r in server.log if r.method == "POST" and r.path.endswith(("pulls", "merge_requests"))
    ]
    assert [r.status for r in posts] == [0, 422 if server.name == "github" else 409]


@pytest.mark.parametrize("status", [403, 429])
def test_rate_limit_with_retry_after_is_honoured(
    server: LocalForge, clock: FakeClock, status: int
) -> None:
    server.inject(Fault(status=status, method="POST", path=CREATE, retry_after=7))
    pr = _open(make_client(server, clock))
    assert pr.number in server.pulls
    assert 7.0 in clock.sleeps


def test_github_secondary_limit_without_retry_after_waits_a_minute(clock: FakeClock) -> None:
    with GitHubServer(token=TOKEN) as srv:
        srv.throttle(method="POST", retry_after=None)  # the switch the demo uses
        _open(make_client(srv, clock))
        assert [r.status for r in srv.log if r.method == "POST"][:2] == [403, 201]
    assert 60.0 in clock.sleeps


def test_github_primary_limit_waits_until_reset(clock: FakeClock) -> None:
    reset = int(clock.now().timestamp()) + 30
    headers = {"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": str(reset)}
    with GitHubServer(token=TOKEN) as srv:
        srv.inject(
            Fault(
                status=403,
                method="GET",
                body={"message": "API rate limit exceeded"},
                headers=headers,
            )
        )
        make_client(srv, clock).find_pull_request("gitopsbot/a", "a/1")
    assert clock.sleeps == [30.0]


def test_too_long_a_wait_surfaces_rate_limited(server: LocalForge, clock: FakeClock) -> None:
    server.inject(Fault(status=429, method="POST", path=CREATE, retry_after=3600))
    with pytest.raises(ForgeRateLimited) as err:
        _open(make_client(server, clock))
    assert err.value.retry_after == 3600
    assert not server.pulls


def test_server_errors_are_retried_with_backoff_then_surface(
    server: LocalForge, clock: FakeClock
) -> None:
    forge = make_client(server, clock)
    pr = _open(forge)
    server.inject(Fault(status=502, times=2, method="GET"))
    assert forge.get_pull_request(pr.number).number == pr.number
    assert clock.sleeps[-2:] == [1.0, 2.0]
    server.inject(Fault(status=503, times=10, method="GET"))
    with pytest.raises(ForgeServerError, match="503"):
        forge.get_pull_request(pr.number)


def test_idle_poll_costs_nothing_on_github(clock: FakeClock) -> None:
    with GitHubServer(token=TOKEN) as srv:
        forge = make_client(srv, clock)
        pr = _open(forge)
        srv.merge(pr.number)

        def poll() -> None:
            forge.find_pull_request("gitopsbot/a", "a/1")
            forge.get_pull_request(pr.number)
            forge.list_merged_since(clock.start)

        poll()
        counted = srv.counted_requests
        poll()
        poll()
        assert srv.counted_requests == counted  # every request of the idle polls was a 304
        assert forge.http.stats.not_modified >= 6
        srv.approve(pr.number, "alice")  # a change is seen, not served stale from the cache
        assert forge.get_pull_request(pr.number).approvals == 1


def test_writes_never_exceed_80_in_any_minute() -> None:
    clock = FakeClock()
    bucket = WriteBucket(clock, per_minute=80, burst=8)
    times = []
    for _ in range(400):
        bucket.take()
        times.append(clock.monotonic())
    worst = max(sum(1 for t in times if start <= t < start + 60.0) for start in times)
    assert worst <= 80
    assert worst >= 75  # and the bucket does not throttle far below the limit


def test_bad_token_is_unauthorized_and_never_echoed(server: LocalForge, clock: FakeClock) -> None:
    canary = "glpat" + "-CANARY-should-never-appear-42"  # in pieces: not a real-token shape in Git
    forge = make_client(server, clock, token=canary)
    with pytest.raises(ForgeUnauthorized) as err:
        _open(forge)
    assert "401" in str(err.value)
    assert canary not in repr(err.value) and canary not in str(err.value.__cause__)


def test_token_canary_absent_from_urls_logs_and_errors(
    server: LocalForge, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)  # includes httpx/httpcore's own loggers
    forge = make_client(server, clock)
    pr = _open(forge)
    forge.upsert_comment(pr.number, marker="plan", body="plan")
    server.inject(Fault(status=500, times=10))
    errors: list[BaseException] = []
    try:
        forge.get_pull_request(pr.number)
    except ForgeServerError as exc:
        errors.append(exc)
    # A refused connection: httpx's own exception text must not carry the token either.
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dead = connect(
        server.name,
        url=f"http://127.0.0.1:{port}",
        repository="acme/fleet",
        token=TOKEN,
        clock=clock,
    )
    with pytest.raises(ForgeServerError) as refused:
        dead.get_pull_request(1)
    errors.append(refused.value)
    assert errors and len(caplog.records) > 0
    texts = [r.getMessage() for r in caplog.records] + [repr(e) for e in errors]
    texts += [str(e.__cause__) + str(e.__context__) for e in errors]
    assert not [t for t in texts if TOKEN in t]
    assert not [r for r in server.log if TOKEN in r.path]
