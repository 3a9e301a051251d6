"""Chat notifications, decided: which happenings a webhook hears, what it is sent, and when.

``event_of`` names a happening as a subscription does (halted, failed, rollback, blocked,
succeeded); ``matches`` says whether a ``notifications[i]`` entry wants it; ``Message`` is what
is told (built from a happening whose detail the caller has already redacted);
``slack_payload`` and ``webhook_payload`` are the two wire formats (docs/notifications.md);
``take`` is the per-webhook token bucket and ``coalesce`` folds identical messages into one
line with a count.

Pure: no clock (times are arguments, in seconds of any monotonic clock), no I/O. The sending,
the thread and the redaction live in ``adapters.chat_notifier``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from fnmatch import fnmatchcase
from typing import Any

from gitopsbot.core.fleet.model import ForgeSettings, NotificationTarget
from gitopsbot.core.notices.happenings import Happening, HappeningKind
from gitopsbot.core.records.journal import OperationKind

PAYLOAD_VERSION = "gitopsbot.notification/v1"
DETAIL_LIMIT = 1500  # characters of a failure's detail told in chat (the journal has it all)
LINES_LIMIT = 20  # lines of a coalesced post; the rest is counted


def event_of(happening: Happening) -> str | None:
    """The subscription name of a happening, or None when chat is not told of it.

    A failed step is not told on its own: the operation's failure, recorded in the same
    transition, carries the step's detail."""
    k = HappeningKind
    if happening.kind is k.POOL_HALTED:
        return "halted"
    if happening.kind is k.FAILED:
        return "failed"
    if happening.kind is k.BLOCKED:
        return "blocked"
    if happening.kind is k.SUCCEEDED:
        return "succeeded"
    if happening.kind is k.STARTED and happening.op_kind is OperationKind.ROLLBACK:
        return "rollback"
    return None


def matches(target: NotificationTarget, happening: Happening) -> bool:
    """Whether ``target`` is told of ``happening`` (its events and its cluster globs)."""
    event = event_of(happening)
    if event is None or event not in target.on:
        return False
    if not target.clusters:
        return True
    return any(fnmatchcase(happening.cluster, pattern) for pattern in target.clusters)


def pull_request_url(forge: ForgeSettings, number: int | None) -> str:
    """The web page of pull request ``number``, or "" when the forge is not known."""
    if number is None or forge.kind == "git-only" or not forge.repository:
        return ""
    url = forge.url.rstrip("/")
    repo = forge.repository.strip("/")
    if forge.kind == "github":
        if not url or "api.github.com" in url:
            url = "https://github.com"
        return f"{url.removesuffix('/api/v3')}/{repo}/pull/{number}"
    if forge.kind == "gitlab":
        url = (url or "https://gitlab.com").removesuffix("/api/v4")
        return f"{url}/{repo}/-/merge_requests/{number}"
    if url:  # gitea
        return f"{url.removesuffix('/api/v1')}/{repo}/pulls/{number}"
    return ""


_HEADLINES = {
    "halted": "halted",
    "failed": "failed",
    "rollback": "rolling back",
    "blocked": "blocked",
    "succeeded": "succeeded",
}


@dataclass(frozen=True, slots=True)
class Message:
    """One notable happening as told to a webhook. ``detail`` is already redacted."""

    event: str
    cluster: str
    op_id: str
    op_kind: str
    text: str  # one line: "prod-1: upgrade op-1 halted: pool a hypervisor halted at 40 %: …"
    detail: str = ""
    desired_sha: str = ""
    pr_number: int | None = None
    pr_url: str = ""
    step: str = ""
    pool: str = ""
    at: str = ""  # ISO 8601, from the journal's own times; "" when unknown

    @property
    def key(self) -> str:
        """Identical messages (coalesced into one line with a count) share this key."""
        return f"{self.event}\0{self.cluster}\0{self.op_id}\0{self.text}"


def message_of(happening: Happening, *, detail: str, pr_url: str = "") -> Message:
    """The message for a notable happening; ``detail`` replaces the happening's own (the
    caller redacts it). Raises ValueError for a happening chat is not told of."""
    event = event_of(happening)
    if event is None:
        raise ValueError(f"{happening.kind} is not a notification event")
    detail = _bounded(detail)
    told = replace(happening, detail=detail)
    return Message(
        event=event,
        cluster=happening.cluster,
        op_id=happening.op_id,
        op_kind=str(happening.op_kind),
        text=f"{happening.cluster}: {told.summary()}",
        detail=detail,
        desired_sha=happening.desired_sha,
        pr_number=happening.pr_number,
        pr_url=pr_url,
        step=happening.step,
        pool=happening.pool,
        at=happening.at.isoformat() if happening.at is not None else "",
    )


