"""The newest commit for a cluster that could not be loaded, as the state branch records it.

A merge whose fleet files cannot be loaded (an alias bomb, nesting too deep, a value of the
wrong type) is taken in as seen and nothing is applied (``bot.intake``); the pass itself
succeeds. Without this record ``status`` would show the cluster as "no operation yet" or as
its previous success, as if the merge had been applied. ``clusters/<name>/load-failure.yaml``
names the commit, the located reason (``file:line: ...``) and when it was taken in; it is
removed when a newer commit for the cluster loads (or removes the cluster from the fleet).

Pure: text in, values out.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from gitopsbot.core.records.journal import dump_yaml, load_yaml
from gitopsbot.core.records.times import read_time

FILE = "load-failure.yaml"
MAX_LINES = 3  # the located reasons first; more are in the state commit's message
MAX_TEXT = 600  # bounded: a hostile file must not bloat the state branch


@dataclass(frozen=True, slots=True)
class LoadFailure:
    sha: str  # the watched-branch commit that could not be loaded
    error: str  # its reasons, one line, "file:line: ..." first
    since: datetime  # the pass that took it in

    def describe(self) -> str:
        return (
            f"the newest commit {self.sha[:12]} could not be loaded; nothing applied "
            f"(since {self.since.isoformat()}): {self.error}"
        )


def reason(text: str) -> str:
    """The error's first non-empty lines as one bounded line."""
    lines = [part.strip() for part in text.splitlines() if part.strip()]
    return ("; ".join(lines[:MAX_LINES]) or "unknown error")[:MAX_TEXT]


def of(sha: str, error: str, now: datetime) -> LoadFailure:
    return LoadFailure(sha=sha, error=reason(error), since=now)


def dumps(failure: LoadFailure) -> str:
    return dump_yaml(
        {
            "sha": failure.sha,
            "error": failure.error,
            "since": failure.since.astimezone(UTC).isoformat(),
        }
    )


def loads(text: str) -> LoadFailure | None:
    """The record, or None when it cannot be read (hand-edited: ``status`` shows nothing
    rather than failing)."""
    try:
        data: Any = load_yaml(text)
    except ValueError:
        return None
    if not isinstance(data, Mapping):
        return None
    sha, error = data.get("sha"), data.get("error")
    if not isinstance(sha, str) or not isinstance(error, str):
        return None
    since = read_time(data.get("since"))
    if since is None:
        return None
    return LoadFailure(sha=sha, error=error[:MAX_TEXT], since=since)
