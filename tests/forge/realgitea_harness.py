"""The real Gitea as a forge under test: one fresh repository per test on the session's server.

``RealGiteaRepo`` offers the test controls the local forges offer (merge, approve, a foreign
request, webhooks, and reading comments, statuses and requests back), done the way a person
would: through Gitea's API as another user, never through the provider under test.

The repository ``acme/fleet-N`` is pushed over git-over-HTTP with ``main`` and the branches
the tests open requests from (a real forge has no request without a pushed branch). The bot
is a non-admin collaborator with write access whose token has only the scopes docs/forges.md
asks for; alice and bob are collaborators who approve.
"""

from __future__ import annotations

import os
import subprocess
import time
import urllib.error
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx

from gitopsbot.sandbox.forges.base import LoggedRequest, parse_iso
from gitopsbot.sandbox.realgitea import ADMIN_USER, RealGitea

OWNER = "acme"
# docs/forges.md: what a Gitea token of the bot needs.
BOT_SCOPES = ["write:repository", "write:issue"]
APPROVERS = ("alice", "bob")
# Every branch a forge test opens a request from: pushed with its own commit.
BRANCHES = ("gitopsbot/a-1.2.3", "gitopsbot/a", *(f"gitopsbot/c{i}" for i in range(7)))


@dataclass(frozen=True, slots=True)
class Merged:
    """What a merge click left: the request's merged time and merge commit, as the API says."""

    number: int
    merged_at: datetime
    merge_commit_sha: str


class RealGiteaSite:
    """The session's server, prepared once: the org, the bot and the approvers, their tokens,
    and a local git repository with every branch, pushed into each test's repository."""

    def __init__(self, gitea: RealGitea, work_dir: Path) -> None:
        self.gitea = gitea
        self.work_dir = work_dir
        self._repos = 0
        gitea.api("POST", "/orgs", {"username": OWNER, "visibility": "public"})
        self.tokens: dict[str, str] = {}
        for user in ("gitopsbot", *APPROVERS):
            gitea.create_user(user)
            scopes = BOT_SCOPES if user == "gitopsbot" else ["write:repository"]
            self.tokens[user] = gitea.create_token(user, scopes)
        self.source = work_dir / "source"
        self._make_source()

    def _git(self, *args: str, cwd: Path | None = None) -> str:
        env = {
            "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid",
            "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.invalid",
            "HOME": str(self.work_dir), "GIT_TERMINAL_PROMPT": "0", "PATH": os.environ["PATH"],
        }  # fmt: skip
        done = subprocess.run(
            ["git", *args], cwd=cwd or self.source, env=env, capture_output=True, text=True
        )
        if done.returncode != 0:
            raise AssertionError(f"git {args[0]} failed: {done.stderr[-800:]}")
        return done.stdout

    def _make_source(self) -> None:
        self.source.mkdir(parents=True)
        self._git("init", "-q", "-b", "main")
        (self.source / "README.md").write_text("fleet\n")
        self._git("add", "README.md")
        self._git("commit", "-q", "-m", "fleet")
        for branch in BRANCHES:
            # A file of its own on each branch: merged one after another, none conflicts.
            self._git("checkout", "-q", "-b", branch, "main")
            change = branch.replace("/", "-") + ".txt"
            (self.source / change).write_text(f"{branch}\n")
            self._git("add", change)
            self._git("commit", "-q", "-m", f"change on {branch}")
        self._git("checkout", "-q", "main")

    def new_repo(self) -> RealGiteaRepo:
        self._repos += 1
        name = f"fleet-{self._repos}"
        self.gitea.api("POST", f"/orgs/{OWNER}/repos", {"name": name, "default_branch": "main"})
        for user in ("gitopsbot", *APPROVERS):
            self.gitea.api(
                "PUT", f"/repos/{OWNER}/{name}/collaborators/{user}", {"permission": "write"}
            )
        push_url = self.gitea.url.replace(
            "://", f"://{ADMIN_USER}:{self.gitea.admin_token}@"
        ) + f"/{OWNER}/{name}.git"  # fmt: skip
        self._git("push", "-q", push_url, *(f"refs/heads/{b}" for b in ("main", *BRANCHES)))
        # Gitea takes the push in after answering it: until then the repository is "empty"
        # and its pull requests answer 404.
        deadline = time.monotonic() + 30
        while self.gitea.api("GET", f"/repos/{OWNER}/{name}")["empty"]:
            assert time.monotonic() < deadline, f"{OWNER}/{name}: still empty after the push"
            time.sleep(0.05)
        return RealGiteaRepo(self, name)


