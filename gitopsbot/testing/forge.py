"""FakeForge: the forge port in memory (contract tests: tests/forge)."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime

from gitopsbot.core.forge.forge_types import (
    COMMENT_LIMIT,
    CommentInfo,
    CommitState,
    CommitStatus,
    PullComment,
    PullRequestDraft,
    PullRequestInfo,
    PullRequestState,
    check_marker,
    find_marker,
    split_comment,
)
from gitopsbot.errors import (
    ForgeFailed,
    ForgeNotFound,
)
from gitopsbot.ports.forge import POLICY_CONTEXT, Forge, ReadsComments


@dataclass(slots=True)
class FakeForge(Forge, ReadsComments):
    """A forge in memory: pull requests, comments, statuses and labels.

    ``merge(number, at=...)`` stands in for the person clicking "Merge".
    """

    url: str = "https://forge.invalid/acme/fleet"
    comment_limit: int = COMMENT_LIMIT
    pulls: dict[int, PullRequestInfo] = field(default_factory=dict)
    comments: dict[int, list[CommentInfo]] = field(default_factory=dict)
    statuses: dict[tuple[str, str], CommitStatus] = field(default_factory=dict)  # (sha, context)
    # People's comments (``say``): comment id → author; others are the bot's own.
    authors: dict[int, str] = field(default_factory=dict)
    writers: set[str] = field(default_factory=set)  # who may write to the repository
    _next_id: int = 1

    def _id(self) -> int:
        self._next_id += 1
        return self._next_id

    def _get(self, number: int) -> PullRequestInfo:
        try:
            return self.pulls[number]
        except KeyError:
            raise ForgeNotFound(f"pull request #{number} not found") from None

    # -- the port -------------------------------------------------------------------------
    def find_pull_request(self, branch: str, marker: str) -> PullRequestInfo | None:
        check_marker(marker)
        for pr in sorted(self.pulls.values(), key=lambda p: p.number):
            if pr.state is PullRequestState.OPEN and pr.branch == branch and pr.marker == marker:
                return pr
        return None

    def open_or_update_pull_request(self, draft: PullRequestDraft) -> PullRequestInfo:
        branch = draft.branch
        text = draft.marked_body
        if len(text) > self.comment_limit:
            raise ForgeFailed("pull request body is too long")
        found = self.find_pull_request(branch, draft.marker)
        if found is None:
            if any(
                p.branch == branch and p.state is PullRequestState.OPEN for p in self.pulls.values()
            ):
                raise ForgeFailed(f"an open request from {branch!r} exists without our marker")
            number = len(self.pulls) + 1
            found = PullRequestInfo(
                number=number,
                branch=branch,
                base=draft.base,
                title=draft.title,
                state=PullRequestState.OPEN,
                head_sha=hashlib.sha1(branch.encode()).hexdigest(),
                url=f"{self.url}/pull/{number}",
                mergeable=True,
            )
        merged_labels = tuple(dict.fromkeys((*found.labels, *draft.labels)))
        pr = replace(found, title=draft.title, body=text, marker=draft.marker, labels=merged_labels)
        self.pulls[pr.number] = pr
        return pr

    def get_pull_request(self, number: int) -> PullRequestInfo:
        return self._get(number)

    def upsert_comment(self, number: int, *, marker: str, body: str) -> CommentInfo:
        self._get(number)
        texts = split_comment(body, marker, limit=self.comment_limit)
        result: list[CommentInfo] = []
        written: dict[int, CommentInfo] = {}
        for c in self.comments.setdefault(number, []):
            tag = find_marker(c.body)
            if tag is None or tag.marker != marker:
                result.append(c)  # someone else's comment: untouched
            elif tag.part <= len(texts) and tag.part not in written:
                written[tag.part] = CommentInfo(c.id, texts[tag.part - 1], c.url, len(texts))
                result.append(written[tag.part])
            # else: a stale part (or a duplicate) of ours: deleted
        for part, text in enumerate(texts, start=1):
            if part not in written:
                written[part] = CommentInfo(self._id(), text, "", len(texts))
                result.append(written[part])
        self.comments[number] = result
        return written[1]

    def set_status(self, sha: str, status: CommitStatus) -> None:
        self.statuses[(sha, status.context)] = replace(status, state=CommitState(status.state))

    def add_labels(self, number: int, labels: Sequence[str]) -> None:
        pr = self._get(number)
        self.pulls[number] = replace(pr, labels=tuple(dict.fromkeys((*pr.labels, *labels))))

    def list_merged_since(self, since: datetime) -> list[PullRequestInfo]:
        merged = [
            p
            for p in self.pulls.values()
            if p.state is PullRequestState.MERGED and p.merged_at and p.merged_at >= since
        ]
        return sorted(merged, key=lambda p: (p.merged_at, p.number))

    def close_pull_request(self, number: int, comment: str = "") -> None:
        pr = self._get(number)
        if comment:
            self.comments.setdefault(number, []).append(CommentInfo(id=self._id(), body=comment))
        self.pulls[number] = replace(pr, state=PullRequestState.CLOSED)

    # -- ports.forge.ReadsComments -------------------------------------------------------
    def list_comments(self, number: int, *, after: int = 0) -> list[PullComment]:
        self._get(number)
        found = [
            PullComment(c.id, self.authors.get(c.id, "gitopsbot"), c.body)
            for c in self.comments.get(number, [])
            if c.id > after
        ]
        return sorted(found, key=lambda c: c.id)

    def may_write(self, comment: PullComment) -> bool:
        return comment.author in self.writers or comment.author == "gitopsbot"

    # -- test controls --------------------------------------------------------------------
    def say(self, number: int, user: str, body: str) -> CommentInfo:
        """Simulate ``user`` commenting on request ``number``."""
        self._get(number)
        c = CommentInfo(id=self._id(), body=body)
        self.comments.setdefault(number, []).append(c)
        self.authors[c.id] = user
        return c

    # -- test controls --------------------------------------------------------------------
    def merge(self, number: int, *, at: datetime | None = None) -> PullRequestInfo:
        """Simulate the merge click: records merged_at and a merge commit sha."""
        pr = self._get(number)
        when = at or datetime(2026, 1, 1, tzinfo=UTC)
        sha = hashlib.sha1(f"merge-{number}-{when.isoformat()}".encode()).hexdigest()
        merged = replace(pr, state=PullRequestState.MERGED, merged_at=when, merge_commit_sha=sha)
        self.pulls[number] = merged
        return merged

    def status_of(self, sha: str, context: str = POLICY_CONTEXT) -> CommitState | None:
        found = self.statuses.get((sha, context))
        return found.state if found else None

    def comments_on(self, number: int) -> list[str]:
        return [c.body for c in self.comments.get(number, [])]