def _bounded(text: str) -> str:
    return text if len(text) <= DETAIL_LIMIT else text[: DETAIL_LIMIT - 1] + "…"


# -- coalescing and rate limiting ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Told:
    """A message and how many identical ones it stands for."""

    message: Message
    count: int = 1


def coalesce(messages: Sequence[Message]) -> tuple[Told, ...]:
    """Identical messages folded into one, in first-seen order."""
    counts: dict[str, int] = {}
    first: dict[str, Message] = {}
    for m in messages:
        counts[m.key] = counts.get(m.key, 0) + 1
        first.setdefault(m.key, m)
    return tuple(Told(first[k], counts[k]) for k in first)


@dataclass(frozen=True, slots=True)
class RateLimit:
    """A token bucket per webhook: ``burst`` posts at once, then one per ``every_seconds``.
    Messages that arrive within ``gather_seconds`` of each other, or while the bucket is
    empty, go out as one post."""

    burst: int = 5
    every_seconds: float = 12.0
    gather_seconds: float = 1.0


@dataclass(frozen=True, slots=True)
class Bucket:
    tokens: float
    at: float  # monotonic seconds of the last update


def full(limit: RateLimit, now: float) -> Bucket:
    return Bucket(float(limit.burst), now)


def take(bucket: Bucket, now: float, limit: RateLimit) -> tuple[Bucket, float]:
    """Take one token at ``now``: (the bucket after, 0.0) when there was one, else (the
    bucket refilled to ``now``, seconds until a token is there)."""
    elapsed = max(0.0, now - bucket.at)
    tokens = min(float(limit.burst), bucket.tokens + elapsed / limit.every_seconds)
    if tokens >= 1.0:
        return Bucket(tokens - 1.0, now), 0.0
    return Bucket(tokens, now), (1.0 - tokens) * limit.every_seconds


# -- wire formats --------------------------------------------------------------------------------


def _count(told: Told) -> str:
    return f" (×{told.count})" if told.count > 1 else ""


def _slack_escape(text: str) -> str:
    # Slack's mrkdwn treats &, < and > as control characters (links, mentions).
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _slack_line(told: Told) -> str:
    m = told.message
    line = f"*{_HEADLINES[m.event]}* {_slack_escape(m.text)}{_count(told)}"
    if m.pr_url:
        line += f" <{m.pr_url}|PR #{m.pr_number}>"
    return line


def _headline(told: Sequence[Told], dropped: int) -> str:
    total = sum(t.count for t in told)
    parts = [f"gitopsbot: {total} notifications"]
    if len(told) < total:
        parts.append(f"{total - len(told)} identical ones coalesced")
    if dropped:
        parts.append(f"{dropped} older ones dropped (queue full)")
    return ", ".join(parts)


def slack_payload(told: Sequence[Told], *, dropped: int = 0) -> dict[str, Any]:
    """A Slack-compatible incoming-webhook body: ``text`` (read by Slack, Mattermost,
    Rocket.Chat and anything Slack-compatible) and ``blocks`` (Slack's richer layout)."""
    if len(told) == 1 and told[0].count == 1 and not dropped:
        line = _slack_line(told[0])
        return {"text": line, "blocks": [_section(line)]}
    lines = [_slack_line(t) for t in told[:LINES_LIMIT]]
    rest = sum(t.count for t in told[LINES_LIMIT:])
    if rest:
        lines.append(f"… and {rest} more")
    head = _headline(told, dropped)
    text = "\n".join([head, *(f"• {line}" for line in lines)])
    return {"text": text, "blocks": [_section(head), _section("\n".join(lines))]}


def _section(text: str) -> dict[str, Any]:
    # A section's text may hold at most 3000 characters.
    return {"type": "section", "text": {"type": "mrkdwn", "text": text[:3000]}}


def webhook_payload(told: Sequence[Told], *, dropped: int = 0) -> dict[str, Any]:
    """The generic JSON body, version ``PAYLOAD_VERSION`` (docs/notifications.md)."""
    total = sum(t.count for t in told)
    text = told[0].message.text if total == 1 and not dropped else _headline(told, dropped)
    return {
        "version": PAYLOAD_VERSION,
        "text": text,
        "dropped": dropped,
        "events": [
            {
                "event": t.message.event,
                "count": t.count,
                "cluster": t.message.cluster,
                "operation": {"id": t.message.op_id, "kind": t.message.op_kind},
                "desiredSha": t.message.desired_sha,
                "pullRequest": (
                    {"number": t.message.pr_number, "url": t.message.pr_url}
                    if t.message.pr_number is not None
                    else None
                ),
                "step": t.message.step,
                "pool": t.message.pool,
                "text": t.message.text,
                "detail": t.message.detail,
                "at": t.message.at,
            }
            for t in told
        ],
    }
