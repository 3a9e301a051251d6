"""The forge port: pull (merge) requests, one plan comment, a commit status, labels.

Implemented by ``gitopsbot.adapters.forge.{github,gitlab,gitea}`` over HTTP and by
``gitopsbot.testing.FakeForge`` in memory; the same contract tests (tests/forge) run
against all four. Errors are ``gitopsbot.errors.Forge*``; no token appears in any of them.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Protocol, runtime_checkable

from gitopsbot.core.forge.forge_types import (
    POLICY_CONTEXT,
    CommentInfo,
    CommitStatus,
    PullComment,
    PullRequestDraft,
    PullRequestInfo,
)

__all__ = ["POLICY_CONTEXT", "Forge", "ReadsComments", "RecordsRequestsInGit"]


class Forge(Protocol):
    def find_pull_request(self, branch: str, marker: str) -> PullRequestInfo | None:
        """The OPEN request from ``branch`` whose body carries ``marker``, else None.

        When several open requests come from the branch, the one with the marker wins;
        an open request from the branch without any gitopsbot marker is not ours: None.
        """
        ...

    def open_or_update_pull_request(self, draft: PullRequestDraft) -> PullRequestInfo:
        """Open the request ``draft`` asks for, or update the open one (title, body, labels
        added). Idempotent: a retry after a lost response or a restart finds the
        request again by branch and marker; the forge's "already exists" answer (GitHub and
        Gitea 409/422, GitLab 409) is resolved by finding and updating. Never duplicates."""
        ...

    def get_pull_request(self, number: int) -> PullRequestInfo: ...

    def upsert_comment(self, number: int, *, marker: str, body: str) -> CommentInfo:
        """Exactly one bot comment per (request, marker), edited in place. Texts above
        ``forge_types.COMMENT_LIMIT`` are split into numbered parts, each its own comment with
        its own marker; parts left over from a longer earlier text are deleted."""
        ...

    def set_status(self, sha: str, status: CommitStatus) -> None:
        """Set ``status`` on ``sha``, replacing the one of its context (a deny is FAILURE)."""
        ...

    def add_labels(self, number: int, labels: Sequence[str]) -> None:
        """Add labels (creating them on forges that need labels to exist first)."""
        ...

    def list_merged_since(self, since: datetime) -> list[PullRequestInfo]:
        """Requests merged at or after ``since`` (aware datetime), oldest merge first."""
        ...

    def close_pull_request(self, number: int, comment: str = "") -> None:
        """Close without merging, leaving ``comment`` (if any) as a plain comment first."""
        ...


@runtime_checkable
class RecordsRequestsInGit(Protocol):
    """Optional: a forge kept in the fleet repository itself (Git-only mode), where a request's
    text and statuses are files on its branch. The proposer commits them together with the
    proposed edits, so one pass writes at most one commit per proposal branch."""

    def request_files(
        self, draft: PullRequestDraft, *, status: CommitStatus | None = None
    ) -> dict[str, bytes]:
        """path → content recording the request (and ``status`` of the commit carrying
        them). Committed on ``draft.branch``, ``open_or_update_pull_request`` and
        ``set_status`` with the same draft and status then write nothing."""
        ...


@runtime_checkable
class ReadsComments(Protocol):
    """Optional: a forge whose requests carry people's comments and that says who may write
    to the repository (GitHub, GitLab, Gitea; not Git-only mode). The bot reads comment
    commands (``/gitopsbot pause``) through it (docs/pause.md)."""

    def list_comments(self, number: int, *, after: int = 0) -> list[PullComment]:
        """Every comment of request ``number`` whose id is above ``after``, oldest first
        (ids grow with time on every forge)."""
        ...

    def may_write(self, comment: PullComment) -> bool:
        """Whether the forge says the comment's author may write to the repository: GitHub
        and Gitea ``collaborators/{login}/permission`` is ``write`` or ``admin``, GitLab's
        member access level is at least Developer (30). An unknown user is False."""
        ...
