"""What the three local forges share: state, and the request handling (routing, the token
check, injected faults, paging, the answers that are the same everywhere).

Each provider module (github.py, gitlab.py, gitea.py) adds its dialect: its routes, its JSON
shapes and field names, and how it words a refusal. The data passed around is model.py's.
Requests are served by a stdlib ThreadingHTTPServer in a daemon thread (http_handler.py: the
bytes, ETags and rate-limit headers); state is guarded by one lock.

With a Git repository attached (``attach_repo``: the sandbox Git remote's bare repository),
pull requests follow it as on a real forge: a request's head sha is its branch's tip,
refreshed when the branch is pushed again; a merge (the provider's merge endpoint, or
``merge``) makes a real commit there and moves the base branch; and a request whose head
commits reach the base branch by a plain push shows merged too. Without one, ``merge`` only
records a made-up merge commit sha (the forge contract tests need no Git). ``log`` records
every request; ``counted_requests`` excludes 304 answers, which GitHub documents as free
against the primary rate limit for authorized conditional requests.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
import urllib.request
from datetime import datetime
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Self
from urllib.parse import parse_qs, urlencode, urlsplit

from gitopsbot.sandbox.forges.gitrepo import BaseMoved, ForgeRepo, MergeConflict
from gitopsbot.sandbox.forges.http_handler import handler_for
from gitopsbot.sandbox.forges.model import (
    Answer,
    Comment,
    Fault,
    Json,
    LoggedRequest,
    Pull,
    Reply,
    Request,
    Route,
    Status,
    delivery_id,
    github_like_merged_event,
    iso,
    now_utc,
    parse_iso,
)
from gitopsbot.sandbox.service import HTTPService

# The forges' data, where the forges and their tests have always found it.
__all__ = [
    "Answer",
    "Comment",
    "Fault",
    "Json",
    "LocalForge",
    "LoggedRequest",
    "Pull",
    "Reply",
    "Request",
    "Route",
    "Status",
    "delivery_id",
    "github_like_merged_event",
    "iso",
    "now_utc",
    "parse_iso",
]


class LocalForge(HTTPService):
    """Base of the three local forges. Use as a context manager, or start()/stop()."""

    name = "forge"
    api_prefix = ""  # e.g. "/api/v1"; routes are matched below it
    rate_header_prefix = "X-RateLimit-"
    page_param = "page"
    size_param = "per_page"
    # A list's page size when the request names none, and the most one answers with, as the
    # provider documents them (GitHub: 30 and 100); a test that wants small pages asks for
    # them with ``page_size``.
    default_page_size = 30
    max_page_size = 100
    rate_limit = 5000
    etags = True  # GitHub documents conditional requests; GitLab and Gitea REST do not
    # How strict the ETag is. True (GitHub): it covers what the answer says, body AND its
    # headers (pagination Link), so a new page 2 changes page 1's ETag. False mimics a lax
    # server whose ETag covers the body only: clients must not trust a cached "last page".
    etag_covers_headers = True
    # Whether a 304 repeats the answer's headers (GitHub sends Link on a 304).
    headers_on_304 = True

    def __init__(
        self,
        *,
        token: str,
        owner: str = "acme",
        repo: str = "fleet",
        page_size: int | None = None,
        port: int = 0,
    ):
        self.token = token
        self._port = port
        self.hooks: list[tuple[str, str]] = []  # (url, secret) called on merge
        self.hook_failures: list[str] = []  # like GitHub: a failed delivery is not retried
        self.owner = owner
        self.repo = repo
        # The most items a list answers with: the provider's maximum, or what a test asked
        # for (small, so that every list paginates); the default page is never larger.
        self.page_size = page_size if page_size is not None else self.max_page_size
        self.default_size = min(self.default_page_size, self.page_size)
        self.lock = threading.RLock()
        self.pulls: dict[int, Pull] = {}
        self.comments: dict[int, Comment] = {}
        self.statuses: list[Status] = []
        self.labels: dict[str, int] = {}
        # Accounts (login → id) and their repository permission: admin, write, read or none
        # (GitHub's and Gitea's words; GitLab's access levels are mapped from them).
        self.users: dict[str, int] = {"gitopsbot": 1}
        self.permissions: dict[str, str] = {"gitopsbot": "admin"}
        self.log: list[LoggedRequest] = []
        self.faults: list[Fault] = []
        self.git: ForgeRepo | None = None
        self._undelivered: list[Pull] = []  # merged, announcement not yet sent
        self._ids = 100
        self._routes: list[tuple[str, re.Pattern[str], Route]] = []
        self.add_routes()

    # -- lifecycle -------------------------------------------------------------------------
    def start(self) -> Self:
        if not self.serving:
            server = ThreadingHTTPServer(("127.0.0.1", self._port), handler_for(self))
            self.serve_http(server, name=f"forge-{self.name}", poll_interval=0.05)
        return self

    @property
    def api_url(self) -> str:
        return self.url + self.api_prefix

    # -- test controls ---------------------------------------------------------------------
    def inject(self, fault: Fault) -> None:
        with self.lock:
            self.faults.append(fault)

    @property
    def counted_requests(self) -> int:
        """Requests that count against the rate limit: everything but 304 answers."""
        with self.lock:
            return sum(1 for r in self.log if r.status != 304)

    def merge(self, number: int, *, at: datetime | None = None, method: str = "merge") -> Pull:
        """Simulate a person clicking "Merge": with a Git repository attached, a real merge
        (``merge_pull``); else it records merged_at and a made-up merge commit sha. Then the
        provider's merged event goes to every registered webhook."""
        with self.lock:
            pr = self.pulls[number]
            if self.git is not None:
                self.merge_pull(pr, method=method)
            else:
                when = at or now_utc()
                sha = hashlib.sha1(f"merge {number} {when}".encode()).hexdigest()
                self._set_merged(pr, sha, when)
        self.deliver_merged()
        return pr

    # -- the Git repository behind the forge -------------------------------------------------
    def attach_repo(self, git_dir: Path) -> None:
        """Follow the bare repository ``git_dir`` (see the module docstring)."""
        with self.lock:
            self.git = ForgeRepo(git_dir)
            self.sync()

    def pushed(self) -> None:
        """Called after a push to the repository: refresh heads, detect merges by push, and
        announce them."""
        with self.lock:
            self.sync()
        self.deliver_merged()

    def sync(self) -> None:
        """Refresh every open request's head sha from its branch, and mark merged those whose
        head the base branch now contains (a person merged locally and pushed, as GitHub
        detects). Call with the lock held; ``deliver_merged`` announces them after."""
        if self.git is None:
            return
        tips = self.git.branches()
        for pr in self.pulls.values():
            if pr.state != "open":
                continue
            tip = tips.get(pr.head)
            if tip and tip != pr.head_sha:
                pr.head_sha, pr.updated_at = tip, now_utc()
            base = tips.get(pr.base)
            if base and self.git.contains(pr.head_sha, base):
                self._set_merged(pr, self.git.landing_commit(pr.head_sha, base), now_utc())

    def merge_pull(
        self,
        pr: Pull,
        *,
        method: str,
        sha: str = "",
        message: str = "",
        squash_message: str = "",
    ) -> Pull:
        """Merge ``pr`` in the Git repository by ``method`` (gitrepo.ForgeRepo.merge), refused
        through ``merge_refused`` as the provider answers: "closed" (not open), "sha" (``sha``
        is not the head), "conflict" (does not merge cleanly, or the base moved meanwhile).
        Call with the lock held."""
        assert self.git is not None
        self.sync()
        if pr.state != "open":
            raise self.merge_refused("closed", pr)
        if sha and sha != pr.head_sha:
            raise self.merge_refused("sha", pr)
        base = self.git.tip(pr.base)
        if base is None or not pr.mergeable:
            raise self.merge_refused("conflict", pr)
        try:
            done = self.git.merge(
                base=pr.base,
                head_sha=pr.head_sha,
                method=method,
                message=message or self.merge_message(pr),
                squash_message=squash_message or self.squash_message(pr),
                expect_base=base,
            )
        except (MergeConflict, BaseMoved):
            raise self.merge_refused("conflict", pr) from None
        pr.squash_commit_sha = done.squash_sha
        self._set_merged(pr, self.merge_commit_of(method, done.sha, done.squash_sha), now_utc())
        return pr

    def _set_merged(self, pr: Pull, merge_commit_sha: str, when: datetime) -> None:
        pr.state, pr.merged_at, pr.updated_at = "closed", when, when
        pr.merge_commit_sha = merge_commit_sha
        self._undelivered.append(pr)

    def deliver_merged(self) -> None:
        """Send the merged event of every request merged since the last call (outside the
        lock: a receiver may call back)."""
        with self.lock:
            merged, self._undelivered = self._undelivered, []
            hooks = list(self.hooks)
        for pr in merged:
            for url, secret in hooks:
                headers, body = self.merged_event(pr, secret)
                self._deliver(url, headers, body)

    def merge_message(self, pr: Pull) -> str:
        """The provider's default merge commit message."""
        return f"Merge pull request #{pr.number} from {self.owner}/{pr.head}\n\n{pr.title}"

    def squash_message(self, pr: Pull) -> str:
        """The provider's default squash commit message."""
        return f"{pr.title} (#{pr.number})\n\n{pr.body}".rstrip() + "\n"

    def merge_commit_of(self, method: str, tip: str, squash: str) -> str:
        """What the provider reports as the merge commit (GitHub: the new base tip for every
        method: the merge commit, the squash commit, the last rebased commit)."""
        return tip

    def merge_refused(self, why: str, pr: Pull) -> Answer:
        """The provider's answer to a merge refused for ``why`` (see ``merge_pull``)."""
        raise NotImplementedError

    def add_webhook(self, url: str, secret: str) -> None:
        with self.lock:
            self.hooks.append((url, secret))

    def throttle(self, *, times: int = 1, retry_after: int | None = 60, method: str = "") -> None:
        """Switch on a secondary rate limit (403 on GitHub, 429 elsewhere) for ``times``
        requests; ``method="POST"`` limits only content-creating requests."""
        status = 403 if self.name == "github" else 429
        self.inject(Fault(status=status, times=times, method=method, retry_after=retry_after))

    def merged_event(self, pr: Pull, secret: str) -> tuple[dict[str, str], bytes]:
        """The provider's webhook headers and body announcing ``pr``'s merge."""
        raise NotImplementedError

    def _deliver(self, url: str, headers: dict[str, str], body: bytes) -> None:
        request = urllib.request.Request(url, data=body, method="POST", headers=headers)
        request.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(request, timeout=10) as answer:
                if answer.status >= 300:
                    self.hook_failures.append(f"{url}: {answer.status}")
        except (OSError, ValueError) as err:
            self.hook_failures.append(f"{url}: {type(err).__name__}")

    def approve(self, number: int, user: str) -> None:
        with self.lock:
            self.pulls[number].approvers.append(user)

    def say(self, number: int, user: str, body: str) -> Comment:
        """Simulate ``user`` commenting on request ``number`` (the account is made if new)."""
        with self.lock:
            self.pull(number)
            self.users.setdefault(user, len(self.users) + 1)
            now = now_utc()
            c = Comment(self.next_id(), number, body, now, now, author=user)
            self.comments[c.id] = c
            return c

    def grant(self, user: str, permission: str) -> None:
        """Give ``user`` a repository permission: admin, write, read or none."""
        with self.lock:
            self.users.setdefault(user, len(self.users) + 1)
            self.permissions[user] = permission

    def permission_of(self, user: str) -> str:
        """The user's permission; 404 for an account the forge does not know."""
        if user not in self.users:
            raise Answer(404, self.not_found_body())
        return self.permissions.get(user, "none")

    def next_id(self) -> int:
        with self.lock:
            self._ids += 1
            return self._ids

    def new_pull(self, *, head: str, base: str, title: str, body: str) -> Pull:
        with self.lock:
            number = max([0, *self.pulls, *(c.number for c in self.comments.values())]) + 1
            now = now_utc()
            sha = hashlib.sha1(f"{head} {number}".encode()).hexdigest()
            if self.git is not None:
                tip, base_tip = self.git.tip(head), self.git.tip(base)
                if tip is None or base_tip is None:
                    raise self.create_refused("branch", head if tip is None else base)
                if self.git.contains(tip, base_tip):
                    raise self.create_refused("no-commits", head)
                sha = tip
            pr = Pull(number, head, base, title, body, sha, now, now)
            self.pulls[number] = pr
            return pr

    def edit_pull(self, pr: Pull, edit: Json, *, text: str = "body", state: str | None) -> None:
        """An edit of ``pr``: its title, its description (``text``: the provider's name for the
        field) and its ``state`` ("open" or "closed"; a merged request stays merged)."""
        pr.title = edit.get("title", pr.title)
        pr.body = edit.get(text, pr.body)
        if state in ("open", "closed") and pr.merged_at is None:
            pr.state = state
        pr.updated_at = now_utc()

    def open_pull_for(self, head: str, base: str) -> Pull | None:
        return next(
            (
                p
                for p in self.pulls.values()
                if p.head == head and p.base == base and p.state == "open"
            ),
            None,
        )

    def pull(self, number: int) -> Pull:
        pr = self.pulls.get(number)
        if pr is None:
            raise Answer(404, self.not_found_body())
        return pr

    def comment(self, cid: int) -> Comment:
        c = self.comments.get(cid)
        if c is None:
            raise Answer(404, self.not_found_body())
        return c

    # -- for subclasses --------------------------------------------------------------------
    def create_refused(self, why: str, branch: str) -> Answer:
        """The provider's answer to a create from or into a branch the repository does not
        have (``why`` "branch"), or with nothing to merge ("no-commits")."""
        return Answer(422, {"message": f"{why}: {branch}"})

    def add_routes(self) -> None:
        raise NotImplementedError

    def comment_json(self, c: Comment) -> Json:
        raise NotImplementedError

    def comment_text(self, body: Json, *, creating: bool) -> str:
        """A comment's text from the body of a create (``creating``) or an edit; an empty or
        too long one raises the provider's refusal (``Answer``)."""
        raise NotImplementedError

    def status_json(self, st: Status) -> Json:
        raise NotImplementedError

    def add_status(self, sha: str, context: str, body: Json, *, id: int = 0) -> Reply:
        """Keep a commit status the dialect's ``create_status`` accepted (its ``state``
        checked, its ``context`` named) and answer 201 with the provider's shape."""
        description, target_url = body.get("description") or "", body.get("target_url") or ""
        st = Status(sha, context, body["state"], description, target_url, id=id)
        self.statuses.append(st)
        return Reply(201, self.status_json(st))

    # -- routes the forges share (same answers; paths and shapes are the provider's) --------
    def merged_check(self, req: Request) -> Reply:
        """204 when merged, 404 when not (GitHub's "check if a pull request has been
        merged", which Gitea copies)."""
        pr = self.pull(int(req.match.group(1)))
        if pr.merged_at is None:
            raise Answer(404, self.not_found_body())
        return Reply(204, None)

    def list_comments(self, req: Request) -> Reply:
        number = int(req.match.group(1))
        self.pull(number)
        found = sorted(
            (c for c in self.comments.values() if c.number == number), key=lambda c: c.id
        )
        return Reply(200, None, page=[self.comment_json(c) for c in found])

    # A comment's id is its route's last group (GitLab's note routes name the request first).
    def create_comment(self, req: Request) -> Reply:
        number = int(req.match.group(1))
        self.pull(number)
        text = self.comment_text(req.body, creating=True)
        now = now_utc()
        c = Comment(self.next_id(), number, text, now, now)
        self.comments[c.id] = c
        return Reply(201, self.comment_json(c))

    def update_comment(self, req: Request) -> Reply:
        c = self.comment(int(req.match.group(req.match.lastindex or 1)))
        text = self.comment_text(req.body, creating=False)
        c.body, c.updated_at = text, now_utc()
        return Reply(200, self.comment_json(c))

    def delete_comment(self, req: Request) -> Reply:
        c = self.comment(int(req.match.group(req.match.lastindex or 1)))
        del self.comments[c.id]
        return Reply(204, None)

    def list_statuses(self, req: Request) -> Reply:
        sha = req.match.group(1)
        found = [self.status_json(s) for s in reversed(self.statuses) if s.sha == sha]
        return Reply(200, None, page=found)

    def route(self, method: str, pattern: str, fn: Route) -> None:
        self._routes.append((method, re.compile(f"^{self.api_prefix}{pattern}$"), fn))

    def token_of(self, headers: dict[str, str]) -> str:
        auth = headers.get("authorization", "")
        return auth.split(" ", 1)[1] if " " in auth else ""

    def authorize(self, path: str, headers: dict[str, str]) -> Reply | None:
        """None when the request may go on; else the answer refusing it (401)."""
        if self.token_of(headers) != self.token:
            return Reply(401, self.unauthorized_body())
        return None

    def not_found_body(self) -> Json:
        return {"message": "Not Found"}

    def unauthorized_body(self) -> Json:
        return {"message": "Bad credentials"}

    def rate_limited_body(self) -> Json:
        return {"message": "You have exceeded a secondary rate limit."}

    def link_header(self, url: str, page: int, pages: int) -> dict[str, str]:
        links = []
        if page < pages:
            links.append(f'<{self._page_url(url, page + 1)}>; rel="next"')
            links.append(f'<{self._page_url(url, pages)}>; rel="last"')
        if page > 1:
            links.append(f'<{self._page_url(url, 1)}>; rel="first"')
            links.append(f'<{self._page_url(url, page - 1)}>; rel="prev"')
        return {"Link": ", ".join(links)} if links else {}

    def _page_url(self, url: str, page: int) -> str:
        parts = urlsplit(url)
        query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
        query[self.page_param] = str(page)
        return f"{self.url}{parts.path}?{urlencode(query)}"

    # -- serving ---------------------------------------------------------------------------
    def serve(self, method: str, raw_path: str, headers: dict[str, str], data: bytes) -> Reply:
        """Answer one request (called from the handler thread)."""
        parts = urlsplit(raw_path)
        query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
        with self.lock:
            fault = self._take_fault(method, parts.path)
        if fault is not None and fault.status:
            extra = {"Retry-After": str(fault.retry_after)} if fault.retry_after is not None else {}
            if fault.status in (403, 429):
                extra[self.rate_header_prefix + "Remaining"] = str(self.rate_limit - 1)
            body = fault.body if fault.body is not None else self.fault_body(fault.status)
            return Reply(fault.status, body, {**extra, **fault.headers})
        refused = self.authorize(parts.path, headers)
        if refused is not None:
            return refused
        try:
            body = json.loads(data) if data else None
        except ValueError:
            return Reply(400, {"message": "Problems parsing JSON"})
        for verb, pattern, fn in self._routes:
            m = pattern.match(parts.path)
            if m and verb == method:
                try:
                    with self.lock:
                        # Pushes reach the Git remote, not the forge: look before answering.
                        self.sync()
                        reply = fn(
                            Request(method, parts.path, query, body, m, self.token_of(headers))
                        )
                except Answer as a:
                    return Reply(a.status, a.body, a.headers)
                finally:
                    self.deliver_merged()
                if fault is not None:  # status 0: the work is done, the answer is lost
                    return Reply(0, None)
                if reply.page is not None:
                    return self._paginate(raw_path, query, reply)
                return reply
        return Reply(404, self.not_found_body())

    def fault_body(self, status: int) -> Json:
        if status in (403, 429):
            return self.rate_limited_body()
        return {"message": "Server Error"}

    def _take_fault(self, method: str, path: str) -> Fault | None:
        for f in self.faults:
            if (not f.method or f.method == method) and (not f.path or re.search(f.path, path)):
                f.times -= 1
                if f.times <= 0:
                    self.faults.remove(f)
                return f
        return None

    def _paginate(self, raw_path: str, query: dict[str, str], reply: Reply) -> Reply:
        items = reply.page or []
        try:
            asked = int(query.get(self.size_param) or 0)
            page = max(int(query.get(self.page_param) or "1"), 1)
        except ValueError:
            raise Answer(400, {"message": "invalid pagination"}) from None
        # No size, or one below 1: the default page; above the maximum: the maximum.
        size = min(asked, self.page_size) if asked > 0 else self.default_size
        pages = max((len(items) + size - 1) // size, 1)
        headers = dict(reply.headers)
        headers.update(self.page_headers(raw_path, page, pages, size, len(items)))
        return Reply(reply.status, items[(page - 1) * size : page * size], headers)

    def page_headers(
        self, raw_path: str, page: int, pages: int, size: int, total: int
    ) -> dict[str, str]:
        return self.link_header(raw_path, page, pages)
