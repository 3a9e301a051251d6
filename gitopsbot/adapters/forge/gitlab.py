"""GitLab (gitlab.com or self-managed) over REST API v4: merge requests, notes, statuses.

Endpoints (under /projects/{url-encoded path}): merge_requests (list/create/get/update;
``add_labels``, ``state_event=close``), merge_requests/{iid}/approvals, merge_requests/{iid}/notes,
statuses/{sha}, members/all/{user id} (who may give a comment command). Auth: ``PRIVATE-TOKEN``.
GitLab has no ``error`` commit state: ERROR is sent as
``failed``; re-posting an unchanged state is refused with 400 "Cannot transition status",
which means the status is already what we want.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

from gitopsbot.adapters.forge._http import ForgeHttp
from gitopsbot.adapters.forge.github import parse_time
from gitopsbot.adapters.forge.provider import ForgeProvider
from gitopsbot.core.forge.forge_types import (
    CommentInfo,
    CommitState,
    CommitStatus,
    PullComment,
    PullRequestInfo,
    PullRequestState,
    find_marker,
)
from gitopsbot.errors import ForgeFailed, ForgeNotFound
from gitopsbot.ports.forge import ReadsComments

Json = Any
_STATES = {
    CommitState.PENDING: "pending",
    CommitState.SUCCESS: "success",
    CommitState.FAILURE: "failed",
    CommitState.ERROR: "failed",
}
# Developer and above may push (Maintainer 40, Owner 50): they may give comment commands.
WRITE_ACCESS = 30
_MERGEABLE = {"mergeable": True, "checking": None, "unchecked": None, "preparing": None}


class GitLabForge(ForgeProvider, ReadsComments):
    def __init__(self, http: ForgeHttp, repository: str) -> None:
        if not repository or repository.startswith("/"):
            raise ForgeFailed(
                f"gitlab project must be a path like group/project, got {repository!r}"
            )
        self.http = http
        self.project = f"projects/{quote(repository, safe='')}"

    def _pull(self, data: Json, *, approvals: int = 0) -> PullRequestInfo:
        state = {"opened": PullRequestState.OPEN, "merged": PullRequestState.MERGED}.get(
            data.get("state", ""), PullRequestState.CLOSED
        )
        body = data.get("description") or ""
        tag = find_marker(body)
        merged_at = parse_time(data.get("merged_at"))
        detailed = data.get("detailed_merge_status") or ""
        return PullRequestInfo(
            number=int(data["iid"]),
            branch=data["source_branch"],
            base=data["target_branch"],
            title=data.get("title") or "",
            state=state,
            head_sha=data.get("sha") or "",
            url=data.get("web_url") or "",
            body=body,
            marker=tag.marker if tag else "",
            merge_commit_sha=data.get("merge_commit_sha") or data.get("squash_commit_sha") or "",
            merged_at=merged_at,
            mergeable=_MERGEABLE.get(detailed, False) if detailed else None,
            approvals=approvals,
            labels=tuple(str(n) for n in data.get("labels") or ()),
        )

    @staticmethod
    def _note(data: Json) -> CommentInfo:
        return CommentInfo(id=int(data["id"]), body=data.get("body") or "")

    def _mr(self, number: int) -> str:
        return f"{self.project}/merge_requests/{number}"

    def _open_pulls_from(self, branch: str) -> list[PullRequestInfo]:
        params: dict[str, str | int] = {"state": "opened", "source_branch": branch, "per_page": 100}
        return [self._pull(m) for m in self.http.pages(f"{self.project}/merge_requests", params)]

    def _create_pull(self, *, branch: str, base: str, title: str, body: str) -> PullRequestInfo:
        payload = {
            "source_branch": branch,
            "target_branch": base,
            "title": title,
            "description": body,
        }
        return self._pull(self.http.send("POST", f"{self.project}/merge_requests", payload).body)

    def _update_pull(self, number: int, *, title: str, body: str) -> PullRequestInfo:
        payload = {"title": title, "description": body}
        return self._pull(self.http.send("PUT", self._mr(number), payload).body)

    def _list_comments(self, number: int) -> list[CommentInfo]:
        params: dict[str, str | int] = {"sort": "asc", "order_by": "created_at", "per_page": 100}
        notes = self.http.pages(f"{self._mr(number)}/notes", params)
        return [self._note(n) for n in notes if not n.get("system")]

    def _create_comment(self, number: int, body: str) -> CommentInfo:
        return self._note(self.http.send("POST", f"{self._mr(number)}/notes", {"body": body}).body)

    def _edit_comment(self, number: int, comment_id: int, body: str) -> CommentInfo:
        path = f"{self._mr(number)}/notes/{comment_id}"
        return self._note(self.http.send("PUT", path, {"body": body}).body)

    def _delete_comment(self, number: int, comment_id: int) -> None:
        self.http.send("DELETE", f"{self._mr(number)}/notes/{comment_id}")

    def _close(self, number: int) -> None:
        self.http.send("PUT", self._mr(number), {"state_event": "close"})

    def _set_status(self, sha: str, status: CommitStatus) -> None:
        payload = {
            "state": _STATES[status.state],
            "name": status.context,
            "description": status.description,
        }
        if status.target_url:
            payload["target_url"] = status.target_url
        try:
            self.http.send("POST", f"{self.project}/statuses/{sha}", payload)
        except ForgeFailed as err:
            if "cannot transition status" not in str(err).lower():
                raise

    def get_pull_request(self, number: int) -> PullRequestInfo:
        data = self.http.get(self._mr(number))
        approvals = self.http.get(f"{self._mr(number)}/approvals") or {}
        return self._pull(data, approvals=len(approvals.get("approved_by") or ()))

    def add_labels(self, number: int, labels: Sequence[str]) -> None:
        if labels:
            self.http.send("PUT", self._mr(number), {"add_labels": ",".join(labels)})

    def list_merged_since(self, since: datetime) -> list[PullRequestInfo]:
        params: dict[str, str | int] = {
            "state": "merged",
            "updated_after": since.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "order_by": "updated_at",
            "sort": "desc",
            "per_page": 100,
        }
        found = [self._pull(m) for m in self.http.pages(f"{self.project}/merge_requests", params)]
        merged = [p for p in found if p.merged_at is not None and p.merged_at >= since]
        return sorted(merged, key=lambda p: (p.merged_at, p.number))

    # -- comment commands (ports.forge.ReadsComments) --------------------------------------
    def list_comments(self, number: int, *, after: int = 0) -> list[PullComment]:
        params: dict[str, str | int] = {"sort": "asc", "order_by": "created_at", "per_page": 100}
        found = [
            PullComment(
                id=int(n["id"]),
                author=str((n.get("author") or {}).get("username") or ""),
                author_id=int((n.get("author") or {}).get("id") or 0),
                body=n.get("body") or "",
                created_at=parse_time(n.get("created_at")),
            )
            for n in self.http.pages(f"{self._mr(number)}/notes", params)
            if not n.get("system")
        ]
        return sorted((c for c in found if c.id > after), key=lambda c: c.id)

    def may_write(self, comment: PullComment) -> bool:
        if not comment.author_id:
            return False
        try:
            member = self.http.get(f"{self.project}/members/all/{comment.author_id}")
        except ForgeNotFound:  # not a member of the project or its groups
            return False
        return int((member or {}).get("access_level") or 0) >= WRITE_ACCESS
