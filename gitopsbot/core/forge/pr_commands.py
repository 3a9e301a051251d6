"""Comment commands on an operation's pull request: ``/gitopsbot pause [pool]``,
``/gitopsbot resume [pool]``, ``/gitopsbot approve [pool]`` (docs/pause.md).

``parse`` reads a comment; ``apply`` says what a command does to the operation's journal
and what the bot replies. Only the forge's answer to "may this account write to the
repository?" lets a command act: the comment's text, its author's name or a webhook's
payload never do. Every comment handled moves ``Journal.comment_cursor`` past it, in the
same record as its effect, so a restart never applies a comment twice.

Pure: comments and the forge's answers in, a journal and a reply out.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, replace
from enum import StrEnum

from gitopsbot.core.forge.forge_types import PullComment
from gitopsbot.core.operations.pause import CLUSTER, token_pool
from gitopsbot.core.records.journal import Journal

PREFIX = "/gitopsbot"
# Lines of ``Journal.commands`` kept: the state branch's history has every one of them.
MAX_RECORDED = 50
USAGE = (
    "`/gitopsbot pause [pool]`, `/gitopsbot resume [pool]` or `/gitopsbot approve [pool]` "
    "(docs/pause.md)"
)


class Verb(StrEnum):
    PAUSE = "pause"
    RESUME = "resume"
    APPROVE = "approve"


@dataclass(frozen=True, slots=True)
class Command:
    verb: Verb | None  # None: the line starts with /gitopsbot but says nothing we know
    pool: str = ""  # "" the whole cluster (pause, resume) or everything awaiting (approve)
    text: str = ""  # the command line as written

    def __str__(self) -> str:
        return self.text


def parse(body: str) -> Command | None:
    """The command a comment gives: its first line starting with ``/gitopsbot``; None when
    there is none (an ordinary comment)."""
    for raw in body.splitlines():
        line = raw.strip()
        words = line.split()
        if not words or words[0] != PREFIX:
            continue
        verb = words[1].lower() if len(words) > 1 else ""
        if verb not in tuple(Verb) or len(words) > 3:
            return Command(None, text=line)
        return Command(Verb(verb), words[2] if len(words) > 2 else "", line)
    return None


@dataclass(frozen=True, slots=True)
class Outcome:
    journal: Journal  # with the effect, the cursor past the comment and the record line
    reply: str
    acted: bool  # the command changed a hold or an approval


def apply(
    journal: Journal,
    comment: PullComment,
    command: Command,
    *,
    may_write: bool,
    pools: Collection[str],
    git_holds: Mapping[str, str],
    awaiting: Mapping[str, str],
    refused: str = "",
) -> Outcome:
    """What ``command`` (in ``comment``) does. ``may_write``: the forge's answer for its
    author (``refused``: why the forge could not be asked, if it could not); ``pools``: the
    operation's pools; ``git_holds``: holds from rollout.yaml (pool or CLUSTER → why), which
    a comment cannot lift; ``awaiting``: approval tokens awaited now → what waits."""
    who = f"@{comment.author}" if comment.author else "an unknown account"
    if not may_write:
        why = refused or "the forge says they may not write to this repository"
        reply = f"{who}: `{command}` ignored: {why}."
        return _done(journal, comment, f"{who} {command}: ignored ({why})", reply, False)
    if command.verb is None:
        reply = f"{who}: `{command}` is not a command I know. Use {USAGE}."
        return _done(journal, comment, f"{who} {command}: unknown", reply, False)
    if command.pool and command.pool not in pools:
        known = ", ".join(sorted(pools)) or "none"
        reply = f"{who}: `{command}`: no pool `{command.pool}` in this rollout (pools: {known})."
        return _done(journal, comment, f"{who} {command}: unknown pool", reply, False)
    where = f"pool `{command.pool}`" if command.pool else "the rollout of every pool"
    if command.verb is Verb.PAUSE:
        key = command.pool or CLUSTER
        holds = {**journal.holds, key: f"paused by {who} (comment {comment.id})"}
        reply = (
            f"{who}: paused {where}. Switches close at the next batch boundary (the batch in "
            "flight finishes); paused time does not count toward `maxDuration`. "
            f"`/gitopsbot resume{' ' + command.pool if command.pool else ''}` goes on."
        )
        changed = replace(journal, holds=holds)
        return _done(changed, comment, f"{who} {command}: paused", reply, True)
    if command.verb is Verb.RESUME:
        if command.pool:
            holds = {k: v for k, v in journal.holds.items() if k != command.pool}
        else:
            holds = {}
        still = [
            f"{'the cluster' if k == CLUSTER else 'pool `' + k + '`'}: {v}"
            for k, v in {**git_holds, **holds}.items()
            if not command.pool or k in (command.pool, CLUSTER)
        ]
        reply = f"{who}: resumed {where}."
        if still:
            reply += " Still held: " + "; ".join(still) + " (a pause in Git ends in rollout.yaml)."
        acted = holds != journal.holds
        changed = replace(journal, holds=holds)
        return _done(changed, comment, f"{who} {command}: resumed", reply, acted)
    tokens = [
        t for t, pool in _token_pools(awaiting).items() if not command.pool or pool == command.pool
    ]
    if not tokens:
        reply = f"{who}: nothing awaits approval" + (
            f" in pool `{command.pool}`." if command.pool else "."
        )
        return _done(journal, comment, f"{who} {command}: nothing awaited", reply, False)
    approved = tuple(dict.fromkeys((*journal.approved, *tokens)))
    reply = f"{who}: approved; going on: " + "; ".join(awaiting[t] for t in tokens) + "."
    changed = replace(journal, approved=approved)
    return _done(changed, comment, f"{who} {command}: approved {', '.join(tokens)}", reply, True)


def _token_pools(awaiting: Mapping[str, str]) -> dict[str, str]:
    """Approval token → the pool it names (``pause.token_pool``)."""
    return {token: token_pool(token) for token in awaiting}


def _done(journal: Journal, comment: PullComment, line: str, reply: str, acted: bool) -> Outcome:
    record = (*journal.commands, f"comment {comment.id}: {line}")[-MAX_RECORDED:]
    moved = replace(
        journal, comment_cursor=max(journal.comment_cursor, comment.id), commands=record
    )
    return Outcome(moved, reply, acted)
