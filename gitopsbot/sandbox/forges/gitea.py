"""A local Gitea / Forgejo REST API v1 (the subset gitopsbot uses), per the Gitea swagger.

Pulls, issue comments, labels, reviews, commit statuses and a collaborator's permission
(``collaborators/{login}/permission``) under /api/v1/repos/{owner}/{repo}.
Lists paginate with ``page``/``limit`` (30 by default, at most 50: Gitea's default settings)
as a real Gitea 1.27 does (checked by the ``realgitea`` tests): pulls and statuses with a Link
header and X-Total-Count, labels and reviews with X-Total-Count only (no Link), and an
issue's comments not at all; a second open pull
request for the same head and base is refused with 409 "pull request already exists for these
targets"; 401 on a bad token. Gitea sends no rate-limit headers (proxies in front may 429).
``POST /pulls/{n}/merge`` merges (``Do``: merge, squash, rebase, rebase-merge; the merge
commit's ``MergeTitleField``/``MergeMessageField``; ``head_commit_id`` must be the head when
given) and answers 200 with no body; refused with 405 (closed or already merged), 409 (the
head moved: ``head_commit_id`` is not the head; or a conflict). ``GET /pulls/{n}/merge`` is
204 when merged, 404 when not.
"""

from __future__ import annotations

import re

from gitopsbot.core.forge.webhook_events import gitea_signature
from gitopsbot.sandbox.forges.github_like import GitHubLikeForge
from gitopsbot.sandbox.forges.model import (
    Answer,
    Comment,
    Json,
    Pull,
    Reply,
    Request,
    Status,
    delivery_id,
    github_like_merged_event,
    iso,
)

_STATES = ("pending", "success", "error", "failure", "warning")


