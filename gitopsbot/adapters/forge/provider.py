"""The forge port's behaviour written once over each provider's primitive calls.

Idempotency and "exactly one comment" are decided here, not per provider:

* open_or_update_pull_request: find (branch + marker) → update; else create; a create that
  the forge refuses as a duplicate (GitHub 422, GitLab/Gitea 409 → ForgeConflict), or that
  was retried after its answer was lost, is resolved by finding again and updating.
* upsert_comment: list the request's comments, keep one per (marker, part), edit it in place
  only when the text changed, create missing parts, delete stale parts and duplicates (a
  retried POST whose first answer was lost can leave a duplicate; the next upsert repairs it).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import replace

from gitopsbot.adapters.forge._http import ForgeHttp
from gitopsbot.core.forge.forge_types import (
    CommentInfo,
    CommitState,
    CommitStatus,
    PullRequestDraft,
    PullRequestInfo,
    check_marker,
    find_marker,
    split_comment,
)
from gitopsbot.errors import ForgeConflict, ForgeFailed
from gitopsbot.ports.forge import Forge

STATUS_DESCRIPTION_LIMIT = 140  # GitHub refuses longer commit-status descriptions


class ForgeProvider(Forge, ABC):
    """The Forge port from a provider's primitives."""

    http: ForgeHttp  # the choke point; ``http.stats`` counts requests, 304s, retries

    # -- primitives, one request (or one paginated list) each ------------------------------
    @abstractmethod
    def _open_pulls_from(self, branch: str) -> list[PullRequestInfo]: ...

    @abstractmethod
    def _create_pull(self, *, branch: str, base: str, title: str, body: str) -> PullRequestInfo:
        """Raises ForgeConflict when an open request from ``branch`` already exists."""

    @abstractmethod
    def _update_pull(self, number: int, *, title: str, body: str) -> PullRequestInfo: ...

    @abstractmethod
    def _list_comments(self, number: int) -> list[CommentInfo]: ...

    @abstractmethod
    def _create_comment(self, number: int, body: str) -> CommentInfo: ...

    @abstractmethod
    def _edit_comment(self, number: int, comment_id: int, body: str) -> CommentInfo: ...

    @abstractmethod
    def _delete_comment(self, number: int, comment_id: int) -> None: ...

    @abstractmethod
    def _close(self, number: int) -> None: ...

    @abstractmethod
    def _set_status(self, sha: str, status: CommitStatus) -> None: ...

    # -- the port --------------------------------------------------------------------------
    def find_pull_request(self, branch: str, marker: str) -> PullRequestInfo | None:
        check_marker(marker)
        for pr in self._open_pulls_from(branch):
            if pr.marker == marker:
                return pr
        return None

    def open_or_update_pull_request(self, draft: PullRequestDraft) -> PullRequestInfo:
        text = draft.marked_body
        pr = self.find_pull_request(draft.branch, draft.marker)
        if pr is None:
            try:
                pr = self._create_pull(
                    branch=draft.branch, base=draft.base, title=draft.title, body=text
                )
            except ForgeConflict:
                # Our earlier create went through (its answer was lost) or someone opened one.
                pr = self.find_pull_request(draft.branch, draft.marker)
                if pr is None:
                    raise ForgeFailed(
                        f"an open request from branch {draft.branch!r} exists without the "
                        f"gitopsbot marker {draft.marker!r}; close it or remove the branch"
                    ) from None
        if pr.title != draft.title or pr.body.strip() != text.strip():
            pr = self._update_pull(pr.number, title=draft.title, body=text)
        missing = [name for name in draft.labels if name not in pr.labels]
        if missing:
            self.add_labels(pr.number, missing)
            pr = replace(pr, labels=(*pr.labels, *missing))
        return pr

    def upsert_comment(self, number: int, *, marker: str, body: str) -> CommentInfo:
        texts = split_comment(body, marker)
        ours: dict[int, CommentInfo] = {}
        extra: list[CommentInfo] = []
        for comment in self._list_comments(number):
            tag = find_marker(comment.body)
            if tag is None or tag.marker != marker:
                continue
            if tag.part <= len(texts) and tag.part not in ours:
                ours[tag.part] = comment
            else:
                extra.append(comment)  # a stale part or a duplicate
        written: list[CommentInfo] = []
        for part, text in enumerate(texts, start=1):
            old = ours.get(part)
            if old is None:
                new = self._create_comment(number, text)
            elif old.body.strip() != text.strip():
                new = self._edit_comment(number, old.id, text)
            else:
                new = old
            written.append(replace(new, parts=len(texts)))
        for comment in extra:
            self._delete_comment(number, comment.id)
        return written[0]

    def set_status(self, sha: str, status: CommitStatus) -> None:
        description = status.description
        if len(description) > STATUS_DESCRIPTION_LIMIT:
            description = description[: STATUS_DESCRIPTION_LIMIT - 1] + "…"
        self._set_status(
            sha, replace(status, state=CommitState(status.state), description=description)
        )

    def close_pull_request(self, number: int, comment: str = "") -> None:
        if comment:
            self._create_comment(number, comment)
        self._close(number)
