"""Comment commands read from a running operation's pull request (docs/pause.md).

Each pass of a running operation lists its pull request's comments after
``Journal.comment_cursor`` (polling: one list per pass, ETag-cached on GitHub), and for each
``/gitopsbot`` command asks the forge whether its author may write to the repository
(``ports.forge.ReadsComments``), then replies and records, in this order:

1. the reply, as the bot's comment with the marker ``cmd-<comment id>``: a reply posted
   again after a crash edits the same comment, never a second one;
2. the journal with the command's effect and the cursor past the comment, one state-branch
   commit: the effect and "handled" are one record, so a restart applies it once.

A transient forge error on the permission check, the reply or the listing stops there; the
next pass takes the same comment again. A reply refused for good (403, 422) is logged and the
command recorded without it, so one comment cannot stop every later one. The forge's own
answer alone decides who may: a permission the forge refuses to tell (403) counts as "may
not", said in the reply.
"""

from __future__ import annotations

import logging

from gitopsbot.bot.pass_base import PassBase
from gitopsbot.core.fleet.model import ClusterSpec
from gitopsbot.core.forge import pr_commands
from gitopsbot.core.forge.forge_types import find_marker
from gitopsbot.core.operations import pause
from gitopsbot.core.records.journal import Journal, StepKind
from gitopsbot.errors import ForgeError, TransientError
from gitopsbot.ports.forge import ReadsComments

log = logging.getLogger(__name__)


def reply_marker(comment_id: int) -> str:
    return f"cmd-{comment_id}"


def take_commands(base: PassBase, journal: Journal, spec: ClusterSpec, git: pause.Holds) -> Journal:
    """``journal`` after the new comment commands on its pull request (each recorded)."""
    forge, number = base.forge, journal.pr_number
    if forge is None or number is None or not isinstance(forge, ReadsComments):
        return journal  # no forge, no request, or Git-only mode (no comments)
    try:
        comments = forge.list_comments(number, after=journal.comment_cursor)
    except ForgeError as e:
        log.warning("%s: could not read the comments of #%s: %s", journal.cluster, number, e)
        return journal
    pools = {s.pool for s in journal.steps if s.kind is StepKind.POOL_PHASE}
    in_git = {**({pause.CLUSTER: git.cluster} if git.cluster else {}), **git.pools}
    for comment in comments:
        command = pr_commands.parse(comment.body)
        if command is None or find_marker(comment.body) is not None:  # talk, or the bot's own
            continue
        refused = ""
        try:
            allowed = forge.may_write(comment)
        except ForgeError as e:
            if isinstance(e, TransientError):
                log.warning("%s: permission of @%s: %s", journal.cluster, comment.author, e)
                break
            allowed = False
            first = str(e).splitlines()[0] if str(e) else type(e).__name__
            refused = f"the forge would not tell whether they may write ({first})"
        outcome = pr_commands.apply(
            journal,
            comment,
            command,
            may_write=allowed,
            pools=pools,
            git_holds=in_git,
            awaiting=pause.awaiting(journal, spec.rollout),
            refused=refused,
        )
        try:
            forge.upsert_comment(number, marker=reply_marker(comment.id), body=outcome.reply)
        except ForgeError as e:
            if isinstance(e, TransientError):  # the next pass replies and records
                log.warning("%s: reply to comment %s: %s", journal.cluster, comment.id, e)
                break
            # Refused for good (e.g. someone else's comment carries our reply's marker and
            # may not be edited): recorded without its reply, or no later command would be.
            log.error("%s: no reply to comment %s: %s", journal.cluster, comment.id, e)
        line = outcome.journal.commands[-1] if outcome.journal.commands else str(command)
        journal = base.save(outcome.journal, f"{journal.op_id}: {line}"[:300])
        log.info("%s: #%s %s", journal.cluster, number, line)
    return journal
