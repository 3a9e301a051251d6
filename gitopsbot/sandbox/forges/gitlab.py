"""A local GitLab REST API v4 (the subset gitopsbot uses), per docs.gitlab.com/ee/api.

Merge requests, notes, commit statuses, labels, approvals and a member's access level
(``members/all/:user_id``, 404 for a non-member) under /api/v4/projects/{url-encoded path}.
Lists paginate with ``page``/``per_page`` (20 by default, at most 100) and the
X-Page / X-Next-Page / X-Total / Link headers; a second open merge request from the same
source branch is refused with 409; re-posting a commit status in the state it already has is
refused with 400 "Cannot transition status"; 401 on a bad token.
``PUT /merge_requests/:iid/merge`` merges by the project's merge method (``merge_method``:
``merge`` a merge commit, ``rebase_merge`` a merge commit only when the source branch holds the
target's tip, ``ff`` fast-forward only), squashing first when ``squash`` is true (with a merge
commit: a squash commit, then the merge commit of it), and answers the merge request; refused
with 405 (not open), 409 "SHA does not match HEAD of source branch: …" (``sha`` given and not
the head), 422 "Branch cannot be merged" (conflicts, or a fast-forward is not possible).
"""

from __future__ import annotations

import json
from urllib.parse import quote

from gitopsbot.sandbox.forges.base import LocalForge
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
    parse_iso,
)

NOTE_LIMIT = 1_000_000
_STATES = ("pending", "running", "success", "failed", "canceled")


