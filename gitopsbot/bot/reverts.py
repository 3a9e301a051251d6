"""Revert handling: what happens when a step FAILED or a rollout halted.

``rollout.on_failure`` decides: ``rollback`` commits a revert to the watched branch (Git stays
the truth) and starts the rollback; ``revert-pr`` opens a pull request with the revert for a
person to merge; ``halt`` stops. A watched branch that refuses the revert push still gets the
cluster rolled back, from a ``gitopsbot/revert/<op id>`` branch whose pull request lets a
person make Git match; a revert pull request that could not be opened is retried.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from datetime import datetime, timedelta

from gitopsbot.bot import rollback_queue
from gitopsbot.bot.journal_store import cluster_dir
from gitopsbot.bot.pass_base import LOG_LIMIT, PassBase, PassResult
from gitopsbot.core.fleet.commit_classes import reverted_shas
from gitopsbot.core.fleet.model import ClusterSpec
from gitopsbot.core.forge.forge_types import PullRequestDraft
from gitopsbot.core.operations import operation, pause
from gitopsbot.core.records import journal as journal_mod
from gitopsbot.core.records.journal import Journal, OperationKind, OperationStatus
from gitopsbot.errors import (
    ForgeError,
    GitFailed,
    GitOpsBotError,
    PermanentError,
    PushRefused,
)

log = logging.getLogger(__name__)

# remediation of a failed operation whose revert is committed but not yet pushed (the sha follows)
REVERTING = "reverting:"
# In a failed operation's remediation: the revert pull request of a refused automatic revert
# could not be opened. Retried (``_retry_revert_pr``) at most every REVERT_PR_RETRY.
PR_NOT_OPENED = "revert PR not opened"
REFUSED_PUSH = "refused the revert push"
REVERT_PR_RETRY = timedelta(minutes=5)


class Reverts:
    """On failure: roll back by a revert, open a revert pull request, or halt."""

    def __init__(self, ctx: PassBase) -> None:
        self.ctx = ctx
        self._pr_retried: dict[str, datetime] = {}  # cluster → last revert-PR retry

    def remediate(
        self, journal: Journal, spec: ClusterSpec, reason: str, now: datetime
    ) -> PassResult:
        self.ctx._close_switches(journal)
        policy = spec.rollout.on_failure
        name = journal.cluster
        # A rotation is never rolled back by itself: the old credential may be revoked at the
        # vendor already (docs/rotation.md); it halts for a person.
        can_roll_back = (
            journal.kind not in (OperationKind.ROLLBACK, OperationKind.ROTATION)
            and journal.rollback_point is not None
            and journal.rollback_point.helm_revision > 0
        )
        if policy == "halt" or not can_roll_back:
            failed = replace(journal, status=OperationStatus.FAILED, remediation="halt")
            self.ctx.save(failed, f"{journal.op_id} failed and halted: {reason[:100]}")
            return PassResult(name, "failed", reason)
        message = (
            f'Revert "{name}: {journal.op_id}"\n\nThis reverts commit {journal.desired_sha}.\n\n'
            f"gitopsbot: {journal.kind} failed: {reason[:500]}"
        )
        watched = self.ctx.settings.watched_branch
        if policy == "rollback":
            # Resumable: each pass redoes what is missing. The revert commit is found again on
            # the watched branch by its "This reverts commit" line (a kill before the push, or
            # after it), never made twice; intake leaves the branch alone meanwhile.
            sha = self._revert_on_watched(journal)
            if sha is None:
                try:
                    sha = self.ctx.repo.revert_commit(watched, journal.desired_sha, message)
                except GitFailed as e:  # later changes conflict: a person decides
                    why = f"halt (no automatic revert: {e})"[:600]
                    log.error("%s: %s failed; %s", name, journal.op_id, why)
                    failed = replace(journal, status=OperationStatus.FAILED, remediation=why)
                    self.ctx.save(failed, f"{journal.op_id} failed; {why}")
                    return PassResult(name, "failed", f"{reason}; {why}")
            if journal.remediation != f"{REVERTING}{sha}":
                journal = replace(journal, remediation=f"{REVERTING}{sha}")
                self.ctx.save(journal, f"{journal.op_id} failed; revert {sha[:12]} committed")
            if not self.ctx.push:
                log.warning("%s: revert %s kept local (--no-push)", name, sha[:12])
                return self._start_rollback(
                    journal, spec, sha, now, seen=sha, note=" (local only: --no-push)"
                )
            try:
                # A transient failure escapes: the next pass pushes this same commit again.
                self.ctx.repo.push(watched)
            except PushRefused as refused:
                return self._refused_revert(journal, spec, reason, message, refused, now)
            # A replay onto a moved remote rewrites the commit: take the one pushed.
            sha = self._revert_on_watched(journal) or sha
            return self._start_rollback(journal, spec, sha, now, seen=sha)
        return self._revert_pull_request(journal, reason, message)

    def _revert_on_watched(self, journal: Journal) -> str | None:
        """The commit on the watched branch (local or pushed) that reverts this operation."""
        watched = self.ctx.settings.watched_branch
        for commit in reversed(self.ctx.repo.log(watched, journal.desired_sha, LOG_LIMIT)):
            if any(journal.desired_sha.startswith(s) for s in reverted_shas(commit.message)):
                return commit.sha
        return None

    def _start_rollback(
        self,
        journal: Journal,
        spec: ClusterSpec,
        sha: str,
        now: datetime,
        *,
        seen: str | None,
        note: str = "",
        remediation: str = "",
    ) -> PassResult:
        """Record the failure and start the rollback from ``sha``'s tree in ONE state commit
        (a kill between two commits would leave a failed operation and no rollback).
        ``seen``: the watched-branch commit the rollback accounts for (None: the revert is not
        on the watched branch). ``remediation`` is added to ``rollback:<op id>``."""
        name = journal.cluster
        rollback = operation.new_operation(
            kind=OperationKind.ROLLBACK,
            cluster=name,
            desired_sha=sha,
            created_at=now,
            policy=spec.rollout,
            pr_number=journal.pr_number,
            reverts_op=journal.op_id,
        )
        rollback = pause.carried_to_rollback(journal, rollback)
        failed = replace(
            journal,
            status=OperationStatus.FAILED,
            remediation=f"rollback:{rollback.op_id}{remediation}",
        )
        history: dict[str, bytes | None] = {
            f"{cluster_dir(name)}/history/{failed.op_id}.yaml": journal_mod.dumps(failed).encode()
        }
        text = (
            f"{journal.op_id} failed; rolling back by revert {sha[:12]}{note}{remediation}"
            f"\n\nrollback {rollback.op_id} started"
        )
        carried = rollback_queue.carry_queued(self.ctx, journal, rollback, now)
        if carried is not None:
            gone, following = carried
            history |= rollback_queue.queue_files(gone, following)
            text += rollback_queue.carried_text(gone, following)
        self.ctx.save(
            replace(rollback, status=OperationStatus.RUNNING), text, files=history, seen=seen
        )
        self.ctx.mirror(failed)
        if carried is not None:
            self.ctx.mirror(carried[1] or carried[0])
        return PassResult(name, "rollback", f"{sha}{note}{remediation}", now)

    def _refused_revert(
        self,
        journal: Journal,
        spec: ClusterSpec,
        reason: str,
        message: str,
        refused: PushRefused,
        now: datetime,
    ) -> PassResult:
        """The watched branch refused the revert (a protected branch, a hook). The policy
        asked for an automatic rollback, so the cluster is rolled back anyway, from the revert
        commit of ``gitopsbot/revert/<op id>``; a pull request with that commit lets a person
        make Git match the cluster. The push already moved the local watched branch back to
        the remote's head, so later passes do not build on the refused commit."""
        name = journal.cluster
        watched = self.ctx.settings.watched_branch
        log.warning("%s: the revert of %s was refused: %s", name, journal.op_id, refused)
        branch = f"gitopsbot/revert/{journal.op_id}"
        sha = self._revert_branch(journal, message)
        rollback_id = operation.operation_id(name, sha)
        outcome = self._open_refused_revert_pr(journal, branch, rollback_id, reason, str(refused))
        log.warning("%s: rolling back %s by %s; %s", name, journal.op_id, rollback_id, outcome)
        extra = f"; {watched} refused the revert push; {outcome}"
        return self._start_rollback(journal, spec, sha, now, seen=None, remediation=extra)

    def _open_refused_revert_pr(
        self,
        journal: Journal,
        branch: str,
        rollback_id: str,
        reason: str,
        refused: str,
    ) -> str:
        """Push the revert branch and open its pull request; what happened, for the journal.
        Nothing here may stop the rollback: a failure is recorded and logged, not raised."""
        watched = self.ctx.settings.watched_branch
        try:
            self.ctx.repo.push(branch)
        except GitOpsBotError as e:
            log.error("%s: could not push %s: %s", journal.cluster, branch, e)
            return f"revert PR not opened: push of {branch} failed: {e}"[:600]
        if self.ctx.forge is None:
            return f"no forge configured: revert PR not opened; the revert is on branch {branch}"
        try:
            pr = self.ctx.forge.open_or_update_pull_request(
                PullRequestDraft(
                    branch=branch,
                    base=watched,
                    title=(
                        f"Revert {journal.cluster}: {journal.op_id} "
                        "(already rolled back: merge to make Git match)"
                    ),
                    body=(
                        f"The {journal.kind} failed: {reason}\n\n"
                        f"The cluster has ALREADY been rolled back (operation {rollback_id}), "
                        f"from this branch's revert commit: `{watched}` refused the bot's "
                        f"revert push ({refused}).\n\nMerging this pull request makes Git "
                        "match the cluster. The merge is recorded as seen; it does not roll "
                        "back again."
                    ),
                    marker=f"revert/{journal.op_id}",
                )
            )
        except ForgeError as e:
            log.error("%s: could not open the revert pull request: %s", journal.cluster, e)
            return f"revert PR not opened: {e}; the revert is on branch {branch}"[:600]
        log.info("%s: revert PR #%s opened for %s", journal.cluster, pr.number, journal.op_id)
        return f"revert-pr:#{pr.number}"

    def _retry_revert_pr(self, rollback: Journal, now: datetime) -> datetime | None:
        """The automatic rollback ran (or runs) but its revert pull request could not be
        opened (the forge was down, the branch push failed): try again, every
        REVERT_PR_RETRY, until Git can be made to match the cluster; then record it. Returns when
        the next try is due while one is owed (a resting cluster wakes for it), else None."""
        name = rollback.cluster
        if self.ctx.forge is None or not self.ctx.push or not rollback.reverts_op:
            return None
        last = self._pr_retried.get(name)
        if last is not None and now - last < REVERT_PR_RETRY:
            return last + REVERT_PR_RETRY
        failed = self.ctx.store.history(name, rollback.reverts_op)
        if failed is None or failed.op_id == rollback.op_id:
            return None
        text = failed.remediation
        if PR_NOT_OPENED not in text or REFUSED_PUSH not in text:
            return None
        self._pr_retried[name] = now
        branch = f"gitopsbot/revert/{failed.op_id}"
        if self.ctx.repo.head(branch) is None:
            return None  # the revert never reached a branch: nothing to propose
        why = "its words are in the state branch's log"
        outcome = self._open_refused_revert_pr(failed, branch, rollback.op_id, failed.failure, why)
        if not outcome.startswith("revert-pr:#"):
            log.warning("%s: revert PR still not opened: %s", name, outcome)
            return now + REVERT_PR_RETRY
        kept = text[: text.index(PR_NOT_OPENED)]
        if kept.endswith("no forge configured: "):  # a forge was configured since
            kept = kept[: -len("no forge configured: ")]
        updated = replace(failed, remediation=f"{kept}{outcome}")
        path = f"{cluster_dir(name)}/history/{failed.op_id}.yaml"
        self.ctx.store.commit(
            {path: journal_mod.dumps(updated).encode()},
            f"{name}: {failed.op_id}: {outcome} (retried)\n\nGitopsbot-Operation: {failed.op_id}",
        )
        self.ctx.mirror(updated)
        return None

    def _revert_branch(self, journal: Journal, message: str) -> str:
        """``gitopsbot/revert/<op id>``: the watched head plus the revert; its head sha. Made
        once; a later pass (a resume) finds it."""
        branch = f"gitopsbot/revert/{journal.op_id}"
        head = self.ctx.repo.head(branch)
        if head is not None:
            return head
        base = self.ctx.repo.head(self.ctx.settings.watched_branch)
        # A branch starts from the watched head; revert_commit adds the undo on top.
        self.ctx.repo.commit_files(branch, {}, f"Start revert of {journal.op_id}", parent=base)
        return self.ctx.repo.revert_commit(branch, journal.desired_sha, message)

    def _revert_pull_request(self, journal: Journal, reason: str, message: str) -> PassResult:
        if self.ctx.forge is None:
            failed = replace(journal, status=OperationStatus.FAILED, remediation="halt (no forge)")
            self.ctx.save(failed, f"{journal.op_id} failed; no forge for a revert PR")
            return PassResult(journal.cluster, "failed", reason)
        if not self.ctx.push:
            # A pull request needs its branch on the remote: skip it, and say so.
            why = "revert PR not opened: --no-push keeps the revert branch off the remote"
            failed = replace(journal, status=OperationStatus.FAILED, remediation=f"halt ({why})")
            self.ctx.save(failed, f"{journal.op_id} failed; {why}")
            return PassResult(journal.cluster, "failed", f"{reason}; {why}")
        watched = self.ctx.settings.watched_branch
        branch = f"gitopsbot/revert/{journal.op_id}"
        self._revert_branch(journal, message)
        try:
            self.ctx.repo.push(branch)
        except PushRefused as e:  # permanent: say why and stop, instead of failing each pass
            why = f"revert PR not opened: the remote refused {branch}: {e}"[:600]
            log.error("%s: %s", journal.cluster, why)
            failed = replace(journal, status=OperationStatus.FAILED, remediation=f"halt ({why})")
            self.ctx.save(failed, f"{journal.op_id} failed; {why}")
            return PassResult(journal.cluster, "failed", f"{reason}; {why}")
        try:
            pr = self.ctx.forge.open_or_update_pull_request(
                PullRequestDraft(
                    branch=branch,
                    base=watched,
                    title=f"Revert {journal.cluster}: {journal.op_id} ({journal.kind} failed)",
                    body=f"The {journal.kind} failed: {reason}\n\nMerge this to roll back.",
                    marker=f"revert/{journal.op_id}",
                )
            )
        except ForgeError as e:
            raise PermanentError(f"could not open the revert pull request: {e}") from e
        failed = replace(
            journal, status=OperationStatus.FAILED, remediation=f"revert-pr:#{pr.number}"
        )
        self.ctx.save(failed, f"{journal.op_id} failed; revert PR #{pr.number} opened")
        return PassResult(journal.cluster, "revert-pr", f"#{pr.number}")
