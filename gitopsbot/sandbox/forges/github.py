"""A local GitHub REST API (the subset gitopsbot uses), per docs.github.com/rest.

Pulls, issue comments, commit statuses, labels, reviews and a collaborator's permission
(``collaborators/{login}/permission``: admin, write, read or none; 404 for an unknown
account) under /repos/{owner}/{repo}.
Lists paginate with ``page``/``per_page`` (30 by default, at most 100) and a Link header; a
second open pull request for the same head and base is refused with 422 "A pull request
already exists for owner:branch.";
bodies above 65,536 characters are refused with 422; 401 on a bad token.
``PUT /pulls/{n}/merge`` merges (``merge_method`` merge, squash or rebase; ``sha`` must be the
head when given) and answers ``{"sha", "merged", "message"}``; refused with 405 "Pull Request
is not mergeable" (closed, merged, conflicting), 409 "Head branch was modified. Review and try
the merge again." (``sha`` is not the head), 422 for an unknown ``merge_method``.
"""

from __future__ import annotations

from gitopsbot.core.webhook_events import github_signature
from gitopsbot.sandbox.forges.base import (
    Answer,
    Comment,
    Json,
    LocalForge,
    Pull,
    Reply,
    Request,
    Status,
    delivery_id,
    github_like_merged_event,
    iso,
    now_utc,
)

BODY_LIMIT = 65_536
DOCS = "https://docs.github.com/rest"