class GitLabForge(LocalForge):
    name = "gitlab"
    api_prefix = "/api/v4"
    rate_header_prefix = "RateLimit-"
    default_page_size = 20  # docs.gitlab.com/api/rest/#pagination: per_page 20, at most 100
    etags = False
    merge_method = "merge"  # the project setting: merge | rebase_merge | ff

    def merged_event(self, pr: Pull, secret: str) -> tuple[dict[str, str], bytes]:
        attrs = self.mr_json(pr) | {
            "action": "merge",
            "last_commit": {"id": pr.head_sha},
        }
        body = json.dumps({"object_kind": "merge_request", "object_attributes": attrs}).encode()
        return {
            "X-Gitlab-Event": "Merge Request Hook",
            "X-Gitlab-Event-UUID": delivery_id(),
            "X-Gitlab-Token": secret,
        }, body

    def add_routes(self) -> None:
        project = "/projects/" + quote(f"{self.owner}/{self.repo}", safe="")
        mr = project + r"/merge_requests/(\d+)"
        self.route("GET", project + r"/merge_requests", self.list_mrs)
        self.route("POST", project + r"/merge_requests", self.create_mr)
        self.route("GET", mr, self.get_mr)
        self.route("PUT", mr, self.update_mr)
        self.route("PUT", mr + r"/merge", self.merge_route)
        self.route("GET", mr + r"/approvals", self.approvals)
        self.route("GET", mr + r"/notes", self.list_notes)
        self.route("POST", mr + r"/notes", self.create_comment)
        self.route("PUT", mr + r"/notes/(\d+)", self.update_comment)
        self.route("DELETE", mr + r"/notes/(\d+)", self.delete_comment)
        self.route("POST", project + r"/statuses/([0-9a-f]{7,64})", self.create_status)
        self.route("GET", project + r"/repository/commits/([^/]+)/statuses", self.list_statuses)
        self.route("GET", project + r"/members/all/(\d+)", self.member)

    def token_of(self, headers: dict[str, str]) -> str:
        return headers.get("private-token") or super().token_of(headers)

    def not_found_body(self) -> Json:
        return {"message": "404 Not found"}

    def unauthorized_body(self) -> Json:
        return {"message": "401 Unauthorized"}

    def rate_limited_body(self) -> Json:
        return {"message": "Retry later"}

    def page_headers(
        self, raw_path: str, page: int, pages: int, size: int, total: int
    ) -> dict[str, str]:
        headers = self.link_header(raw_path, page, pages)
        headers.update(
            {
                "X-Page": str(page),
                "X-Per-Page": str(size),
                "X-Next-Page": str(page + 1) if page < pages else "",
                "X-Prev-Page": str(page - 1) if page > 1 else "",
                "X-Total": str(total),
                "X-Total-Pages": str(pages),
            }
        )
        return headers

    def mr_json(self, pr: Pull) -> Json:
        if pr.merged_at is not None:
            state = "merged"
        else:
            state = "opened" if pr.state == "open" else "closed"
        return {
            "id": 1000 + pr.number,
            "iid": pr.number,
            "project_id": 1,
            "title": pr.title,
            "description": pr.body,
            "state": state,
            "created_at": iso(pr.created_at),
            "updated_at": iso(pr.updated_at),
            "merged_at": iso(pr.merged_at),
            "closed_at": iso(pr.updated_at) if state == "closed" else None,
            "source_branch": pr.head,
            "target_branch": pr.base,
            "labels": list(pr.labels),
            "sha": pr.head_sha,
            "merge_commit_sha": pr.merge_commit_sha or None,
            "squash_commit_sha": pr.squash_commit_sha or None,
            "detailed_merge_status": "mergeable" if pr.mergeable else "conflict",
            "web_url": f"{self.url}/{self.owner}/{self.repo}/-/merge_requests/{pr.number}",
        }

    def comment_json(self, c: Comment) -> Json:
        """A note (GitLab's word for a comment) on a merge request."""
        return {
            "id": c.id,
            "body": c.body,
            "system": False,
            "noteable_type": "MergeRequest",
            "noteable_iid": c.number,
            "author": {"username": c.author, "id": self.users.get(c.author, 0)},
            "created_at": iso(c.created_at),
            "updated_at": iso(c.updated_at),
        }

    def list_mrs(self, req: Request) -> Reply:
        q = req.query
        state = q.get("state", "all")
        after = parse_iso(q["updated_after"]) if q.get("updated_after") else None
        mrs = [self.mr_json(p) for p in self.pulls.values()]
        mrs = [
            m
            for m in mrs
            if (state == "all" or m["state"] == state)
            and (not q.get("source_branch") or m["source_branch"] == q["source_branch"])
            and (not q.get("target_branch") or m["target_branch"] == q["target_branch"])
            and (after is None or parse_iso(m["updated_at"]) >= after)
        ]
        key = "updated_at" if q.get("order_by") == "updated_at" else "created_at"
        mrs.sort(key=lambda m: (m[key], m["iid"]), reverse=q.get("sort", "desc") == "desc")
        return Reply(200, None, page=mrs)

    def create_mr(self, req: Request) -> Reply:
        body = req.body or {}
        missing = [k for k in ("source_branch", "target_branch", "title") if not body.get(k)]
        if missing:
            raise Answer(400, {"error": f"{missing[0]} is missing"})
        if len(body.get("description") or "") > NOTE_LIMIT:
            raise Answer(400, {"message": {"description": ["is too long"]}})
        for p in self.pulls.values():
            if p.head == body["source_branch"] and p.state == "open":
                msg = (
                    f"Another open merge request already exists for this source branch: !{p.number}"
                )
                raise Answer(409, {"message": [msg]})
        pr = self.new_pull(
            head=body["source_branch"],
            base=body["target_branch"],
            title=body["title"],
            body=body.get("description") or "",
        )
        for name in str(body.get("labels") or "").split(","):
            if name.strip():
                pr.labels.append(name.strip())
        return Reply(201, self.mr_json(pr))

    def get_mr(self, req: Request) -> Reply:
        return Reply(200, self.mr_json(self.pull(int(req.match.group(1)))))

    def update_mr(self, req: Request) -> Reply:
        pr = self.pull(int(req.match.group(1)))
        body = req.body or {}
        for name in str(body.get("add_labels") or "").split(","):
            if name.strip() and name.strip() not in pr.labels:
                pr.labels.append(name.strip())
        closing = body.get("state_event") == "close"
        self.edit_pull(pr, body, text="description", state="closed" if closing else None)
        return Reply(200, self.mr_json(pr))

    def merge_route(self, req: Request) -> Reply:
        pr = self.pull(int(req.match.group(1)))
        body = req.body or {}
        squash = body.get("squash") in (True, "true")
        if self.git is None:
            raise self.merge_refused("conflict", pr)
        if self.merge_method in ("rebase_merge", "ff"):
            self.sync()
            base = self.git.tip(pr.base)
            if pr.state == "open" and (base is None or not self.git.contains(base, pr.head_sha)):
                raise self.merge_refused("conflict", pr)  # "fast-forward merge is not possible"
        method = {
            ("merge", False): "merge",
            ("merge", True): "squash-merge",
            ("rebase_merge", False): "merge",
            ("rebase_merge", True): "squash-merge",
            ("ff", False): "ff",
            ("ff", True): "squash",
        }[(self.merge_method, squash)]
        self.merge_pull(
            pr,
            method=method,
            sha=str(body.get("sha") or ""),
            message=str(body.get("merge_commit_message") or ""),
            squash_message=str(body.get("squash_commit_message") or ""),
        )
        return Reply(200, self.mr_json(pr))

    def merge_refused(self, why: str, pr: Pull) -> Answer:
        if why == "closed":
            return Answer(405, {"message": "405 Method Not Allowed"})
        if why == "sha":
            return Answer(
                409, {"message": f"SHA does not match HEAD of source branch: {pr.head_sha}"}
            )
        return Answer(422, {"message": "Branch cannot be merged"})

    def create_refused(self, why: str, branch: str) -> Answer:
        if why == "no-commits":
            return Answer(409, {"message": ["No commits between the source and target branch"]})
        return Answer(400, {"message": {"source_branch": [f"{branch} does not exist"]}})

    def merge_message(self, pr: Pull) -> str:
        return (
            f"Merge branch '{pr.head}' into '{pr.base}'\n\n{pr.title}\n\n"
            f"See merge request {self.owner}/{self.repo}!{pr.number}"
        )

    def squash_message(self, pr: Pull) -> str:
        return pr.title

    def merge_commit_of(self, method: str, tip: str, squash: str) -> str:
        # A fast-forward makes no merge commit: GitLab reports none (the squash commit, if
        # any, is squash_commit_sha).
        return "" if method in ("ff", "squash") else tip

    def approvals(self, req: Request) -> Reply:
        pr = self.pull(int(req.match.group(1)))
        approved_by = [{"user": {"username": u}} for u in pr.approvers]
        return Reply(200, {"approved": bool(approved_by), "approved_by": approved_by})

    def list_notes(self, req: Request) -> Reply:
        number = int(req.match.group(1))
        self.pull(number)
        notes = sorted(
            (c for c in self.comments.values() if c.number == number), key=lambda c: c.id
        )
        if req.query.get("sort", "desc") == "desc":
            notes.reverse()
        return Reply(200, None, page=[self.comment_json(c) for c in notes])

    def comment_text(self, body: Json, *, creating: bool) -> str:
        text: str = (body or {}).get("body") or ""
        if not text:
            raise Answer(400, {"error": "body is missing"})
        if creating and len(text) > NOTE_LIMIT:  # this sandbox checks a new note's length only
            raise Answer(
                400, {"message": {"note": ["is too long (maximum is 1000000 characters)"]}}
            )
        return text

    def create_status(self, req: Request) -> Reply:
        body = req.body or {}
        state = body.get("state")
        if state not in _STATES:
            raise Answer(400, {"error": "state does not have a valid value"})
        name = body.get("name") or body.get("context") or "default"
        sha = req.match.group(1)
        previous = [s for s in self.statuses if s.sha == sha and s.context == name]
        if previous and previous[-1].state == state:
            raise Answer(400, {"message": f"Cannot transition status via :{state} from :{state}"})
        return self.add_status(sha, name, body)

    @staticmethod
    def status_json(st: Status) -> Json:
        return {
            "sha": st.sha,
            "status": st.state,
            "name": st.context,
            "description": st.description,
            "target_url": st.target_url or None,
        }

    def member(self, req: Request) -> Reply:
        """``GET /projects/:id/members/all/:user_id``: 404 unless a member (here: any
        permission but none), with GitLab's access level."""
        uid = int(req.match.group(1))
        user = next((name for name, i in self.users.items() if i == uid), None)
        level = self.permission_of(user) if user is not None else "none"
        if level == "none":
            raise Answer(404, {"message": "404 Not found"})
        access = {"read": 20, "write": 30, "admin": 40}.get(level, 10)
        return Reply(200, {"id": uid, "username": user, "access_level": access, "state": "active"})
