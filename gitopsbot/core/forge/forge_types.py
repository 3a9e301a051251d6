"""Values exchanged with a forge (GitHub, GitLab, Gitea): requests, comments, statuses.

Pure: the hidden-marker format and the comment splitting rule live here so that every
provider (and the in-memory fake) finds and splits exactly the same way.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

# GitHub refuses issue/PR comment and body text above 65,535 characters; GitLab and Gitea
# allow more (1,000,000 / unbounded) but one rule for all keeps the fake honest.
COMMENT_LIMIT = 65_535

# The commit status context of a plan's policy verdict (a deny fails it).
POLICY_CONTEXT = "gitopsbot/policy"

_MARKER_RE = re.compile(r"<!-- gitopsbot:([A-Za-z0-9._/:@+-]+?)(?: part=(\d+)/(\d+))? -->")
_VALID_MARKER = re.compile(r"^[A-Za-z0-9._/:@+-]+$")


class PullRequestState(StrEnum):
    OPEN = "open"
    CLOSED = "closed"
    MERGED = "merged"


class CommitState(StrEnum):
    """A commit status (GitHub/Gitea vocabulary; GitLab's ``failed`` maps to FAILURE)."""

    PENDING = "pending"
    SUCCESS = "success"
    FAILURE = "failure"
    ERROR = "error"


@dataclass(frozen=True, slots=True)
class CommitStatus:
    """A commit status the bot sets: ``state`` and ``description`` under ``context`` (the
    policy verdict's unless said), linking to ``target_url`` when there is one."""

    state: CommitState
    description: str
    context: str = POLICY_CONTEXT
    target_url: str = ""


@dataclass(frozen=True, slots=True)
class PullRequestInfo:
    """A pull request (GitHub, Gitea) or merge request (GitLab), as the bot needs it."""

    number: int
    branch: str
    base: str
    title: str
    state: PullRequestState
    head_sha: str
    url: str
    body: str = ""
    marker: str = ""  # the hidden marker found in the body ("" when none)
    merge_commit_sha: str = ""
    merged_at: datetime | None = None
    mergeable: bool | None = None  # None: the forge has not computed it yet
    approvals: int = 0
    labels: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class PullRequestDraft:
    """A request the bot wants to exist: ``branch`` into ``base`` with this title and body,
    made the bot's by the hidden ``marker`` in its body, carrying at least these labels."""

    branch: str
    base: str
    title: str
    body: str
    marker: str
    labels: tuple[str, ...] = ()

    @property
    def marked_body(self) -> str:
        """The body as the forge holds it: ``body`` with the marker as its last line."""
        return with_marker(self.body, self.marker)


@dataclass(frozen=True, slots=True)
class CommentInfo:
    """One comment the bot owns. ``parts`` > 1 when the text was split (see split_comment)."""

    id: int
    body: str
    url: str = ""
    parts: int = 1


@dataclass(frozen=True, slots=True)
class PullComment:
    """A comment on a request as the forge lists it, whoever wrote it: the author is the
    forge's account (login; GitLab's numeric id too, which its member lookup takes)."""

    id: int
    author: str
    body: str
    created_at: datetime | None = None
    author_id: int = 0


@dataclass(frozen=True, slots=True)
class MarkerTag:
    """A marker found in a text, with its part position when the text is one of several."""

    marker: str
    part: int = 1
    of: int = 1


def check_marker(marker: str) -> str:
    """The marker itself, or ValueError: markers go inside an HTML comment, so no spaces."""
    if not _VALID_MARKER.match(marker):
        raise ValueError(f"marker {marker!r}: use letters, digits and . _ / : @ + - only")
    return marker


def marker_comment(marker: str, *, part: int = 1, of: int = 1) -> str:
    """The hidden HTML comment that identifies a bot-owned body or comment."""
    check_marker(marker)
    suffix = f" part={part}/{of}" if of > 1 else ""
    return f"<!-- gitopsbot:{marker}{suffix} -->"


def find_marker(text: str) -> MarkerTag | None:
    """The first gitopsbot marker in ``text``, or None."""
    m = _MARKER_RE.search(text or "")
    if m is None:
        return None
    if m.group(2):
        return MarkerTag(m.group(1), int(m.group(2)), int(m.group(3)))
    return MarkerTag(m.group(1))


def with_marker(body: str, marker: str) -> str:
    """``body`` carrying the marker exactly once, as its last line."""
    stripped = _MARKER_RE.sub("", body).rstrip()
    return f"{stripped}\n\n{marker_comment(marker)}" if stripped else marker_comment(marker)


def split_comment(body: str, marker: str, *, limit: int = COMMENT_LIMIT) -> list[str]:
    """``body`` as one or more comment texts, each within ``limit`` and carrying its marker.

    Decision: long plans are split into numbered parts ("part 2/3"), each a separate comment
    with its own marker, rather than moved to a check summary, because GitLab and Gitea have
    no check-run summaries and the comment must read the same on every forge. Splits prefer
    line boundaries so a diff line is never cut in half (unless one line alone is too long).
    """
    single = with_marker(body, marker)
    if len(single) <= limit:
        return [single]
    # Room for the header, the marker and a fenced-code repair on each side.
    reserve = len(marker_comment(marker, part=999, of=999)) + 64
    room = limit - reserve
    if room < 256:
        raise ValueError(f"comment limit {limit} is too small to split into parts")
    chunks: list[str] = []
    current = ""
    for line in body.splitlines(keepends=True):
        while len(line) > room:  # a single overlong line: cut it hard
            if current:
                chunks.append(current)
                current = ""
            chunks.append(line[:room])
            line = line[room:]
        if len(current) + len(line) > room:
            chunks.append(current)
            current = ""
        current += line
    if current:
        chunks.append(current)
    total = len(chunks)
    texts: list[str] = []
    open_fence = False
    for index, chunk in enumerate(chunks, start=1):
        head = f"_(part {index}/{total})_\n\n"
        text = chunk
        if open_fence:
            text = "```\n" + text  # reopen a code block cut by the previous part
        fences = chunk.count("```")
        open_fence = open_fence != (fences % 2 == 1)
        if open_fence:
            text = text.rstrip("\n") + "\n```"
        texts.append(f"{head}{text.rstrip()}\n\n{marker_comment(marker, part=index, of=total)}")
    return texts
