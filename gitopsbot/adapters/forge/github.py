"""GitHub (github.com or GitHub Enterprise Server) over the REST API, version 2022-11-28.

Endpoints (all under /repos/{owner}/{repo}): pulls (list/create/get/update), pulls/{n}/reviews
(approvals), issues/{n}/comments and issues/comments/{id} (the plan comment),
issues/{n}/labels, statuses/{sha}, collaborators/{login}/permission (who may give a comment
command). Auth: ``Authorization: Bearer <token>``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any, ClassVar

from gitopsbot.adapters.forge._http import ForgeHttp
from gitopsbot.adapters.forge.provider import ForgeProvider
from gitopsbot.core.forge.forge_types import (
    CommentInfo,
    CommitStatus,
    PullComment,
    PullRequestInfo,
    PullRequestState,
    find_marker,
)
from gitopsbot.errors import ForgeFailed, ForgeNotFound
from gitopsbot.ports.forge import ReadsComments

Json = Any


def parse_time(text: str | None) -> datetime | None:
    return datetime.fromisoformat(text.replace("Z", "+00:00")) if text else None


class GitHubForge(ForgeProvider, ReadsComments):
    """GitHub. Gitea's API follows GitHub's shape, so ``GiteaForge`` is this class with the
    few differences overridden (page size parameter, pull filter, review states, labels)."""

    KIND = "github"
    # ``permission`` values that may write (GitHub folds maintain into write).
    WRITERS: ClassVar[frozenset[str]] = frozenset({"admin", "write"})
    PAGE: ClassVar[Mapping[str, str | int]] = {"per_page": 100}
    COMMENTS_PAGE: ClassVar[Mapping[str, str | int]] = PAGE  # an issue's comment list
    MERGED_LIST: ClassVar[Mapping[str, str | int]] = {"sort": "updated", "direction": "desc"}

    def __init__(self, http: ForgeHttp, repository: str) -> None:
        if repository.count("/") != 1:
            raise ForgeFailed(f"{self.KIND} repository must be owner/name, got {repository!r}")
        self.http = http
        self.owner = repository.split("/")[0]
        self.repo = f"repos/{repository}"

    # -- shapes ----------------------------------------------------------------------------
    def _pull(self, data: Json, *, approvals: int = 0) -> PullRequestInfo:
        merged_at = parse_time(data.get("merged_at"))
        if merged_at is not None or data.get("merged"):
            state = PullRequestState.MERGED
        elif data.get("state") == "open":
            state = PullRequestState.OPEN
        else:
            state = PullRequestState.CLOSED
        body = data.get("body") or ""
        tag = find_marker(body)
        return PullRequestInfo(
            number=int(data["number"]),
            branch=data["head"]["ref"],
            base=data["base"]["ref"],
            title=data.get("title") or "",
            state=state,
            head_sha=data["head"].get("sha") or "",
            url=data.get("html_url") or "",
            body=body,
            marker=tag.marker if tag else "",
            # GitHub fills it with a test merge while the request is open: only a merge counts.
            merge_commit_sha=(data.get("merge_commit_sha") or "")
            if state is PullRequestState.MERGED
            else "",
            merged_at=merged_at,
            mergeable=data.get("mergeable"),
            approvals=approvals,
            labels=tuple(label["name"] for label in data.get("labels") or ()),
        )

    @staticmethod
    def _comment(data: Json) -> CommentInfo:
        return CommentInfo(
            id=int(data["id"]), body=data.get("body") or "", url=data.get("html_url") or ""
        )

    # -- primitives ------------------------------------------------------------------------
    def _open_pulls_from(self, branch: str) -> list[PullRequestInfo]:
        params: dict[str, str | int] = {
            "state": "open",
            "head": f"{self.owner}:{branch}",
            "per_page": 100,
        }
        return [self._pull(p) for p in self.http.pages(f"{self.repo}/pulls", params)]

    def _create_pull(self, *, branch: str, base: str, title: str, body: str) -> PullRequestInfo:
        payload = {"head": branch, "base": base, "title": title, "body": body}
        return self._pull(self.http.send("POST", f"{self.repo}/pulls", payload).body)

    def _update_pull(self, number: int, *, title: str, body: str) -> PullRequestInfo:
        payload = {"title": title, "body": body}
        return self._pull(self.http.send("PATCH", f"{self.repo}/pulls/{number}", payload).body)

    def _list_comments(self, number: int) -> list[CommentInfo]:
        path = f"{self.repo}/issues/{number}/comments"
        return [self._comment(c) for c in self.http.pages(path, dict(self.COMMENTS_PAGE))]

    def _create_comment(self, number: int, body: str) -> CommentInfo:
        path = f"{self.repo}/issues/{number}/comments"
        return self._comment(self.http.send("POST", path, {"body": body}).body)

    def _edit_comment(self, number: int, comment_id: int, body: str) -> CommentInfo:
        path = f"{self.repo}/issues/comments/{comment_id}"
        return self._comment(self.http.send("PATCH", path, {"body": body}).body)

    def _delete_comment(self, number: int, comment_id: int) -> None:
        self.http.send("DELETE", f"{self.repo}/issues/comments/{comment_id}")

    def _close(self, number: int) -> None:
        self.http.send("PATCH", f"{self.repo}/pulls/{number}", {"state": "closed"})

    def _set_status(self, sha: str, status: CommitStatus) -> None:
        payload = {
            "state": status.state.value,
            "description": status.description,
            "context": status.context,
        }
        if status.target_url:
            payload["target_url"] = status.target_url
        self.http.send("POST", f"{self.repo}/statuses/{sha}", payload)

    # -- reads -----------------------------------------------------------------------------
    def get_pull_request(self, number: int) -> PullRequestInfo:
        data = self.http.get(f"{self.repo}/pulls/{number}")
        latest: dict[str, str] = {}
        for review in self._reviews(number):
            verdict = self._verdict(review)
            if verdict is not None:  # a reviewer's latest verdict counts
                latest[(review.get("user") or {}).get("login", "")] = verdict
        return self._pull(data, approvals=sum(1 for s in latest.values() if s == "APPROVED"))

    def _reviews(self, number: int) -> Iterator[Json]:
        return self.http.pages(f"{self.repo}/pulls/{number}/reviews", dict(self.PAGE))

    @staticmethod
    def _verdict(review: Json) -> str | None:
        """APPROVED, or another state that replaces a reviewer's earlier approval."""
        state = review.get("state")
        return state if state in ("APPROVED", "CHANGES_REQUESTED", "DISMISSED") else None

    def add_labels(self, number: int, labels: Sequence[str]) -> None:
        if labels:
            path = f"{self.repo}/issues/{number}/labels"
            self.http.send("POST", path, {"labels": list(labels)})

    def list_merged_since(self, since: datetime) -> list[PullRequestInfo]:
        params: dict[str, str | int] = {"state": "closed", **self.MERGED_LIST, **self.PAGE}
        found = []
        for data in self.http.pages(f"{self.repo}/pulls", params):
            updated = parse_time(data.get("updated_at"))
            if updated is not None and updated < since:
                break  # sorted by update time: everything after is older
            pr = self._pull(data)
            if pr.merged_at is not None and pr.merged_at >= since:
                found.append(pr)
        return sorted(found, key=lambda p: (p.merged_at, p.number))

    # -- comment commands (ports.forge.ReadsComments) --------------------------------------
    def list_comments(self, number: int, *, after: int = 0) -> list[PullComment]:
        path = f"{self.repo}/issues/{number}/comments"
        found = [
            PullComment(
                id=int(c["id"]),
                author=str((c.get("user") or {}).get("login") or ""),
                body=c.get("body") or "",
                created_at=parse_time(c.get("created_at")),
            )
            for c in self.http.pages(path, dict(self.COMMENTS_PAGE))
        ]
        return sorted((c for c in found if c.id > after), key=lambda c: c.id)

    def may_write(self, comment: PullComment) -> bool:
        if not comment.author:
            return False
        try:
            data = self.http.get(f"{self.repo}/collaborators/{comment.author}/permission")
        except ForgeNotFound:  # no such user, or not one the repository knows
            return False
        return str((data or {}).get("permission") or "") in self.WRITERS