class GitHubForge(LocalForge):
    name = "github"
    api_prefix = "/api/v3"  # served as GitHub Enterprise Server does; github.com has none

    def merged_event(self, pr: Pull, secret: str) -> tuple[dict[str, str], bytes]:
        body = github_like_merged_event(pr)
        return {
            "X-GitHub-Event": "pull_request",
            "X-GitHub-Delivery": delivery_id(),
            "X-Hub-Signature-256": github_signature(secret, body),
        }, body

    def add_routes(self) -> None:
        repo = rf"/repos/{self.owner}/{self.repo}"
        self.route("GET", repo + r"/pulls", self.list_pulls)
        self.route("POST", repo + r"/pulls", self.create_pull)
        self.route("GET", repo + r"/pulls/(\d+)", self.get_pull)
        self.route("PATCH", repo + r"/pulls/(\d+)", self.update_pull)
        self.route("PUT", repo + r"/pulls/(\d+)/merge", self.merge_route)
        self.route("GET", repo + r"/pulls/(\d+)/merge", self.merged_check)
        self.route("GET", repo + r"/pulls/(\d+)/reviews", self.list_reviews)
        self.route("GET", repo + r"/issues/(\d+)/comments", self.list_comments)
        self.route("POST", repo + r"/issues/(\d+)/comments", self.create_comment)
        self.route("PATCH", repo + r"/issues/comments/(\d+)", self.update_comment)
        self.route("DELETE", repo + r"/issues/comments/(\d+)", self.delete_comment)
        self.route("POST", repo + r"/issues/(\d+)/labels", self.add_labels)
        self.route("POST", repo + r"/statuses/([0-9a-f]{7,64})", self.create_status)
        self.route("GET", repo + r"/commits/([^/]+)/statuses", self.list_statuses)
        self.route("GET", repo + r"/collaborators/([^/]+)/permission", self.permission)

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
        return Answer(422, {"message": "Validation Failed", "errors": [error], "status": "422"})

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
                "status": "422",
            },
        )

    # -- shapes ----------------------------------------------------------------------------
    def pull_json(self, pr: Pull, *, full: bool) -> Json:
        html = f"{self.url}/{self.owner}/{self.repo}/pull/{pr.number}"
        out: Json = {
            "url": f"{self.url}/repos/{self.owner}/{self.repo}/pulls/{pr.number}",
            "html_url": html,
            "number": pr.number,
            "state": pr.state,
            "title": pr.title,
            "body": pr.body,
            "labels": [{"name": n, "id": self.labels.get(n, 0)} for n in pr.labels],
            "created_at": iso(pr.created_at),
            "updated_at": iso(pr.updated_at),
            "closed_at": iso(pr.updated_at) if pr.state == "closed" else None,
            "merged_at": iso(pr.merged_at),
            "merge_commit_sha": pr.merge_commit_sha or None,
            "head": {"ref": pr.head, "sha": pr.head_sha, "label": f"{self.owner}:{pr.head}"},
            "base": {"ref": pr.base, "label": f"{self.owner}:{pr.base}"},
        }
        if full:  # only the single-pull endpoint computes these
            out["merged"] = pr.merged_at is not None
            out["mergeable"] = pr.mergeable if pr.state == "open" else None
        return out

    def comment_json(self, c: Comment) -> Json:
        return {
            "id": c.id,
            "body": c.body,
            "html_url": f"{self.url}/{self.owner}/{self.repo}/pull/{c.number}#issuecomment-{c.id}",
            "created_at": iso(c.created_at),
            "updated_at": iso(c.updated_at),
            "user": {"login": c.author, "id": self.users.get(c.author, 0)},
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
        pr.title = body.get("title", pr.title)
        pr.body = body.get("body", pr.body)
        if body.get("state") in ("open", "closed") and pr.merged_at is None:
            pr.state = body["state"]
        pr.updated_at = now_utc()
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

    def merged_check(self, req: Request) -> Reply:
        """204 when merged, 404 when not (GitHub's "check if a pull request has been merged")."""
        pr = self.pull(int(req.match.group(1)))
        if pr.merged_at is None:
            raise Answer(404, self.not_found_body())
        return Reply(204, None)

    def list_reviews(self, req: Request) -> Reply:
        pr = self.pull(int(req.match.group(1)))
        reviews = [
            {"id": i + 1, "user": {"login": u}, "state": "APPROVED", "commit_id": pr.head_sha}
            for i, u in enumerate(pr.approvers)
        ]
        return Reply(200, None, page=reviews)

    def create_comment(self, req: Request) -> Reply:
        number = int(req.match.group(1))
        self.pull(number)
        text = (req.body or {}).get("body") or ""
        if not text or len(text) > BODY_LIMIT:
            raise self.invalid(
                "body is too long (maximum is 65536 characters)" if text else "", "body"
            )
        now = now_utc()
        c = Comment(self.next_id(), number, text, now, now)
        self.comments[c.id] = c
        return Reply(201, self.comment_json(c))

    def update_comment(self, req: Request) -> Reply:
        c = self.comment(int(req.match.group(1)))
        text = (req.body or {}).get("body") or ""
        if not text or len(text) > BODY_LIMIT:
            raise self.invalid(
                "body is too long (maximum is 65536 characters)" if text else "", "body"
            )
        c.body, c.updated_at = text, now_utc()
        return Reply(200, self.comment_json(c))

    def add_labels(self, req: Request) -> Reply:
        pr = self.pull(int(req.match.group(1)))
        names = (req.body or {}).get("labels")
        if not isinstance(names, list):
            raise self.invalid("", "labels")
        for n in names:
            self.labels.setdefault(str(n), self.next_id())  # GitHub creates missing labels
            if n not in pr.labels:
                pr.labels.append(str(n))
        return Reply(200, [{"name": n, "id": self.labels[n]} for n in pr.labels])

    def create_status(self, req: Request) -> Reply:
        body = req.body or {}
        if body.get("state") not in ("error", "failure", "pending", "success"):
            raise self.invalid("", "state")
        if len(body.get("description") or "") > 140:
            raise self.invalid("description is too long (maximum is 140 characters)")
        st = Status(
            req.match.group(1),
            body.get("context") or "default",
            body["state"],
            body.get("description") or "",
            body.get("target_url") or "",
        )
        self.statuses.append(st)
        return Reply(201, self.status_json(st))

    @staticmethod
    def status_json(st: Status) -> Json:
        return {
            "state": st.state,
            "context": st.context,
            "description": st.description,
            "target_url": st.target_url or None,
        }

    def permission(self, req: Request) -> Reply:
        user = req.match.group(1)
        level = self.permission_of(user)
        return Reply(200, {"permission": level, "role_name": level, "user": {"login": user}})