class RealGiteaRepo:
    """One test's repository on the real Gitea, with the local forges' test controls."""

    name = "gitea"

    def __init__(self, site: RealGiteaSite, repo: str) -> None:
        self.site = site
        self.gitea = site.gitea
        self.owner = OWNER
        self.repo = repo
        self.token = site.tokens["gitopsbot"]
        self.log: list[LoggedRequest] = []  # the provider's requests, as answered
        self._last_merge = 0

    @property
    def api_url(self) -> str:
        return self.gitea.api_url

    @property
    def url(self) -> str:
        return self.gitea.url

    def transport(self) -> httpx.BaseTransport:
        """For the provider's client: records each request it sends and the answer's status."""
        log = self.log

        class Recording(httpx.HTTPTransport):
            def handle_request(self, request: httpx.Request) -> httpx.Response:
                response = super().handle_request(request)
                log.append(LoggedRequest(request.method, request.url.path, response.status_code))
                return response

        return Recording()

    def _path(self, rest: str) -> str:
        return f"/repos/{self.owner}/{self.repo}{rest}"

    def _all(self, rest: str, query: str = "") -> list[Any]:
        return self.gitea.api_list(self._path(rest) + (f"?{query}" if query else ""))

    # -- reading back --------------------------------------------------------------------
    def comment_list(self, number: int) -> list[tuple[int, str]]:
        found = self._all(f"/issues/{number}/comments")
        return sorted((int(c["id"]), str(c["body"])) for c in found)

    def status_of(self, sha: str, context: str) -> str | None:
        combined = self.gitea.api("GET", self._path(f"/commits/{sha}/status"))
        states = [s["status"] for s in combined.get("statuses") or [] if s["context"] == context]
        return str(states[0]) if states else None

    def count_pulls_from(self, branch: str) -> int:
        return sum(1 for p in self._all("/pulls", "state=all") if p["head"]["ref"] == branch)

    # -- a person's clicks ---------------------------------------------------------------
    def grant(self, user: str, permission: str, *, bot_admin: bool = True) -> None:
        """``user`` (made on first use, with a token that may comment) gets ``permission``
        on this repository. ``bot_admin``: the bot is made a repository admin too, since
        Gitea tells a collaborator's permission only to an admin (or that collaborator)."""
        if user not in self.site.tokens:
            self.gitea.create_user(user)
            self.site.tokens[user] = self.gitea.create_token(
                user, ["write:repository", "write:issue"]
            )
        self.gitea.api("PUT", self._path(f"/collaborators/{user}"), {"permission": permission})
        if bot_admin:
            self.gitea.api("PUT", self._path("/collaborators/gitopsbot"), {"permission": "admin"})

    def say(self, number: int, user: str, body: str) -> int:
        """``user`` comments on request ``number`` (``grant`` made the account)."""
        created = self.gitea.api(
            "POST",
            self._path(f"/issues/{number}/comments"),
            {"body": body},
            token=self.site.tokens[user],
        )
        return int(created["id"])

    def new_pull(self, *, head: str, base: str, title: str, body: str) -> int:
        """A request opened by the admin (somebody else than the bot)."""
        created = self.gitea.api(
            "POST", self._path("/pulls"), {"head": head, "base": base, "title": title, "body": body}
        )
        return int(created["number"])

    def wait_checked(self, number: int) -> None:
        """Until Gitea has checked the request for conflicts: it answers ``mergeable: false``
        while checking (a second or so after the request is opened or its head moves), and
        refuses a merge then with 405 "Please try again later"."""
        deadline = time.monotonic() + 30
        while not self.gitea.api("GET", self._path(f"/pulls/{number}"))["mergeable"]:
            assert time.monotonic() < deadline, f"pull {number}: still not mergeable"
            time.sleep(0.05)

    def approve(self, number: int, user: str) -> None:
        self.gitea.api(
            "POST",
            self._path(f"/pulls/{number}/reviews"),
            {"event": "APPROVED", "body": "lgtm"},
            token=self.site.tokens[user],
        )

    def merge(self, number: int, *, at: datetime | None = None) -> Merged:
        """Click "Merge" now (``at`` cannot be chosen on a real server: it is ignored), in a
        later second than the previous merge so merge times order the merges."""
        deadline = time.monotonic() + 30
        while True:
            self.wait_checked(number)
            while int(time.time()) <= self._last_merge:
                time.sleep(0.05)
            try:
                self.gitea.api("POST", self._path(f"/pulls/{number}/merge"), {"Do": "merge"})
                break
            except urllib.error.HTTPError as e:
                # The previous merge moved the base branch: Gitea checks the request again in
                # the background and may still have answered "mergeable" from before; it then
                # refuses with 405 "Please try again later". A person clicks again.
                if e.code != 405 or time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        self._last_merge = int(time.time())
        pr = self.gitea.api("GET", self._path(f"/pulls/{number}"))
        return Merged(number, parse_iso(pr["merged_at"]), str(pr["merge_commit_sha"]))

    def add_webhook(self, url: str, secret: str) -> None:
        self.gitea.api(
            "POST",
            self._path("/hooks"),
            {
                "type": "gitea",
                "config": {"url": url, "content_type": "json", "secret": secret},
                "events": ["push", "pull_request"],
                "active": True,
            },
        )

    @property
    def hook_failures(self) -> list[str]:
        """Deliveries Gitea made and saw fail (it has no API listing them: its own table)."""
        import sqlite3

        con = sqlite3.connect(f"file:{self.gitea.database}?mode=ro", uri=True, timeout=10)
        try:
            rows = con.execute(
                "SELECT id FROM hook_task WHERE is_delivered = 1 AND is_succeed = 0"
            ).fetchall()
        finally:
            con.close()
        return [f"hook_task {r[0]}" for r in rows]