class GiteaForge(GitHubLikeForge):
    name = "gitea"
    api_prefix = "/api/v1"
    rate_header_prefix = ""
    size_param = "limit"
    # Gitea's app.ini: [api] DEFAULT_PAGING_NUM = 30, MAX_RESPONSE_ITEMS = 50.
    default_page_size = 30
    max_page_size = 50
    etags = False
    merge_verb = "POST"

    def merged_event(self, pr: Pull, secret: str) -> tuple[dict[str, str], bytes]:
        body = github_like_merged_event(pr)
        return {
            "X-Gitea-Event": "pull_request",
            "X-Gitea-Delivery": delivery_id(),
            "X-Gitea-Signature": gitea_signature(secret, body),
        }, body

    def add_routes(self) -> None:
        super().add_routes()
        repo = rf"/repos/{self.owner}/{self.repo}"
        self.route("GET", repo + r"/labels", self.list_labels)
        self.route("POST", repo + r"/labels", self.create_label)

    def not_found_body(self) -> Json:
        return {"message": "not found", "url": f"{self.url}/api/swagger"}

    def unauthorized_body(self) -> Json:
        return {"message": "invalid username, password or token", "url": f"{self.url}/api/swagger"}

    def rate_limited_body(self) -> Json:
        return {"message": "Too Many Requests"}

    def page_headers(
        self, raw_path: str, page: int, pages: int, size: int, total: int
    ) -> dict[str, str]:
        if re.search(r"/(labels|reviews)(\?|$)", raw_path):
            return {"X-Total-Count": str(total)}
        return {**self.link_header(raw_path, page, pages), "X-Total-Count": str(total)}

    def list_comments(self, req: Request) -> Reply:
        # All of them in one answer: Gitea's issue comment list takes no page or limit.
        reply = super().list_comments(req)
        found = reply.page or []
        return Reply(200, found, {"X-Total-Count": str(len(found))})

    def label_json(self, name: str) -> Json:
        return {"id": self.labels[name], "name": name, "color": "ededed"}

    def pull_json(self, pr: Pull) -> Json:
        return {
            "id": 5000 + pr.number,
            "number": pr.number,
            "title": pr.title,
            "body": pr.body,
            "state": pr.state,
            "labels": [self.label_json(n) for n in pr.labels],
            "html_url": f"{self.url}/{self.owner}/{self.repo}/pulls/{pr.number}",
            "mergeable": pr.mergeable,
            "merged": pr.merged_at is not None,
            "merged_at": iso(pr.merged_at),
            "merge_commit_sha": pr.merge_commit_sha or None,
            "head": {"ref": pr.head, "sha": pr.head_sha, "label": pr.head},
            "base": {"ref": pr.base, "label": pr.base},
            "created_at": iso(pr.created_at),
            "updated_at": iso(pr.updated_at),
            "closed_at": iso(pr.updated_at) if pr.state == "closed" else None,
        }

    def comment_json(self, c: Comment) -> Json:
        return {
            "id": c.id,
            "body": c.body,
            "html_url": f"{self.url}/{self.owner}/{self.repo}/pulls/{c.number}#issuecomment-{c.id}",
            "user": {"login": c.author, "id": self.users.get(c.author, 0)},
            "created_at": iso(c.created_at),
            "updated_at": iso(c.updated_at),
        }

    def list_pulls(self, req: Request) -> Reply:
        state = req.query.get("state", "open")
        pulls = [p for p in self.pulls.values() if state == "all" or p.state == state]
        if req.query.get("sort") == "recentupdate":
            pulls.sort(key=lambda p: (p.updated_at, p.number), reverse=True)
        else:
            pulls.sort(key=lambda p: p.number, reverse=True)
        return Reply(200, None, page=[self.pull_json(p) for p in pulls])

    def create_pull(self, req: Request) -> Reply:
        body = req.body or {}
        for name in ("head", "base", "title"):
            if not body.get(name):
                raise Answer(422, {"message": f"[{name.capitalize()}]: Required", "url": ""})
        existing = self.open_pull_for(body["head"], body["base"])
        if existing is not None:
            msg = (
                f"pull request already exists for these targets [id: {5000 + existing.number}, "
                f"issue_id: {existing.number}, head_repo_id: 1, base_repo_id: 1, "
                f"head_branch: {existing.head}, "
                f"base_branch: {existing.base}]"
            )
            raise Answer(409, {"message": msg, "url": ""})
        pr = self.new_pull(
            head=body["head"], base=body["base"], title=body["title"], body=body.get("body") or ""
        )
        return Reply(201, self.pull_json(pr))

    def get_pull(self, req: Request) -> Reply:
        return Reply(200, self.pull_json(self.pull(int(req.match.group(1)))))

    def update_pull(self, req: Request) -> Reply:
        pr = self.pull(int(req.match.group(1)))
        body = req.body or {}
        self.edit_pull(pr, body, state=body.get("state"))
        return Reply(201, self.pull_json(pr))  # Gitea answers an edit with 201

    def merge_route(self, req: Request) -> Reply:
        pr = self.pull(int(req.match.group(1)))
        body = req.body or {}
        method = body.get("Do") or ""
        if method not in ("merge", "squash", "rebase", "rebase-merge"):
            raise Answer(422, {"message": "[Do]: Required", "url": ""})
        if self.git is None:
            raise self.merge_refused("conflict", pr)
        title, detail = body.get("MergeTitleField"), body.get("MergeMessageField")
        message = f"{title}\n\n{detail or ''}".rstrip() + "\n" if title else ""
        self.merge_pull(
            pr,
            method=method,
            sha=str(body.get("head_commit_id") or ""),
            message=message,
            squash_message=message,
        )
        return Reply(200, None)

    def merge_refused(self, why: str, pr: Pull) -> Answer:
        if why == "closed":
            return Answer(405, {"message": "The PR is closed or already merged", "url": ""})
        if why == "sha":
            return Answer(409, {"message": "head out of date", "url": ""})
        return Answer(409, {"message": "merge conflict", "url": ""})

    def create_refused(self, why: str, branch: str) -> Answer:
        if why == "no-commits":
            return Answer(422, {"message": "no commits between base and head", "url": ""})
        return Answer(404, {"message": f"branch {branch} does not exist", "url": ""})

    def merge_message(self, pr: Pull) -> str:
        return f"Merge pull request '{pr.title}' (#{pr.number}) from {pr.head} into {pr.base}\n"

    def squash_message(self, pr: Pull) -> str:
        return f"{pr.title} (#{pr.number})\n\n{pr.body}".rstrip() + "\n"

    def list_reviews(self, req: Request) -> Reply:
        pr = self.pull(int(req.match.group(1)))
        reviews = [
            {"id": i + 1, "user": {"login": u}, "state": "APPROVED", "dismissed": False}
            for i, u in enumerate(pr.approvers)
        ]
        return Reply(200, None, page=reviews)

    def comment_text(self, body: Json, *, creating: bool) -> str:
        text: str = (body or {}).get("body") or ""
        if not text:
            raise Answer(422, {"message": "[Body]: Required", "url": ""})
        return text

    def list_labels(self, req: Request) -> Reply:
        return Reply(200, None, page=[self.label_json(n) for n in sorted(self.labels)])

    def create_label(self, req: Request) -> Reply:
        body = req.body or {}
        name = str(body.get("name") or "")
        if not name or not body.get("color"):
            raise Answer(422, {"message": "[Name Color]: Required", "url": ""})
        if name in self.labels:
            raise Answer(409, {"message": "label already exists", "url": ""})
        self.labels[name] = self.next_id()
        return Reply(201, self.label_json(name))

    def add_labels(self, req: Request) -> Reply:
        pr = self.pull(int(req.match.group(1)))
        by_id = {v: k for k, v in self.labels.items()}
        for ref in (req.body or {}).get("labels") or []:
            name = by_id.get(ref) if isinstance(ref, int) else (ref if ref in self.labels else None)
            if name is None:
                raise Answer(422, {"message": f"label does not exist [id: {ref}]", "url": ""})
            if name not in pr.labels:
                pr.labels.append(name)
        return Reply(200, [self.label_json(n) for n in pr.labels])

    def create_status(self, req: Request) -> Reply:
        body = req.body or {}
        if body.get("state") not in _STATES:
            raise Answer(422, {"message": "[State]: Required", "url": ""})
        return self.add_status(req.match.group(1), body.get("context") or "default", body)

    @staticmethod
    def status_json(st: Status) -> Json:
        return {
            "status": st.state,
            "context": st.context,
            "description": st.description,
            "target_url": st.target_url,
        }

    def permission(self, req: Request) -> Reply:
        user = req.match.group(1)
        level = self.permission_of(user)
        return Reply(200, {"permission": level, "role_name": level, "user": {"login": user}})
