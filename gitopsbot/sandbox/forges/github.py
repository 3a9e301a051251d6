"""A local GitHub REST API (the subset gitopsbot uses), per docs.github.com/rest.

Pulls, issue comments, commit statuses, labels, reviews and a collaborator's permission
(``collaborators/{login}/permission``: admin, write, read or none; 404 for an unknown
account) under /repos/{owner}/{repo}.
Lists paginate with ``page``/``per_page`` (30 by default, at most 100) and a Link header; a
second open pull request for the same head and base is refused with 422 "A pull request
already exists for owner:branch.";
bodies above 65,536 characters are refused with 422; 401 on a bad token.
GitHub Apps (``register_app``): ``GET /app``, ``GET /repos/{owner}/{repo}/installation`` and
``POST /app/installations/{id}/access_tokens`` with the app's JWT, and every other endpoint
with an installation token as well as the fixed token (github_apps.py).
``PUT /pulls/{n}/merge`` merges (``merge_method`` merge, squash or rebase; ``sha`` must be the
head when given) and answers ``{"sha", "merged", "message"}``; refused with 405 "Pull Request
is not mergeable" (closed, merged, conflicting), 409 "Head branch was modified. Review and try
the merge again." (``sha`` is not the head), 422 for an unknown ``merge_method``.
"""

from __future__ import annotations

import json
from typing import Any

from gitopsbot.core.forge.webhook_events import github_signature
from gitopsbot.sandbox.forges.github_apps import AppRefused, LocalApp, LocalApps
from gitopsbot.sandbox.forges.github_like import GitHubLikeForge
from gitopsbot.sandbox.forges.github_shapes import GitHubShapes, node_id
from gitopsbot.sandbox.forges.model import (
    Answer,
    Comment,
    Json,
    Pull,
    Reply,
    Request,
    Status,
    delivery_id,
    iso,
)

BODY_LIMIT = 65_536
DOCS = "https://docs.github.com/rest"


