"""Intake and queue admission.

New commits on the watched branch touching ``clusters/<name>/`` become an operation (a revert
of a recorded operation becomes a rollback), placed by the merge queue
(``core.operations.merge_queue``). The first pass ever only records the branch head as the
baseline: the
bot applies merges it sees happen, not the history before it.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable, Mapping
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from gitopsbot.bot import report, rollback_queue
from gitopsbot.bot.apply_gate import Deployed
from gitopsbot.bot.pass_base import LOG_LIMIT, PassBase, PassResult
from gitopsbot.core.fleet.commit_classes import desired_paths, restore_is_undo, reverted_shas
from gitopsbot.core.fleet.layout import ROLLOUT_FILE
from gitopsbot.core.fleet.model import ClusterSpec
from gitopsbot.core.forge.forge_types import CommitState, CommitStatus
from gitopsbot.core.operations import merge_queue, operation, pass_decision, pause
from gitopsbot.core.records import load_failure
from gitopsbot.core.records.journal import Journal, OperationKind, OperationStatus, StepState
from gitopsbot.core.rotation import credentials as rotation
from gitopsbot.errors import ConfigError, ForgeError
from gitopsbot.ports.repo import CommitInfo

log = logging.getLogger(__name__)

# Commits of the watched branch a cluster's intake may walk past without recording where it
# got to: when nothing touches the cluster, its ``seen`` moves once per this many commits,
# not once per commit (a fleet of N clusters: one merge is one commit, not N).
SEEN_STRIDE = 50

BASELINE_NAMES = 50  # clusters named in a batched baseline's message; the rest counted

_PR_IN_MESSAGE = re.compile(r"(?:pull request #|\(#|!)(\d+)")
_ROLLBACK_IN_REMEDIATION = re.compile(r"^rollback:([\w.-]+)")


class Intake:
    """New commits of the watched branch → operations, admitted to the merge queue."""

    def __init__(self, ctx: PassBase) -> None:
        self.ctx = ctx
        # cluster → the watched head its intake last found nothing new up to (not recorded)
        self._scanned: dict[str, str] = {}
        # cluster → (watched head, queued op) whose newest change waits behind that queued
        # operation, recorded already (``_waits_behind_queued``; not recorded itself)
        self._waiting: dict[str, tuple[str, str]] = {}
        self._baselines = threading.Lock()

    def intake(self, cluster: str, now: datetime) -> PassResult | None:
        head = self.ctx.repo.head(self.ctx.settings.watched_branch)
        if head is None:
            return None
        current = self.ctx.store.current(cluster)
        if current is not None and self._reverting(current):
            # The failed operation's own revert (committed, perhaps not pushed yet) is not a
            # person's revert: remediation finishes first, new commits are taken in after.
            return None
        seen = self.ctx.store.seen(cluster)
        if seen == head or self._scanned.get(cluster) == head:
            return None
        queued = self.ctx.store.queued(cluster)
        if queued is not None and self._waiting.get(cluster) == (head, queued.op_id):
            return None  # the newest change waits behind the queued operation, as recorded
        if seen is None:
            self._baseline(cluster, head)
            return PassResult(cluster, "baseline", head)
        commits = self.ctx.repo.log(self.ctx.settings.watched_branch, seen, LOG_LIMIT)
        touching = [c for c in commits if self._touches(c, cluster)]
        # A pause or resume in rollout.yaml reaches the running operation from the head
        # (``Driver.pause_holds``): it is no change to apply, nor one to queue.
        pauses = [c for c in touching if self._pause_only(c, cluster)]
        touching = [c for c in touching if c not in pauses]
        if not touching:
            if pauses or len(commits) >= SEEN_STRIDE:
                what = "pause edits" if pauses else "nothing new"
                self.ctx.store.commit(
                    {f"clusters/{cluster}/seen": (head + "\n").encode()},
                    f"{cluster}: {what} up to {head[:12]}",
                )
            else:
                # Nothing for this cluster: remembered here, not recorded, so a merge for
                # another cluster costs this one no state-branch commit and no push
                # (issue 29). After a restart the walk starts again from the recorded
                # ``seen``, at most SEEN_STRIDE commits back.
                self._scanned[cluster] = head
            return None
        newest = touching[-1]
        done = self._rolled_back_already(newest, cluster)
        if done is not None:
            # The revert PR of a refused automatic revert got merged (merge commit, squash or
            # rebase), or a person reverted by hand while the rollback ran: the cluster was
            # rolled back already, so Git now matches it. Nothing to apply.
            text = (
                f"{cluster}: {newest.sha[:12]} reverts {done.reverts_op}, already rolled back "
                f"by {done.op_id}; recorded as seen, nothing applied"
            )
            log.info("%s", text)
            self.ctx.store.commit({f"clusters/{cluster}/seen": (head + "\n").encode()}, text)
            return None
        try:
            spec = self.ctx.spec_at(newest.sha, cluster)
        except ConfigError as e:
            # Bad fleet files got merged: nothing is applied; the next good commit is.
            # Recorded for ``status`` with the seen commit: the pass succeeds, and the state
            # branch must not read as the previous operation or "no operation yet".
            log.error("%s: fleet invalid at %s: %s", cluster, newest.sha[:12], e)
            failed = load_failure.of(newest.sha, str(e), now)
            self.ctx.store.commit(
                {
                    f"clusters/{cluster}/seen": (head + "\n").encode(),
                    f"clusters/{cluster}/{load_failure.FILE}": load_failure.dumps(failed).encode(),
                },
                f"{cluster}: fleet invalid at {newest.sha[:12]}; nothing applied\n\n{e}"[:4000],
            )
            return PassResult(cluster, "invalid", str(e))
        self.ctx.store.clear_load_failure(cluster)  # a newer commit loads: the record is stale
        if spec is None:
            self.ctx.store.commit(
                {f"clusters/{cluster}/seen": (head + "\n").encode()},
                f"{cluster}: removed from the fleet at {newest.sha[:12]}; nothing applied",
            )
            return PassResult(cluster, "removed", newest.sha)
        found: list[Deployed] = []  # the release, read at most once in this pass

        def deployed() -> Deployed:
            if not found:
                found.append(self.ctx.read_deployed(spec))
            return found[0]

        new = self._operation_for(newest, spec, now, deployed)
        if self._waits_behind_queued(new, spec, newest, head):
            return None  # the pass goes on: the queued operation may start
        return self._admit(new, spec, head, now, deployed, newest)

    def _waits_behind_queued(
        self, new: Journal, spec: ClusterSpec, commit: CommitInfo, head: str
    ) -> bool:
        """A change that may not supersede the queued operation (``merge_queue.waits_behind``)
        is not taken in yet: the queued one records that it waits (once per commit), and the
        change is taken in once the queued one has started, compared with it then."""
        queued = self.ctx.store.queued(spec.name)
        if queued is None:
            return False
        before = self.ctx.spec_at(queued.desired_sha, spec.name)
        rotates = before is not None and bool(
            rotation.rotated(before.credentials, spec.credentials)
        )
        if not merge_queue.waits_behind(queued, new, rotates=rotates):
            return False
        if queued.queue.behind != commit.sha:
            text = (
                f"{commit.sha[:12]} waits until {queued.kind} {queued.op_id} starts: a rotation "
                "runs alone (R17), so neither supersedes the other"
            )
            log.info("%s: %s", spec.name, text)
            waiting = replace(queued, queue=replace(queued.queue, behind=commit.sha))
            self.ctx.store.save(waiting, f"{queued.op_id} queued; {text}")
            self.ctx.repost(waiting)  # its pull request says what waits behind it
            self._say_waiting(commit.sha, f"waits until {queued.kind} {queued.op_id} starts")
        self._waiting[spec.name] = (head, queued.op_id)  # after the record: a failed save retries
        return True

    def _say_waiting(self, sha: str, why: str) -> None:
        """A pending status on the waiting commit (its pull request's checks): it has no
        operation yet to mirror. The forge being down stops nothing: logged."""
        if self.ctx.forge is None:
            return
        status = CommitStatus(CommitState.PENDING, f"{why} (R17)"[:140], report.APPLY_CONTEXT)
        try:
            self.ctx.forge.set_status(sha, status)
        except ForgeError as e:
            log.warning("could not mark %s waiting: %s", sha[:12], e)

    def _baseline(self, cluster: str, head: str) -> None:
        """Record ``head`` as where the cluster's intake starts, in one commit with the
        baselines of the other clusters this process runs (``PassBase.peers``) that have none
        and whose Lease it holds: at the first start of a fleet of N clusters, a few commits
        and pushes, not N (#29). A peer's baseline is what its own first pass would record a
        moment later (the watched head now); a pass of it under way that read "no baseline"
        records its own as well, the same or a newer head, which is all a first baseline
        promises (the bot applies what is merged after it)."""
        with self._baselines:  # first passes side by side: one records for the others
            if self.ctx.store.seen(cluster) is not None:
                return  # recorded by a peer's first pass meanwhile
            self._record_baselines(cluster, head)

    def _record_baselines(self, cluster: str, head: str) -> None:
        names = [cluster]
        if self.ctx.peers is not None:
            store, may_act = self.ctx.store, self.ctx.may_act
            names += sorted(
                c for c in self.ctx.peers() if c != cluster and may_act(c) and store.seen(c) is None
            )
        line = (head + "\n").encode()
        files: dict[str, bytes | None] = {f"clusters/{c}/seen": line for c in names}
        if len(names) == 1:
            message = f"{cluster}: baseline {head[:12]}"
        else:
            shown = ", ".join(names[:BASELINE_NAMES])
            more = f" and {len(names) - BASELINE_NAMES} more" if len(names) > BASELINE_NAMES else ""
            message = f"baseline {head[:12]} for {len(names)} clusters\n\n{shown}{more}"
        self.ctx.store.commit(files, message)

    def _reverting(self, journal: Journal) -> bool:
        """A failed step awaits ``onFailure: rollback`` (``remediate`` runs next)."""
        if not journal.active or not any(s.state is StepState.FAILED for s in journal.steps):
            return False
        try:
            spec = self.ctx.spec_at(journal.desired_sha, journal.cluster)
        except ConfigError:
            return False
        return spec is not None and spec.rollout.on_failure == "rollback"

    def _rolled_back_already(self, commit: CommitInfo, cluster: str) -> Journal | None:
        """The automatic rollback that already did what ``commit`` asks, if any: ``commit``
        reverts ("This reverts commit X") an operation whose remediation names a recorded
        rollback, or it brings the cluster's desired files to exactly those of the current
        automatic rollback (a merge commit or a squash without the revert line)."""
        for sha in reverted_shas(commit.message):
            found = self._find_op(cluster, sha)
            rollback = self._automatic_rollback(found) if found is not None else None
            if rollback is not None:
                return rollback
        current = self.ctx.store.current(cluster)
        if current is None or current.kind is not OperationKind.ROLLBACK or not current.reverts_op:
            return None
        undone = self.ctx.store.history(cluster, current.reverts_op)
        rollback = self._automatic_rollback(undone) if undone is not None else None
        if rollback is None or rollback.op_id != current.op_id:
            return None
        paths = desired_paths(cluster)
        same = all(
            self.ctx.repo.read(commit.sha, p) == self.ctx.repo.read(current.desired_sha, p)
            for p in paths
        )
        return current if same else None

    def _automatic_rollback(self, failed: Journal) -> Journal | None:
        """The rollback ``onFailure: rollback`` started for ``failed``, when recorded."""
        match = _ROLLBACK_IN_REMEDIATION.match(failed.remediation)
        if match is None:
            return None
        return self.ctx.store.history(failed.cluster, match.group(1))

    def _pause_only(self, commit: CommitInfo, cluster: str) -> bool:
        """``commit`` changes, of ``cluster``'s files, only ``paused:`` in its rollout.yaml
        (core.pause.pause_only)."""
        prefix = f"clusters/{cluster}/"
        if not commit.parents:
            return False
        paths = [p for p in self.ctx.repo.diff_paths(commit.parents[0], commit.sha)]
        if [p for p in paths if p.startswith(prefix)] != [prefix + ROLLOUT_FILE]:
            return False
        try:
            before = self.ctx.spec_at(commit.parents[0], cluster)
            after = self.ctx.spec_at(commit.sha, cluster)
        except ConfigError:
            return False
        if before is None or after is None:
            return False
        return pause.pause_only(before.rollout, after.rollout)

    def _touches(self, commit: CommitInfo, cluster: str) -> bool:
        prefix = f"clusters/{cluster}/"
        if not commit.parents:
            return True
        return any(
            p.startswith(prefix) for p in self.ctx.repo.diff_paths(commit.parents[0], commit.sha)
        )

    def _operation_for(
        self,
        commit: CommitInfo,
        spec: ClusterSpec,
        now: datetime,
        deployed: Callable[[], Deployed],
    ) -> Journal:
        # The number the commit message names; the forge's answer comes after the record
        # (``_record_new``): a paged listing must not delay taking the merge in.
        pr = _pr_in_message(commit)
        base = commit.parents[0] if commit.parents else ""
        undone = self._undone(commit, spec)
        # A revert of a rotation rotates again, to the credentials it restores: a helm
        # rollback would leave the vendor Secret and the hypervisors' password behind.
        if undone is not None and undone.kind is not OperationKind.ROTATION:
            shape, reverts = operation.Shape(OperationKind.ROLLBACK), undone.op_id
        else:
            shape, reverts = self._shape(spec, deployed, base), ""
        return operation.new_operation(
            kind=shape.kind,
            cluster=spec.name,
            desired_sha=commit.sha,
            created_at=now,
            policy=spec.rollout,
            pr_number=pr,
            crds=shape.crds,
            restart=shape.restart,
            reverts_op=reverts,
            base_sha=base,
            credentials=shape.credentials,
        )

    def _shape(
        self, spec: ClusterSpec, deployed: Callable[[], Deployed], base: str = ""
    ) -> operation.Shape:
        """Compare with what will be deployed when this change starts: the running
        operation's target if one runs, else the Helm release. Credentials are compared with
        that operation's, else with the commit's parent (``base``): Helm keeps no record of
        where a secret came from."""
        secret_paths = [r.values_path for r in spec.credentials.secrets]
        current = self.ctx.store.current(spec.name)
        before = (
            self.ctx.spec_at(current.desired_sha, spec.name) if current and current.active else None
        )
        credentials_before = before.credentials if before is not None else None
        if before is None and base:
            try:
                parent = self.ctx.spec_at(base, spec.name)
            except ConfigError:
                parent = None
            credentials_before = parent.credentials if parent is not None else None
        if before is not None:
            chart: str | None = before.release.version
            values: Mapping[str, Any] = before.values
        else:
            release = deployed()
            chart = release.info.chart_version if release.info else None
            values = release.values
        changed = operation.changed_paths(values, spec.values, ignore=secret_paths)
        shape = operation.classify_change(
            deployed_chart=chart,
            target_chart=spec.release.version,
            changed=changed,
            rotated=rotation.rotated(credentials_before, spec.credentials),
        )
        held = None
        if current is not None and before is None and pass_decision.held_by_waves(current, None):
            held = self.ctx.spec_at(current.desired_sha, spec.name)
        if held is not None:
            # A change the waves hold is in flight: a rotation on top of it is compared with
            # it and waits behind it (``pass_decision.waits_for_held``).
            behind = operation.shape_between(held, spec)
            if behind is not None and behind.kind is OperationKind.ROTATION:
                return behind
        return shape

    def _undone(self, commit: CommitInfo, spec: ClusterSpec) -> Journal | None:
        """The recorded operation this commit undoes: named by git's "This reverts commit"
        line, or (a hand-made undo) the cluster's last operation when the commit restores
        exactly the desired files that operation started from and leaves its chart version
        alone: a chart version set back by hand is a downgrade, an upgrade to an older
        version judged as any chart change (``commit_classes.restore_is_undo``). A blocked
        operation changed nothing: undoing it is an ordinary change, judged and applied as
        one."""
        cluster = spec.name
        for sha in reverted_shas(commit.message):
            found = self._find_op(cluster, sha)
            blocked = found is not None and found.status is OperationStatus.BLOCKED
            if found is not None and found.rollback_point is not None and not blocked:
                return found
        last = self.ctx.store.current(cluster)
        if (
            last is None
            or not last.base_sha
            or last.status is OperationStatus.BLOCKED
            or last.kind is OperationKind.ROLLBACK
            or last.rollback_point is None
            or last.rollback_point.helm_revision == 0
        ):
            return None
        paths = desired_paths(cluster)
        now = [self.ctx.repo.read(commit.sha, p) for p in paths]
        before = [self.ctx.repo.read(last.base_sha, p) for p in paths]
        if now != before:
            return None
        try:
            undone = self.ctx.spec_at(last.desired_sha, cluster)
        except ConfigError:
            undone = None  # its version unknown: judged as a change, never waved through
        chart = undone.release.version if undone is not None else ""
        return last if restore_is_undo(chart, spec.release.version) else None

    def _find_op(self, cluster: str, sha: str) -> Journal | None:
        found = self.ctx.store.history(cluster, operation.operation_id(cluster, sha))
        if found is not None and found.desired_sha.startswith(sha[:12]):
            return found
        return None

    def _merged_by(self, commit: CommitInfo) -> int | None:
        """The pull request the forge says merged ``commit`` (None: none, or no answer)."""
        if self.ctx.forge is None:
            return None
        try:
            for pr in self.ctx.forge.list_merged_since(commit.time - timedelta(days=7)):
                if pr.merge_commit_sha == commit.sha:
                    return pr.number
        except ForgeError as e:
            log.warning("could not list merged pull requests: %s", e)
        return None

    def _record_new(
        self,
        journal: Journal,
        message: str,
        head: str,
        commit: CommitInfo,
        files: Mapping[str, bytes | None] | None = None,
    ) -> Journal:
        """Record the new operation first, with ``files`` (its backup's, when it ran before
        the record); from here ``status`` shows it and a restart resumes it. Then ask the
        forge which pull request merged ``commit``, and when that is not the number the
        commit message named (a rebase merge names none), put it on the journal in a
        follow-up save. Only then is it mirrored on its pull request and
        announced, so both name the right one."""
        self.ctx.store.save(journal, message, seen=head, files=files)
        merged = self._merged_by(commit)
        if merged is not None and merged != journal.pr_number:
            journal = replace(journal, pr_number=merged)
            self.ctx.store.save(journal, f"{journal.op_id}: merged by pull request #{merged}")
        self.ctx.mirror(journal)
        return journal

    def _admit(
        self,
        new: Journal,
        spec: ClusterSpec,
        head: str,
        now: datetime,
        deployed: Callable[[], Deployed],
        commit: CommitInfo,
    ) -> PassResult:
        current = self.ctx.store.current(spec.name)
        queued = self.ctx.store.queued(spec.name)
        if (
            new.kind is OperationKind.ROLLBACK
            and current is not None
            and current.active
            and current.op_id == new.reverts_op
        ):
            # The change being reverted is still running: stop it here, the rollback follows.
            self.ctx._close_switches(current)
            current = replace(
                current, status=OperationStatus.FAILED, failure="reverted", remediation="reverted"
            )
            self.ctx.save(current, f"{current.op_id} stopped: reverted by {new.desired_sha[:12]}")
        behind_held = pass_decision.waits_for_held(current, new)
        admission = merge_queue.admit(
            new,
            running=current,
            queued=queued,
            now=now,
            pool_windows=list(self.ctx.pool_windows(spec).values()),
            behind_held=behind_held,
        )
        carried = None
        if (
            new.kind is OperationKind.ROLLBACK
            and admission.superseded is not None
            and admission.journal.status is OperationStatus.RUNNING
        ):
            undone = (
                current
                if current is not None and current.op_id == new.reverts_op
                else self.ctx.store.history(spec.name, new.reverts_op)
            )
            if undone is not None:  # recorded with the rollback's start, below
                carried = rollback_queue.carry_queued(self.ctx, undone, new, now)

        def supersede() -> None:
            if admission.superseded is not None:
                self.ctx.save(admission.superseded, f"{admission.superseded.op_id} superseded")
                if queued is not None and admission.journal.status is not OperationStatus.QUEUED:
                    queue = {f"clusters/{spec.name}/queued.yaml": None}
                    self.ctx.store.commit(queue, "queue emptied")

        if carried is None:
            supersede()
        placed = admission.journal
        if placed.status is OperationStatus.QUEUED:
            when = (
                f"expected start {admission.expected_start.isoformat()}"
                if admission.expected_start
                else f"after {current.kind} {current.op_id}, held by waves"
                if behind_held and current is not None
                else "after the running operation"
            )
            message = f"{placed.kind} {placed.op_id} queued: {when}"
            self._record_new(placed, message, head, commit)
            return PassResult(spec.name, "queued", when, next_at=admission.expected_start)
        placed = self.ctx.judged(placed, spec, deployed())
        if placed.status is OperationStatus.BLOCKED:
            if carried is not None:  # the rollback does not run: nothing is carried after it
                supersede()
            message = f"{placed.kind} {placed.op_id} {placed.failure}"[:300]
            self._record_new(placed, message, head, commit)
            return PassResult(spec.name, "blocked", placed.failure)
        placed, files = self.ctx.backed_up(placed, spec, now)
        message = f"{placed.kind} {placed.op_id} started" + ("; backup succeeded" if files else "")
        if carried is not None:
            files = {**files, **rollback_queue.queue_files(*carried)}
            message += rollback_queue.carried_text(*carried)
        self._record_new(placed, message, head, commit, files)
        if carried is not None:
            self.ctx.mirror(carried[1] or carried[0])
        return PassResult(spec.name, "started", placed.op_id, next_at=now)


def _pr_in_message(commit: CommitInfo) -> int | None:
    """The pull request a merge or squash message names ("Merge pull request #12", "(#12)",
    GitLab's "!12"), if any."""
    match = _PR_IN_MESSAGE.search(commit.summary)
    return int(match.group(1)) if match else None
