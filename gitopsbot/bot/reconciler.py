"""One reconcile pass for one cluster: intake → observe → decide → act.

The pass (style-research §6.3, docs/decisions.md#the-pass):

1. **Intake** (``bot.intake``, ``Driver.take_inputs``): new commits on the watched branch
   touching ``clusters/<name>/`` become an operation, placed by the merge queue; a person's
   commands (pull-request comments, ``approve:`` in Git) are recorded.
2. **Observe** (``observe``): one ``core.operations.pass_decision.Seen`` of everything the
   decision may read: the operation and the queue, Git at the watched head and at the
   operation's commit, the holds, the pools, the Lease.
3. **Decide** (pure): ``core.operations.pass_decision.decide(seen)``, which asks
   ``core.operations.operation.next_step`` for an active operation: one action and its reason,
   in the written precedence.
4. **Act** (``act``): one step, or the pool switch changes, through ``bot.steps.executor``
   (``bot.driving``), and the **record**: a commit on the state branch for every transition,
   mirrored on the pull request (one comment per operation, edited, and the
   ``gitopsbot/apply`` status).

On failure (a step FAILED, a rollout halted), ``bot.reverts`` remediates as
``rollout.on_failure`` says. What the parts share (ports, caches, ``save``) is in
``bot.pass_base``; ``Reconciler`` puts the parts together and runs the pass.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from datetime import datetime, timedelta
from functools import cached_property

from gitopsbot.bot import log_context
from gitopsbot.bot.driving import Drive, Driver
from gitopsbot.bot.held import Held
from gitopsbot.bot.intake import Intake
from gitopsbot.bot.pass_base import LOG_LIMIT, SPEC_CACHE, PassBase, PassResult
from gitopsbot.bot.reverts import (
    PR_NOT_OPENED,
    REFUSED_PUSH,
    REVERT_PR_RETRY,
    REVERTING,
    Reverts,
)
from gitopsbot.core.operations import manual_revision, pass_decision
from gitopsbot.core.operations.pass_decision import PassAction, PassDecision, Seen
from gitopsbot.core.records.journal import Journal, OperationKind, OperationStatus
from gitopsbot.core.rollouts import windows
from gitopsbot.errors import ConfigError, GitInterrupted, GitOpsBotError
from gitopsbot.ports.release_watch import ReleaseWatch

log = logging.getLogger(__name__)
# How often an idle cluster's release is looked at for a revision made outside the bot.
MANUAL_CHECK = timedelta(seconds=60)
# ... and how often while its release watch is healthy: a safety net, since a watch can stall
# silently (docs/executor.md "The idle check").
MANUAL_CHECK_WATCHED = timedelta(minutes=10)

__all__ = [
    "LOG_LIMIT",
    "PR_NOT_OPENED",
    "REFUSED_PUSH",
    "REVERTING",
    "REVERT_PR_RETRY",
    "SPEC_CACHE",
    "PassResult",
    "Reconciler",
]


class Reconciler(PassBase):
    """Drives every cluster's operations. Ports are injected (``PassBase``); ``executor_for``
    builds the executor of a cluster (its Cluster and Helm ports) from the cluster's spec.
    The pass's parts are its own objects, each given this context."""

    # The parts, made on first use so the constructor stays ``PassBase``'s (typed ports).
    @cached_property
    def intake(self) -> Intake:
        return Intake(self)

    @cached_property
    def reverts(self) -> Reverts:
        return Reverts(self)

    @cached_property
    def driver(self) -> Driver:
        return Driver(self, self.reverts)

    @cached_property
    def held(self) -> Held:
        return Held(self)

    # Idle clusters' releases watched (``ports.release_watch``); None: looked at every
    # MANUAL_CHECK. Set by the app (``gitopsbot run``), not by the constructor.
    release_watch: ReleaseWatch | None = None

    @cached_property
    def _release_changed(self) -> set[str]:
        """Clusters whose watch reported a change not yet looked at."""
        return set()

    @cached_property
    def _release_marks(self) -> dict[str, tuple[str | None, int]]:
        """cluster → (``release_mark``, the bot's last revision) at the last full read."""
        return {}

    # -- the pass -------------------------------------------------------------------------

    def reconcile(self, cluster: str, *, fetch: bool = True) -> PassResult:
        """One pass. A pass that fails (an unreachable cluster, a kube context that does not
        exist, an unreadable fleet) is recorded on the state branch for ``status`` (once per
        distinct error), then raised to the scheduler; the next good pass clears it. Every log
        line of the pass names the cluster (``bot.log_context``), none after it.

        ``fetch=False``: the pass does not fetch first (the scheduler's follow-up of a pass that
        asked to come back at once, with no webhook since: ``bot.scheduler``)."""
        with log_context.pass_of(cluster):
            return self._reconcile(cluster, fetch=fetch)

    def _reconcile(self, cluster: str, *, fetch: bool = True) -> PassResult:
        self.announcer.pass_started(cluster)
        began = self.clock.monotonic()
        try:
            with self.pass_reads():  # each release read once in the pass, forgotten after it
                result = self._pass(cluster, fetch=fetch)
        except GitOpsBotError as e:
            if not isinstance(e, GitInterrupted):  # Ctrl-C, not a failing pass: no record
                self._record_failure(cluster, e)
            first = str(e).splitlines()[0] if str(e) else type(e).__name__
            self.announcer.pass_finished(
                cluster,
                action="",
                detail="",
                error=first,
                seconds=self.clock.monotonic() - began,
            )
            raise
        except Exception as e:
            # A bug: told as a failing pass (metrics, /readyz, ``status``), then raised to the
            # scheduler, which logs its traceback. Only the type reaches Git and metrics: the
            # message of an unexpected error may hold anything (#29: a ValueError in every
            # helm step at 1,000 clusters showed nowhere but the log).
            said = GitOpsBotError(f"internal error ({type(e).__name__}); see the bot's log")
            self._record_failure(cluster, said)
            self.announcer.pass_finished(
                cluster,
                action="",
                detail="",
                error=str(said),
                seconds=self.clock.monotonic() - began,
            )
            raise
        self.announcer.pass_finished(
            cluster,
            action=result.action,
            detail=result.detail,
            error="",
            seconds=self.clock.monotonic() - began,
        )
        try:
            self.store.clear_pass_failure(cluster)
        except GitOpsBotError as e:  # the pass did its work; the record waits for the next
            log.warning("%s: could not clear the pass-failure record: %s", cluster, e)
        # A record left in the mirror (``operation.push_may_wait``) is pushed now, unless the
        # pass comes back at once: the next pass's first push carries it, a moment later.
        if result.next_at is None or result.next_at > self.clock.now():
            try:
                self.store.flush()
            except GitOpsBotError as e:  # refused: the next transition's push says so
                log.warning("%s: state branch push: %s", cluster, e)
        return result

    def _record_failure(self, cluster: str, error: GitOpsBotError) -> None:
        try:
            if self.store.record_pass_failure(cluster, str(error), self.clock.now()):
                log.error("%s: passes fail: %s", cluster, str(error).splitlines()[:1])
        except GitOpsBotError as e:  # Git itself is down: only the log can say it
            log.error("%s: could not record the failing pass on the state branch: %s", cluster, e)

    def _watch_release(self, cluster: str, last: Journal | None, now: datetime) -> datetime:
        """While idle, at most every MANUAL_CHECK: the cluster's release is looked at, so a
        kube context that does not exist or an unreachable cluster fails the pass (recorded
        for ``status`` as "every pass fails", docs/executor.md) even before any operation,
        not only when a merge comes; and a Helm revision made outside the bot since its last
        operation (a person's break-glass upgrade) is reported on the state branch and in the
        log. The bot does not undo it.

        The look is cheap (``Helm.release_mark``: Helm's release Secrets listed without their
        records); the release itself is read only when the mark, or the bot's own last
        revision, changed since the last full read: at 1,000 idle clusters the records
        (hundreds of KB each) are not listed every minute (#29).

        With a release watch (``release_watch``, #29): a change it reports is looked at in the
        next pass (the watch nudges it), and while the watch is healthy the periodic look
        comes every MANUAL_CHECK_WATCHED only; a watch that is not healthy (broken, not yet
        started) leaves the look at every MANUAL_CHECK.

        Returns when the next look is due: the cluster rests until then (``PassResult``'s
        ``rest_until``) unless woken."""
        watch = self.release_watch
        if watch is not None and watch.take_change(cluster):
            self._release_changed.add(cluster)  # kept until a look succeeds
        every = MANUAL_CHECK
        if watch is not None and watch.healthy(cluster):
            every = MANUAL_CHECK_WATCHED
        checked = self._release_checked.get(cluster)
        changed = cluster in self._release_changed
        if not changed and checked is not None and now - checked < every:
            return checked + every
        sha = last.desired_sha if last is not None else self.store.seen(cluster)
        try:
            spec = self.spec_at(sha, cluster) if sha else None
        except ConfigError:
            # The newest commit did not load: intake recorded it; nothing to reach. A fix
            # is a push touching the cluster, which wakes it.
            return now + MANUAL_CHECK_WATCHED
        if spec is None:
            return now + MANUAL_CHECK_WATCHED
        rel = spec.release
        if watch is not None:
            watch.follow(spec)  # started on the first look; nothing once running
        helm = self.executor_for(spec).helm
        mark = helm.release_mark(rel.release_name, rel.namespace)
        # Only once reached: a failing read is tried again by the next pass, so the passes in
        # between do not clear the failure's record as if the cluster were fine.
        self._release_checked[cluster] = now
        known = manual_revision.last_bot_revision(last)
        seen = (mark, known)
        if known and (mark is None or self._release_marks.get(cluster) != seen):
            latest = helm.status(rel.release_name, rel.namespace)
            found = manual_revision.detect(latest, last)
            if self.store.record_manual_revision(cluster, found) and found is not None:
                log.warning("%s: %s", cluster, found.describe())
            self._release_marks[cluster] = seen  # recorded: not read again until it changes
        # else: nothing stored changed since the last full read, the same answer
        self._release_changed.discard(cluster)  # looked at: a failure above keeps it
        return now + every

    def _pass(self, cluster: str, *, fetch: bool = True) -> PassResult:
        now = self.clock.now()
        if self.fetch and fetch:
            self.repo.fetch()
        if cluster not in self._shown:
            # After a restart: the last transition may have been recorded but not yet posted.
            self._shown.add(cluster)
            running = self.store.current(cluster)
            if running is not None and running.active:
                self.repost(running)
                self.announcer.seen(running)  # told before the restart
        # 1. Intake: what Git says now becomes records (a new operation, the queue).
        intake = self.intake.intake(cluster, now)
        if intake is not None:
            return intake
        current = self.store.current(cluster)
        retry_at = None  # a refused revert's pull request tried again then (rests no longer)
        if current is not None and current.kind is OperationKind.ROLLBACK:
            retry_at = self.reverts._retry_revert_pr(current, now)
        if current is not None and current.active:
            log_context.note(operation=current.op_id)  # the pass's log lines name it from here
            # A person's commands (comments, approve: in Git) are recorded before the pass
            # observes, so the decision reads them as it reads the rest of the journal.
            current = self.driver.take_inputs(current)
        # 2. Observe, 3. decide (pure), 4. act.
        seen = self.observe(cluster, current, now)
        result = self.act(pass_decision.decide(seen), seen)
        if result.rest_until is not None and retry_at is not None:
            result = replace(result, rest_until=min(result.rest_until, retry_at))
        return result

    def observe(self, cluster: str, current: Journal | None, now: datetime) -> Seen:
        """Everything the pass's decision may read, read once
        (``core.operations.pass_decision``)."""
        queued = None
        if current is None or not current.active:
            queued = self.store.queued(cluster)
        queued_windows: tuple[windows.Window | None, ...] = ()
        if queued is not None and not pass_decision.held_by_waves(current, queued):
            spec = self.spec_at(queued.desired_sha, cluster)
            queued_windows = tuple(self.pool_windows(spec).values()) if spec else ()
        operating = None
        if current is not None and current.active:
            operating = self.driver.observe_operation(current)
        return Seen(
            cluster=cluster,
            now=now,
            current=current,
            queued=queued,
            queued_windows=queued_windows,
            operating=operating,
            lease_held=self.may_act(cluster),
        )

    def act(self, decision: PassDecision, seen: Seen) -> PassResult:
        """Carry ``decision`` out and record it."""
        cluster, now, current = seen.cluster, seen.now, seen.current
        match decision.action:
            case PassAction.NOT_HOLDER:
                return PassResult(cluster, "paused", decision.reason)
            case PassAction.IDLE:
                # At rest until its next idle look: a push touching it (the fleet poll, a
                # webhook) or its release changing (the watch) wakes it sooner.
                look = self._watch_release(cluster, current, now)
                return PassResult(cluster, "idle", rest_until=look)
            case PassAction.REJUDGE:
                assert current is not None
                return self.held.retry_held(current, now)
            case PassAction.QUEUED:
                promoted = decision.promoted
                assert promoted is not None and seen.queued is not None
                if promoted != seen.queued:
                    self.save(promoted, decision.reason)
                return PassResult(cluster, "queued", next_at=decision.until)
            case PassAction.ADMIT:
                assert decision.promoted is not None
                return self.admit(decision.promoted, now)
            case PassAction.MISSING:
                assert current is not None
                failed = replace(current, status=OperationStatus.FAILED, failure=decision.reason)
                self.save(failed, "failed: cluster missing")
                return PassResult(cluster, "failed", failed.failure)
        assert current is not None and seen.operating is not None and decision.step is not None
        view = seen.operating
        drive = Drive(view.spec, self.executor_for(view.spec), view.holds)
        return self.driver.carry_out(decision.step, current, drive, now, view.observations)

    def admit(self, promoted: Journal, now: datetime) -> PassResult:
        """A queued change whose turn came: judged through the policy gate with what is
        deployed now (blocked, or started with its backup in the same commit)."""
        cluster = promoted.cluster
        spec = self.spec_at(promoted.desired_sha, cluster)
        if spec is not None:
            promoted = self.judged(promoted, spec, self.read_deployed(spec))
        if promoted.status is OperationStatus.BLOCKED:
            gone = {f"clusters/{cluster}/queued.yaml": None}
            self.save(promoted, f"{promoted.op_id} {promoted.failure}"[:300], files=gone)
            return PassResult(cluster, "blocked", promoted.failure)
        files: dict[str, bytes | None] = {}
        if spec is not None:  # its backup in the same commit (``backed_up``)
            promoted, files = self.backed_up(promoted, spec, now)
        message = f"{promoted.kind} {promoted.op_id} started"
        self.store.start(promoted, message + ("; backup succeeded" if files else ""), files)
        self.mirror(promoted)
        return PassResult(cluster, "started", promoted.op_id, next_at=now)
