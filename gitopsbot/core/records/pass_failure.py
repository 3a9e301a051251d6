"""A pass that fails before or outside an operation, as the state branch records it.

An unreachable cluster, a kube context that does not exist, bad credentials or an unreadable
fleet make every pass of a cluster fail before any operation records anything, so without this
record the state branch would say "no operation yet" while every pass exits non-zero.
``clusters/<name>/pass-failure.yaml`` holds the error's first line, when it started, when it
was last seen and how many passes failed so far. It is rewritten only when the first line
changes (deduplicated: a commit per new failure, not per poll) and removed by the first pass
that succeeds again.

Pure: text in, values out.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from gitopsbot.core.records.journal import dump_yaml, load_yaml
from gitopsbot.core.records.times import read_time

FILE = "pass-failure.yaml"
MAX_TEXT = 300  # the first line only, bounded: a message must not bloat the state branch


@dataclass(frozen=True, slots=True)
class PassFailure:
    error: str  # first line of the error, bounded
    since: datetime  # the first pass that failed this way

    def describe(self) -> str:
        return f"every pass fails since {self.since.isoformat()}: {self.error}"


def first_line(text: str) -> str:
    line = next((part.strip() for part in text.splitlines() if part.strip()), "")
    return (line or "unknown error")[:MAX_TEXT]


def observe(previous: PassFailure | None, error: str, now: datetime) -> PassFailure | None:
    """The record after a pass failed with ``error``; None when ``previous`` already says it
    (nothing to commit)."""
    line = first_line(error)
    if previous is not None and previous.error == line:
        return None
    return PassFailure(error=line, since=now)


def dumps(failure: PassFailure) -> str:
    return dump_yaml({"error": failure.error, "since": failure.since.astimezone(UTC).isoformat()})


def loads(text: str) -> PassFailure | None:
    """The record, or None when it cannot be read (a hand-edited file is not fatal: the next
    failing pass rewrites it)."""
    try:
        data: Any = load_yaml(text)
    except ValueError:
        return None
    if not isinstance(data, Mapping) or not isinstance(data.get("error"), str):
        return None
    since = read_time(data.get("since"))
    if since is None:
        return None
    return PassFailure(error=data["error"][:MAX_TEXT], since=since)