class GitHubForge(GitHubLikeForge):
    name = "github"
    api_prefix = "/api/v3"  # served as GitHub Enterprise Server does; github.com has none

    def __init__(self, *, token: str, token_lifetime: float = 3600.0, **kwargs: Any) -> None:
        """``token_lifetime``: seconds an installation token lives (GitHub: an hour)."""
        super().__init__(token=token, **kwargs)
        self.apps = LocalApps(self.owner, self.repo, token_lifetime=token_lifetime)

    def register_app(
        self,
        app_id: int,
        public_key_pem: str,
        *,
        installation_id: int = 4242,
        installed: bool = True,
    ) -> LocalApp:
        """A GitHub App with this public key, installed (or not) on the repository."""
        return self.apps.register(
            app_id, public_key_pem, installation_id=installation_id, installed=installed
        )

    def installation_token_live(self, token: str) -> bool:
        """Whether ``token`` is an installation token that has not expired (the Git remote
        asks: ``GitRemote.accepts_token``)."""
        return bool(self.apps.installation_token_ok(token))

    def _app_path(self, path: str) -> bool:
        rel = path[len(self.api_prefix) :]
        return (
            rel == "/app"
            or rel.startswith("/app/")
            or rel == f"/repos/{self.owner}/{self.repo}/installation"
        )

    def authorize(self, path: str, headers: dict[str, str]) -> Reply | None:
        token = self.token_of(headers)
        if self._app_path(path):
            try:
                self.apps.verify_jwt(token)
            except AppRefused as refused:
                return Reply(refused.status, refused.body())
            return None
        if token == self.token or self.apps.installation_token_ok(token):
            return None
        return Reply(401, self.unauthorized_body())

    def merged_event(self, pr: Pull, secret: str) -> tuple[dict[str, str], bytes]:
        """GitHub's pull_request "closed" delivery of a merged request, headers and body as
        its webhooks description has them."""
        with self.lock:
            pull = self.pull_json(pr, full=True) | {
                # The repository's merge settings GitHub adds to a webhook's pull request.
                "allow_auto_merge": False,
                "allow_update_branch": False,
                "delete_branch_on_merge": False,
                "merge_commit_message": "PR_TITLE",
                "merge_commit_title": "MERGE_MESSAGE",
                "squash_merge_commit_message": "COMMIT_MESSAGES",
                "squash_merge_commit_title": "COMMIT_OR_PR_TITLE",
                "use_squash_pr_title_as_default": False,
            }
            repository = self.shapes.repository(
                created=iso(pr.created_at), updated=iso(pr.updated_at)
            )
            event = {
                "action": "closed",
                "number": pr.number,
                "pull_request": pull,
                "repository": repository,
                "sender": self.user_json("gitopsbot"),
            }
        body = json.dumps(event).encode()
        return {
            "User-Agent": "GitHub-Hookshot/local",
            "X-GitHub-Event": "pull_request",
            "X-GitHub-Delivery": delivery_id(),
            "X-GitHub-Hook-ID": "1",
            "X-GitHub-Hook-Installation-Target-Type": "repository",
            "X-GitHub-Hook-Installation-Target-ID": str(repository["id"]),
            "X-Hub-Signature-256": github_signature(secret, body),
        }, body

    def add_routes(self) -> None:
        super().add_routes()
        repo = rf"/repos/{self.owner}/{self.repo}"
        self.route("GET", r"/app", self.get_app)
        self.route("GET", repo + r"/installation", self.repo_installation)
        self.route("POST", r"/app/installations/(\d+)/access_tokens", self.access_token)

    def not_found_body(self) -> Json:
        return {"message": "Not Found", "documentation_url": DOCS, "status": "404"}

    def unauthorized_body(self) -> Json:
        return {"message": "Bad credentials", "documentation_url": DOCS, "status": "401"}

    def rate_limited_body(self) -> Json:
        return {
            "message": "You have exceeded a secondary rate limit. Please wait a few minutes "
            "before you try again.",
            "documentation_url": DOCS + "/using-the-rest-api/rate-limits-for-the-rest-api",
        }

    @staticmethod
    def invalid(message: str, field: str = "") -> Answer:
        error = {"resource": "PullRequest", "code": "custom", "message": message}
        if field:
            error = {"resource": "PullRequest", "code": "missing_field", "field": field}
        return Answer(
            422,
            {
                "message": "Validation Failed",
                "errors": [error],
                "documentation_url": DOCS,
                "status": "422",
            },
        )

    def merge_refused(self, why: str, pr: Pull) -> Answer:
        if why == "sha":
            message = "Head branch was modified. Review and try the merge again."
            return Answer(409, {"message": message, "documentation_url": DOCS, "status": "409"})
        return Answer(
            405,
            {
                "message": "Pull Request is not mergeable",
                "documentation_url": DOCS,
                "status": "405",
            },
        )

    def create_refused(self, why: str, branch: str) -> Answer:
        if why == "no-commits":
            return self.invalid(f"No commits between {branch} and its base")
        return Answer(
            422,
            {
                "message": "Validation Failed",
                "errors": [{"resource": "PullRequest", "field": "head", "code": "invalid"}],
                "documentation_url": DOCS,
                "status": "422",
            },
        )

    # -- shapes ----------------------------------------------------------------------------
    @property
    def shapes(self) -> GitHubShapes:
        return GitHubShapes(api=self.api_url, web=self.url, owner=self.owner, repo=self.repo)

    def user_json(self, login: str) -> Json:
        return self.shapes.user(login, self.users.get(login, 0) or self.users["gitopsbot"])

    def branch_json(self, ref: str, sha: str, repository: Json) -> Json:
        return {
            "label": f"{self.owner}:{ref}",
            "ref": ref,
            "sha": sha,
            "repo": repository,
            "user": repository["owner"],
        }

    def pull_json(self, pr: Pull, *, full: bool) -> Json:
        """A pull-request (``full``: the single-pull endpoints) or a pull-request-simple
        (lists)."""
        shapes = self.shapes
        repository = shapes.repository(created=iso(pr.created_at), updated=iso(pr.updated_at))
        base_sha = (self.git.tip(pr.base) if self.git is not None else None) or "0" * 40
        out: Json = {
            **shapes.pull_urls(pr.number),
            "id": 10_000 + pr.number,
            "node_id": node_id("PullRequest", 10_000 + pr.number),
            "number": pr.number,
            "state": pr.state,
            "locked": False,
            "title": pr.title,
            "user": self.user_json("gitopsbot"),
            "body": pr.body,
            "labels": [shapes.label(n, self.labels.get(n, 0)) for n in pr.labels],
            "milestone": None,
            "active_lock_reason": None,
            "created_at": iso(pr.created_at),
            "updated_at": iso(pr.updated_at),
            "closed_at": iso(pr.updated_at) if pr.state == "closed" else None,
            "merged_at": iso(pr.merged_at),
            "merge_commit_sha": pr.merge_commit_sha or None,
            "assignee": None,
            "assignees": [],
            "requested_reviewers": [],
            "requested_teams": [],
            "statuses_url": f"{shapes.repo_api}/statuses/{pr.head_sha}",
            "head": self.branch_json(pr.head, pr.head_sha, repository),
            "base": self.branch_json(pr.base, base_sha, repository),
            "_links": shapes.links(pr.number),
            "author_association": "MEMBER",
            "auto_merge": None,
            "draft": False,
        }
        if full:  # only the single-pull endpoints compute these
            merged = pr.merged_at is not None
            out |= {
                "merged": merged,
                "mergeable": pr.mergeable if pr.state == "open" else None,
                "rebaseable": pr.mergeable if pr.state == "open" else None,
                "mergeable_state": ("clean" if pr.mergeable else "dirty")
                if pr.state == "open"
                else "unknown",
                "merged_by": self.user_json("gitopsbot") if merged else None,
                "comments": sum(1 for c in self.comments.values() if c.number == pr.number),
                "review_comments": 0,
                "maintainer_can_modify": False,
                "commits": 1,
                "additions": 0,
                "deletions": 0,
                "changed_files": 0,
            }
        return out

    def comment_json(self, c: Comment) -> Json:
        html = f"{self.url}/{self.owner}/{self.repo}/pull/{c.number}"
        return {
            "id": c.id,
            "node_id": node_id("IssueComment", c.id),
            "url": f"{self.shapes.repo_api}/issues/comments/{c.id}",
            "html_url": f"{html}#issuecomment-{c.id}",
            "issue_url": f"{self.shapes.repo_api}/issues/{c.number}",
            "body": c.body,
            "user": self.user_json(c.author),
            "created_at": iso(c.created_at),
            "updated_at": iso(c.updated_at),
            "author_association": "MEMBER" if c.author == "gitopsbot" else "NONE",
        }

    # -- routes ----------------------------------------------------------------------------
    def list_pulls(self, req: Request) -> Reply:
        state = req.query.get("state", "open")
        head = req.query.get("head", "")
        if head and ":" in head:
            head = head.split(":", 1)[1]
        pulls = [
            p
            for p in self.pulls.values()
            if (state == "all" or p.state == state)
            and (not head or p.head == head)
            and (not req.query.get("base") or p.base == req.query["base"])
        ]
        key = "updated_at" if req.query.get("sort") == "updated" else "created_at"
        default = "desc" if key == "updated_at" or "sort" not in req.query else "asc"
        pulls.sort(
            key=lambda p: (getattr(p, key), p.number),
            reverse=req.query.get("direction", default) == "desc",
        )
        return Reply(200, None, page=[self.pull_json(p, full=False) for p in pulls])

    def create_pull(self, req: Request) -> Reply:
        body = req.body or {}
        for name in ("head", "base", "title"):
            if not body.get(name):
                raise self.invalid("", name)
        head = str(body["head"]).split(":")[-1]
        if len(body.get("body") or "") > BODY_LIMIT:
            raise self.invalid("body is too long (maximum is 65536 characters)")
        if self.open_pull_for(head, body["base"]) is not None:
            raise self.invalid(f"A pull request already exists for {self.owner}:{head}.")
        pr = self.new_pull(
            head=head, base=body["base"], title=body["title"], body=body.get("body") or ""
        )
        return Reply(201, self.pull_json(pr, full=True))

    def get_pull(self, req: Request) -> Reply:
        return Reply(200, self.pull_json(self.pull(int(req.match.group(1))), full=True))

    def update_pull(self, req: Request) -> Reply:
        pr = self.pull(int(req.match.group(1)))
        body = req.body or {}
        if len(body.get("body") or "") > BODY_LIMIT:
            raise self.invalid("body is too long (maximum is 65536 characters)")
        self.edit_pull(pr, body, state=body.get("state"))
        return Reply(200, self.pull_json(pr, full=True))

    def merge_route(self, req: Request) -> Reply:
        pr = self.pull(int(req.match.group(1)))
        body = req.body or {}
        method = body.get("merge_method") or "merge"
        if method not in ("merge", "squash", "rebase"):
            raise self.invalid("", "merge_method")
        if self.git is None:
            raise self.merge_refused("conflict", pr)
        title, detail = body.get("commit_title"), body.get("commit_message")
        message = squash = ""
        if title or detail:  # GitHub: the title replaces the first line, the message the rest
            default = (self.squash_message if method == "squash" else self.merge_message)(pr)
            first, _, rest = default.partition("\n\n")
            message = squash = f"{title or first}\n\n{detail if detail is not None else rest}"
        self.merge_pull(
            pr, method=method, sha=body.get("sha") or "", message=message, squash_message=squash
        )
        return Reply(
            200,
            {
                "sha": pr.merge_commit_sha,
                "merged": True,
                "message": "Pull Request successfully merged",
            },
        )

    def list_reviews(self, req: Request) -> Reply:
        pr = self.pull(int(req.match.group(1)))
        shapes = self.shapes
        html = f"{self.url}/{self.owner}/{self.repo}/pull/{pr.number}"
        reviews = []
        for i, login in enumerate(pr.approvers, start=1):
            self.users.setdefault(login, len(self.users) + 1)
            reviews.append(
                {
                    "id": i,
                    "node_id": node_id("PullRequestReview", i),
                    "user": self.user_json(login),
                    "body": "",
                    "state": "APPROVED",
                    "commit_id": pr.head_sha,
                    "html_url": f"{html}#pullrequestreview-{i}",
                    "pull_request_url": f"{shapes.repo_api}/pulls/{pr.number}",
                    "_links": {
                        "html": {"href": f"{html}#pullrequestreview-{i}"},
                        "pull_request": {"href": f"{shapes.repo_api}/pulls/{pr.number}"},
                    },
                    "author_association": "MEMBER",
                    "submitted_at": iso(pr.updated_at),
                }
            )
        return Reply(200, None, page=reviews)

    def comment_text(self, body: Json, *, creating: bool) -> str:
        text: str = (body or {}).get("body") or ""
        if not text or len(text) > BODY_LIMIT:
            raise self.invalid(
                "body is too long (maximum is 65536 characters)" if text else "", "body"
            )
        return text

    def add_labels(self, req: Request) -> Reply:
        pr = self.pull(int(req.match.group(1)))
        names = (req.body or {}).get("labels")
        if not isinstance(names, list):
            raise self.invalid("", "labels")
        for n in names:
            self.labels.setdefault(str(n), self.next_id())  # GitHub creates missing labels
            if n not in pr.labels:
                pr.labels.append(str(n))
        return Reply(200, [self.shapes.label(n, self.labels[n]) for n in pr.labels])

    def create_status(self, req: Request) -> Reply:
        body = req.body or {}
        if body.get("state") not in ("error", "failure", "pending", "success"):
            raise self.invalid("", "state")
        if len(body.get("description") or "") > 140:
            raise self.invalid("description is too long (maximum is 140 characters)")
        context = body.get("context") or "default"
        return self.add_status(req.match.group(1), context, body, id=self.next_id())

    def status_json(self, st: Status) -> Json:
        return {
            "url": f"{self.shapes.repo_api}/statuses/{st.sha}",
            "avatar_url": None,
            "id": st.id,
            "node_id": node_id("StatusContext", st.id),
            "state": st.state,
            "context": st.context,
            "description": st.description or None,
            "target_url": st.target_url or None,
            "created_at": iso(st.created_at),
            "updated_at": iso(st.created_at),
            "creator": self.user_json("gitopsbot"),
        }

    def permission(self, req: Request) -> Reply:
        user = req.match.group(1)
        level = self.permission_of(user)
        # GitHub's role names: admin, maintain, write, triage, read; "none" has none.
        role = level if level != "none" else "read"
        collaborator = self.user_json(user) | {"role_name": role}
        return Reply(200, {"permission": level, "role_name": role, "user": collaborator})

    # -- GitHub Apps (github_apps.py) --------------------------------------------------------
    def get_app(self, req: Request) -> Reply:
        return Reply(200, self.apps.app_json(self._jwt_app(req), self.url))

    def repo_installation(self, req: Request) -> Reply:
        app = self._jwt_app(req)
        try:
            return Reply(200, self.apps.installation_json(app, self.api_url, self.url))
        except AppRefused as refused:
            raise Answer(refused.status, refused.body()) from None

    def access_token(self, req: Request) -> Reply:
        app = self._jwt_app(req)
        try:
            return Reply(201, self.apps.mint(app, int(req.match.group(1))))
        except AppRefused as refused:
            raise Answer(refused.status, refused.body()) from None

    def _jwt_app(self, req: Request) -> LocalApp:
        try:
            return self.apps.verify_jwt(req.token)
        except AppRefused as refused:
            raise Answer(refused.status, refused.body()) from None
