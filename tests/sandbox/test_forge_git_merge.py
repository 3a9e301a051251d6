"""The local forges with the sandbox Git remote behind them: a pull request's head is its
branch's pushed tip (refreshed on a new push), each provider's merge endpoint makes a real
commit in the repository (GitHub merge/squash/rebase, GitLab merge/squash under its project
merge methods, Gitea merge/squash/rebase/rebase-merge) and moves the base branch, the sha
guard refuses a stale head as each provider answers, a merged request cannot be merged again,
and a request whose head reaches the base branch by a plain push shows merged, with the merged
event delivered to the webhook.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from gitopsbot.sandbox.forges.base import LocalForge
from gitopsbot.sandbox.forges.gitea import GiteaForge
from gitopsbot.sandbox.forges.github import GitHubForge
from gitopsbot.sandbox.forges.gitlab import GitLabForge
from gitopsbot.sandbox.gitremote import GitRemote

# slow: each test runs the command line, a Git remote or real helm in subprocesses (seconds)
pytestmark = pytest.mark.slow

TOKEN = "tok"
GIT_ENV = {
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_AUTHOR_NAME": "Alice",
    "GIT_AUTHOR_EMAIL": "alice@example.com",
    "GIT_COMMITTER_NAME": "Alice",
    "GIT_COMMITTER_EMAIL": "alice@example.com",
    "GIT_TERMINAL_PROMPT": "0",
}


def git(*args: str, cwd: Path) -> str:
    done = subprocess.run(
        ["git", *args], cwd=cwd, env={**os.environ, **GIT_ENV}, capture_output=True, text=True
    )
    assert done.returncode == 0, f"git {' '.join(args)}: {done.stderr}"
    return done.stdout.strip()


class Fleet:
    """A Git remote over HTTP with ``fleet.git`` (main: release.yaml at 1.8.0) and a clone."""

    def __init__(self, tmp: Path, remote: GitRemote) -> None:
        self.remote = remote
        self.bare = remote.root / "fleet.git"
        src = tmp / "src"
        src.mkdir()
        (src / "release.yaml").write_text("version: 1.8.0\n")
        (src / "values.yaml").write_text("replicas: 1\n")
        url = remote.create_fleet_repo("fleet", src)
        authed = url.replace("http://", "http://git:secret@")
        self.clone = tmp / "clone"
        git("clone", "--quiet", authed, str(self.clone), cwd=tmp)

    def commit(self, path: str, text: str, message: str) -> str:
        (self.clone / path).write_text(text)
        git("add", path, cwd=self.clone)
        git("commit", "--quiet", "-m", message, cwd=self.clone)
        return git("rev-parse", "HEAD", cwd=self.clone)

    def branch(self, name: str, *edits: tuple[str, str]) -> str:
        """A branch off origin/main with one commit per edit, pushed; its tip."""
        git("fetch", "--quiet", "origin", cwd=self.clone)
        git("checkout", "--quiet", "-B", name, "origin/main", cwd=self.clone)
        for i, (path, text) in enumerate(edits):
            self.commit(path, text, f"{name}: edit {i + 1}")
        git("push", "--quiet", "--force", "origin", name, cwd=self.clone)
        return git("rev-parse", "HEAD", cwd=self.clone)

    def rev(self, *args: str) -> str:
        return git("--git-dir", str(self.bare), *args, cwd=self.bare)

    def show(self, ref: str, path: str) -> str:
        return self.rev("show", f"{ref}:{path}")


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[Fleet]:
    with GitRemote(tmp_path / "git") as remote:
        yield Fleet(tmp_path, remote)


@pytest.fixture
def hook() -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """A webhook receiver recording the JSON bodies it gets."""
    got: list[dict[str, Any]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            got.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(202)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/webhooks", got
    finally:
        server.shutdown()
        server.server_close()


def call(forge: LocalForge, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(forge.api_url + path, data=data, method=method)
    req.add_header("Authorization", f"token {TOKEN}")
    req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=30) as answer:
            raw = answer.read()
            return answer.status, json.loads(raw) if raw else None
    except urllib.error.HTTPError as err:
        raw = err.read()
        return err.code, json.loads(raw) if raw else None


# -- one adapter per provider: paths and fields ----------------------------------------------
class Api:
    def __init__(self, forge: LocalForge) -> None:
        self.forge = forge

    def open(self, head: str, title: str = "bump") -> dict[str, Any]:
        raise NotImplementedError

    def get(self, n: int) -> dict[str, Any]:
        raise NotImplementedError

    def merge(self, n: int, method: str, sha: str = "") -> tuple[int, Any]:
        raise NotImplementedError

    def head_sha(self, pr: dict[str, Any]) -> str:
        return str(pr["head"]["sha"])

    def merged(self, pr: dict[str, Any]) -> bool:
        return bool(pr["merged"])


class GitHubApi(Api):
    repo = "/repos/acme/fleet"

    def open(self, head: str, title: str = "bump") -> dict[str, Any]:
        status, pr = call(
            self.forge, "POST", self.repo + "/pulls", {"head": head, "base": "main", "title": title}
        )
        assert status == 201, pr
        return dict(pr)

    def get(self, n: int) -> dict[str, Any]:
        return dict(call(self.forge, "GET", f"{self.repo}/pulls/{n}")[1])

    def merge(self, n: int, method: str, sha: str = "") -> tuple[int, Any]:
        body = {"merge_method": method} | ({"sha": sha} if sha else {})
        return call(self.forge, "PUT", f"{self.repo}/pulls/{n}/merge", body)


class GiteaApi(GitHubApi):
    def merge(self, n: int, method: str, sha: str = "") -> tuple[int, Any]:
        body = {"Do": method} | ({"head_commit_id": sha} if sha else {})
        return call(self.forge, "POST", f"{self.repo}/pulls/{n}/merge", body)


class GitLabApi(Api):
    project = "/projects/" + quote("acme/fleet", safe="")

    def open(self, head: str, title: str = "bump") -> dict[str, Any]:
        body = {"source_branch": head, "target_branch": "main", "title": title}
        status, mr = call(self.forge, "POST", self.project + "/merge_requests", body)
        assert status == 201, mr
        return dict(mr)

    def get(self, n: int) -> dict[str, Any]:
        return dict(call(self.forge, "GET", f"{self.project}/merge_requests/{n}")[1])

    def merge(self, n: int, method: str, sha: str = "") -> tuple[int, Any]:
        body: dict[str, Any] = {"squash": method == "squash"} | ({"sha": sha} if sha else {})
        return call(self.forge, "PUT", f"{self.project}/merge_requests/{n}/merge", body)

    def head_sha(self, pr: dict[str, Any]) -> str:
        return str(pr["sha"])

    def merged(self, pr: dict[str, Any]) -> bool:
        return bool(pr["state"] == "merged")


def started(kind: str, fleet: Fleet, hook_url: str = "") -> tuple[LocalForge, Api]:
    forge: LocalForge
    if kind == "github":
        forge = GitHubForge(token=TOKEN)
    elif kind == "gitlab":
        forge = GitLabForge(token=TOKEN)
    else:
        forge = GiteaForge(token=TOKEN)
    forge.start()
    forge.attach_repo(fleet.bare)
    fleet.remote.on_push.append(lambda _name: forge.pushed())
    if hook_url:
        forge.add_webhook(hook_url, "s3cret")
    api = {"github": GitHubApi, "gitlab": GitLabApi, "gitea": GiteaApi}[kind](forge)
    return forge, api


# (provider, method, GitLab project merge method): what each produces in Git.
CASES = [
    ("github", "merge", ""),
    ("github", "squash", ""),
    ("github", "rebase", ""),
    ("gitlab", "merge", "merge"),
    ("gitlab", "squash", "merge"),
    ("gitlab", "merge", "ff"),
    ("gitlab", "squash", "ff"),
    ("gitea", "merge", ""),
    ("gitea", "squash", ""),
    ("gitea", "rebase", ""),
    ("gitea", "rebase-merge", ""),
]


@pytest.mark.parametrize(("kind", "method", "project"), CASES)
def test_each_merge_method_makes_the_real_commits_and_marks_the_request_merged(
    fleet: Fleet, hook: tuple[str, list[dict[str, Any]]], kind: str, method: str, project: str
) -> None:
    url, got = hook
    forge, api = started(kind, fleet, url)
    if project:
        forge.merge_method = project  # type: ignore[attr-defined]
    try:
        before = fleet.rev("rev-parse", "main")
        head = fleet.branch(
            "bump", ("release.yaml", "version: 1.8.7\n"), ("values.yaml", "replicas: 2\n")
        )
        if project != "ff":  # the base moves first, so a merge is not a fast-forward
            git("checkout", "--quiet", "main", cwd=fleet.clone)
            fleet.commit("other.yaml", "x: 1\n", "unrelated")
            git("push", "--quiet", "origin", "main", cwd=fleet.clone)
        base = fleet.rev("rev-parse", "main")
        pr = api.open("bump")
        assert api.head_sha(pr) == head  # the pushed tip, not a made-up sha

        status, answer = api.merge(int(pr.get("number") or pr["iid"]), method, head)
        assert status == 200, answer

        tip = fleet.rev("rev-parse", "main")
        assert tip not in (before, base, "")
        assert fleet.show("main", "release.yaml") == "version: 1.8.7"
        assert fleet.show("main", "values.yaml") == "replicas: 2"
        parents = fleet.rev("log", "-1", "--format=%P", "main").split()
        first_parent_line = fleet.rev("rev-list", "--first-parent", f"{base}..main").split()
        if (project, method) == ("ff", "merge"):
            assert tip == head  # fast-forward: the pushed commits themselves
        elif method == "merge":
            assert parents == [base, head]  # a merge commit of base and the pushed head
            assert first_parent_line == [tip]
        elif (kind, method, project) == ("gitlab", "squash", "merge"):
            assert parents[0] == base and len(parents) == 2  # merge commit of a squash commit
            squash = parents[1]
            assert fleet.rev("log", "-1", "--format=%P", squash).split() == [base]
            assert api.get(pr["iid"])["squash_commit_sha"] == squash
        elif method == "squash":
            assert parents == [base]  # one commit with the request's changes
            assert first_parent_line == [tip]
        elif method == "rebase":
            assert len(first_parent_line) == 2 and parents == [first_parent_line[1]]
            assert head not in first_parent_line  # replayed: new commits
            assert fleet.rev("log", "-1", "--format=%an", "main") == "Alice"
        elif method == "rebase-merge":
            assert parents[0] == base and parents[1] != head
            assert fleet.rev("rev-list", "--count", f"{base}..{parents[1]}") == "2"

        number = int(pr.get("number") or pr["iid"])
        after = api.get(number)
        assert api.merged(after)
        expected = tip
        if project == "ff":  # GitLab: a fast-forward makes no merge commit
            expected = ""
        assert (after["merge_commit_sha"] or "") == expected
        assert got and got[-1].get("pull_request", got[-1].get("object_attributes"))
        announced = got[-1].get("pull_request") or got[-1]["object_attributes"]
        assert (announced["merge_commit_sha"] or "") == expected

        again, refusal = api.merge(number, method)
        assert again == 405, refusal  # already merged
    finally:
        forge.stop()


@pytest.mark.parametrize(
    ("kind", "status", "message"),
    [
        ("github", 409, "Head branch was modified. Review and try the merge again."),
        ("gitlab", 409, "SHA does not match HEAD of source branch"),
        ("gitea", 409, "head out of date"),
    ],
)
def test_the_sha_guard_refuses_a_head_that_moved_and_the_head_follows_pushes(
    fleet: Fleet, kind: str, status: int, message: str
) -> None:
    forge, api = started(kind, fleet)
    try:
        first = fleet.branch("bump", ("release.yaml", "version: 1.8.7\n"))
        pr = api.open("bump")
        number = int(pr.get("number") or pr["iid"])
        assert api.head_sha(pr) == first
        second = fleet.commit("values.yaml", "replicas: 3\n", "tweak")  # pushed again
        git("push", "--quiet", "origin", "bump", cwd=fleet.clone)
        assert api.head_sha(api.get(number)) == second  # refreshed on push
        main = fleet.rev("rev-parse", "main")

        refused, body = api.merge(number, "merge", first)  # reviewed the old head
        assert refused == status and message in json.dumps(body)
        assert fleet.rev("rev-parse", "main") == main and not api.merged(api.get(number))

        ok, _ = api.merge(number, "merge", second)
        assert ok == 200 and api.merged(api.get(number))
    finally:
        forge.stop()


@pytest.mark.parametrize("kind", ["github", "gitlab", "gitea"])
def test_a_request_merged_by_a_plain_push_shows_merged_and_is_announced(
    fleet: Fleet, hook: tuple[str, list[dict[str, Any]]], kind: str
) -> None:
    url, got = hook
    forge, api = started(kind, fleet, url)
    try:
        head = fleet.branch("bump", ("release.yaml", "version: 1.8.7\n"))
        pr = api.open("bump")
        number = int(pr.get("number") or pr["iid"])
        git("checkout", "--quiet", "main", cwd=fleet.clone)
        git("merge", "--quiet", "--no-ff", "-m", "merge bump by hand", "bump", cwd=fleet.clone)
        merge = git("rev-parse", "HEAD", cwd=fleet.clone)
        assert not api.merged(api.get(number))
        git("push", "--quiet", "origin", "main", cwd=fleet.clone)

        # Announced after the push (the remote's answer may reach git first), before anyone
        # asks the forge.
        deadline = time.monotonic() + 10
        while not got and time.monotonic() < deadline:
            time.sleep(0.05)
        assert got, "no merged event after the push"
        announced = got[-1].get("pull_request") or got[-1]["object_attributes"]
        assert announced["merge_commit_sha"] == merge
        after = api.get(number)
        assert api.merged(after) and after["merge_commit_sha"] == merge
        assert api.head_sha(after) == head
    finally:
        forge.stop()


def test_github_refuses_a_request_without_commits_or_branch(fleet: Fleet) -> None:
    forge, _api = started("github", fleet)
    try:
        git("push", "--quiet", "origin", "main:same", cwd=fleet.clone)
        body = {"head": "same", "base": "main", "title": "t"}
        status, answer = call(forge, "POST", "/repos/acme/fleet/pulls", body)
        assert status == 422 and "No commits between" in json.dumps(answer)
        body["head"] = "nope"
        status, _ = call(forge, "POST", "/repos/acme/fleet/pulls", body)
        assert status == 422
    finally:
        forge.stop()


def test_list_filters_by_state_after_a_merge(fleet: Fleet) -> None:
    forge, api = started("github", fleet)
    try:
        fleet.branch("a", ("release.yaml", "version: 1.8.7\n"))
        fleet.branch("b", ("values.yaml", "replicas: 5\n"))
        one, two = api.open("a")["number"], api.open("b")["number"]
        assert api.merge(one, "squash")[0] == 200
        numbers = {
            state: [
                p["number"] for p in call(forge, "GET", f"/repos/acme/fleet/pulls?state={state}")[1]
            ]
            for state in ("open", "closed", "all")
        }
        assert numbers["open"] == [two] and numbers["closed"] == [one]
        assert sorted(numbers["all"]) == [one, two]
        assert call(forge, "GET", f"/repos/acme/fleet/pulls/{one}/merge")[0] == 204
        assert call(forge, "GET", f"/repos/acme/fleet/pulls/{two}/merge")[0] == 404
    finally:
        forge.stop()
