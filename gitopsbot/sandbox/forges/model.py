"""The local forges' data: pull requests, comments, statuses, and a request, its answer and
an injected fault as the request-handling core (base.py) passes them; the time formats.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

Json = Any


@dataclass(slots=True)
class Pull:
    number: int
    head: str
    base: str
    title: str
    body: str
    head_sha: str
    created_at: datetime
    updated_at: datetime
    state: str = "open"  # open | closed (merged is a closed request with merged_at)
    merged_at: datetime | None = None
    merge_commit_sha: str = ""
    squash_commit_sha: str = ""
    labels: list[str] = field(default_factory=list)
    approvers: list[str] = field(default_factory=list)
    mergeable: bool = True


@dataclass(slots=True)
class Comment:
    id: int
    number: int
    body: str
    created_at: datetime
    updated_at: datetime
    author: str = "gitopsbot"  # the token's user, unless a person said it (``say``)


@dataclass(slots=True)
class Status:
    sha: str
    context: str
    state: str
    description: str
    target_url: str
    id: int = 0
    created_at: datetime = field(default_factory=lambda: now_utc())


@dataclass(frozen=True, slots=True)
class LoggedRequest:
    method: str
    path: str
    status: int


@dataclass(slots=True)
class Fault:
    """An injected failure: ``status`` answered to the next ``times`` matching requests.

    ``status == 0`` means "do the work, then drop the connection without answering".
    """

    status: int
    times: int = 1
    method: str = ""  # "" = any
    path: str = ""  # regex searched in the path; "" = any
    retry_after: int | None = None
    body: Json = None
    headers: dict[str, str] = field(default_factory=dict)


class Answer(Exception):
    """Raised by a route to answer with an error status and a provider-shaped body."""

    def __init__(self, status: int, body: Json, headers: dict[str, str] | None = None) -> None:
        super().__init__(status)
        self.status = status
        self.body = body
        self.headers = headers or {}


@dataclass(slots=True)
class Reply:
    status: int
    body: Json
    headers: dict[str, str] = field(default_factory=dict)
    page: list[Json] | None = None  # a list to paginate instead of ``body``


Route = Callable[["Request"], Reply]


@dataclass(slots=True)
class Request:
    method: str
    path: str
    query: dict[str, str]
    body: Json
    match: re.Match[str]
    token: str = ""  # the credential the request carried (a GitHub App's routes read its JWT)


def now_utc() -> datetime:
    return datetime.now(UTC).replace(microsecond=0)


def delivery_id() -> str:
    return str(uuid.uuid4())


def github_like_merged_event(pr: Pull) -> bytes:
    """The pull_request "closed" (merged) payload; GitHub and Gitea share this shape."""
    return json.dumps(
        {
            "action": "closed",
            "number": pr.number,
            "pull_request": {
                "number": pr.number,
                "state": "closed",
                "merged": True,
                "merge_commit_sha": pr.merge_commit_sha,
                "merged_at": iso(pr.merged_at),
                "head": {"ref": pr.head, "sha": pr.head_sha},
                "base": {"ref": pr.base},
            },
        }
    ).encode()


def iso(when: datetime | None) -> str | None:
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ") if when else None


def parse_iso(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))
