"""Forge test helpers: the fake clock, the harness over each implementation, client factory."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta

import httpx

from gitopsbot.adapters.forge.connect import connect
from gitopsbot.adapters.forge.provider import ForgeProvider
from gitopsbot.core.forge.forge_types import PullRequestDraft, PullRequestState
from gitopsbot.sandbox.forges.base import LocalForge, LoggedRequest
from gitopsbot.sandbox.forges.gitea import GiteaForge as GiteaServer
from gitopsbot.sandbox.forges.github import GitHubForge as GitHubServer
from gitopsbot.sandbox.forges.gitlab import GitLabForge as GitLabServer
from gitopsbot.testing import FakeForge
from tests.forge.github_openapi import Recorder
from tests.forge.realgitea_harness import RealGiteaRepo

TOKEN = "ghp_CANARY0123456789abcdefCANARY"
SERVERS: dict[str, type[LocalForge]] = {
    "github": GitHubServer,
    "gitlab": GitLabServer,
    "gitea": GiteaServer,
}


@dataclass
class FakeClock:
    """An injected clock: sleeping only moves time and is recorded."""

    start: datetime = datetime(2026, 1, 1, tzinfo=UTC)
    offset: float = 0.0
    sleeps: list[float] = field(default_factory=list)

    def now(self) -> datetime:
        return self.start + timedelta(seconds=self.offset)

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.offset += max(seconds, 0.0)

    def monotonic(self) -> float:
        return self.offset


@dataclass
class Harness:
    """One forge implementation plus the controls a test needs (merge, approve, inspect)."""

    name: str
    forge: ForgeProvider | FakeForge
    clock: FakeClock
    server: LocalForge | None = None
    fake: FakeForge | None = None
    real: RealGiteaRepo | None = None  # the real Gitea (the ``realgitea`` tier)
    # Records what the provider sends and gets (the GitHub one: tests/forge/github_openapi.py).
    recorder: Recorder | None = None

    def reconnect(self) -> ForgeProvider | FakeForge:
        """A new client, as after a restart (the fake keeps its state: it *is* the forge)."""
        if self.real is not None:
            return make_client(self.real, self.clock)
        if self.server is None:
            return self.forge
        return make_client(self.server, self.clock, transport=self.recorder)

    @property
    def request_log(self) -> list[LoggedRequest] | None:
        """The provider's requests as a server saw them (None for the fake: no HTTP)."""
        if self.real is not None:
            return self.real.log
        return self.server.log if self.server is not None else None

    def merge(self, number: int, at: datetime) -> datetime:
        """Merge as a person would; returns the merged time the forge recorded: ``at``, except
        on a real server, whose clock decides (each merge there is in a later second)."""
        if self.real is not None:
            return self.real.merge(number).merged_at
        if self.server is not None:
            self.server.merge(number, at=at)
        else:
            assert self.fake is not None
            self.fake.merge(number, at=at)
        return at

    def wait_checked(self, number: int) -> None:
        """Until the forge has checked the request's mergeability (only a real Gitea checks
        in the background, and says "not mergeable" until it is done)."""
        if self.real is not None:
            self.real.wait_checked(number)

    def approve(self, number: int, user: str) -> None:
        if self.real is not None:
            self.real.approve(number, user)
        elif self.server is not None:
            self.server.approve(number, user)
        else:
            assert self.fake is not None
            pr = self.fake.pulls[number]
            self.fake.pulls[number] = replace(pr, approvals=pr.approvals + 1)

    def grant(self, user: str, permission: str) -> None:
        """``user`` gets ``permission`` (admin, write, read) on the repository."""
        if self.real is not None:
            self.real.grant(user, permission)
        elif self.server is not None:
            self.server.grant(user, permission)
        else:
            assert self.fake is not None
            if permission in ("admin", "write"):
                self.fake.writers.add(user)

    def say(self, number: int, user: str, body: str) -> int:
        """``user`` comments on request ``number``; the comment's id."""
        if self.real is not None:
            return self.real.say(number, user, body)
        if self.server is not None:
            return self.server.say(number, user, body).id
        assert self.fake is not None
        return self.fake.say(number, user, body).id

    def comments(self, number: int) -> list[str]:
        if self.real is not None:
            return [body for _id, body in self.real.comment_list(number)]
        if self.server is not None:
            found = [c for c in self.server.comments.values() if c.number == number]
            return [c.body for c in sorted(found, key=lambda c: c.id)]
        assert self.fake is not None
        return self.fake.comments_on(number)

    def comment_ids(self, number: int) -> list[int]:
        if self.real is not None:
            return [cid for cid, _body in self.real.comment_list(number)]
        if self.server is not None:
            return sorted(c.id for c in self.server.comments.values() if c.number == number)
        assert self.fake is not None
        return [c.id for c in self.fake.comments.get(number, [])]

    def status(self, sha: str, context: str = "gitopsbot/policy") -> str | None:
        if self.real is not None:
            return self.real.status_of(sha, context)
        if self.server is not None:
            found = [s for s in self.server.statuses if s.sha == sha and s.context == context]
            if not found:
                return None
            return {"failed": "failure"}.get(found[-1].state, found[-1].state)
        assert self.fake is not None
        state = self.fake.status_of(sha, context)
        return state.value if state else None

    def open_count(self, branch: str) -> int:
        if self.real is not None:
            return self.real.count_pulls_from(branch)
        if self.server is not None:
            return sum(1 for p in self.server.pulls.values() if p.head == branch)
        assert self.fake is not None
        return sum(
            1
            for p in self.fake.pulls.values()
            if p.branch == branch and p.state is PullRequestState.OPEN
        )

    def foreign_pull(self, branch: str) -> None:
        """Someone else's open request from ``branch``, without any gitopsbot marker."""
        if self.real is not None:
            self.real.new_pull(head=branch, base="main", title="by hand", body="mine")
        elif self.server is not None:
            self.server.new_pull(head=branch, base="main", title="by hand", body="mine")
        else:
            assert self.fake is not None
            pr = self.fake.open_or_update_pull_request(
                PullRequestDraft(
                    branch=branch, base="main", title="by hand", body="mine", marker="x"
                )
            )
            self.fake.pulls[pr.number] = replace(pr, marker="", body="mine")


def make_client(
    server: LocalForge | RealGiteaRepo,
    clock: FakeClock,
    token: str | None = None,
    *,
    transport: httpx.BaseTransport | None = None,
) -> ForgeProvider:
    """A provider for ``server``'s repository; its own token unless told (the local forges'
    is TOKEN, the canary); over ``transport`` when given (a ``Recorder``)."""
    if isinstance(server, RealGiteaRepo):
        return connect(
            "gitea",
            url=server.api_url,
            repository=f"{server.owner}/{server.repo}",
            token=token or server.token,
            clock=clock,
            transport=transport or server.transport(),
        )
    return connect(
        server.name,
        url=server.api_url,
        repository="acme/fleet",
        token=token or TOKEN,
        clock=clock,
        transport=transport,
    )
