"""What every part of a reconcile pass shares: the ports, the caches of fleet files by commit,
and how a transition is recorded (a state-branch commit, mirrored on the pull request).

``PassBase`` holds the constructor, ``spec_at`` / ``fleet_at`` / ``pool_windows``, ``save`` /
``mirror``, ``_close_switches`` and a new operation's first record (``backed_up``,
``start_following``). The parts of the pass (``bot.intake.Intake``, ``bot.driving.Driver``,
``bot.reverts.Reverts``, ``bot.held.Held``) are objects given it as their ``ctx``, none
inheriting another; ``bot.reconciler.Reconciler`` is the context and puts them together.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Collection, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import datetime, tzinfo

from gitopsbot.bot import pr_mirror, rehearsal_store, waves
from gitopsbot.bot.announcer import Announcer
from gitopsbot.bot.apply_gate import ApplyGate, Deployed
from gitopsbot.bot.journal_store import JournalStore
from gitopsbot.bot.release_reads import PassReads
from gitopsbot.bot.steps.executor import Executor
from gitopsbot.core.fleet.model import BotSettings, ClusterSpec, Fleet
from gitopsbot.core.operations import operation
from gitopsbot.core.policy import Verdict
from gitopsbot.core.records.journal import (
    Journal,
    OperationKind,
    OperationStatus,
    PhaseState,
    StepKind,
    StepState,
)
from gitopsbot.core.rollouts import admission, windows
from gitopsbot.core.waves import promotion_gate
from gitopsbot.errors import ConfigError, GitOpsBotError
from gitopsbot.ports.clock import Clock
from gitopsbot.ports.files import FileTree
from gitopsbot.ports.forge import Forge
from gitopsbot.ports.repo import Repo

log = logging.getLogger(__name__)

LOG_LIMIT = 200
# Cluster specs kept, by (commit, cluster): every pass reads its cluster's (and the gauges
# again after it), so the cache holds a few heads of a 1,000-cluster fleet (#29: at 256 a
# fleet of 1,000 parsed its files twice a pass).
SPEC_CACHE = 4096
FLEET_CACHE = 3  # whole fleets kept, by commit: the watched head and the one or two before


@dataclass(frozen=True, slots=True)
class PassResult:
    cluster: str
    action: str
    detail: str = ""
    next_at: datetime | None = None  # come back no later than this
    # At rest (nothing active, queued or held; docs/decisions.md#resting-clusters): no
    # periodic pass is needed before this; a push touching the cluster or its release
    # changing wakes it sooner. None: the periodic pass as usual.
    rest_until: datetime | None = None


@dataclass(frozen=True, slots=True)
class _InPass:
    """``PassBase.executor_for`` as handed out: ``factory``'s executor, with the running
    pass's shared reads."""

    base: PassBase
    factory: Callable[[ClusterSpec], Executor]

    def __call__(self, spec: ClusterSpec) -> Executor:
        return self.base._executor_in_pass(self.factory, spec)


class PassBase:
    """Drives every cluster's operations. Ports are injected; ``executor_for`` builds the
    executor of a cluster (its Cluster and Helm ports) from the cluster's spec."""

    def __init__(
        self,
        *,
        repo: Repo,
        store: JournalStore,
        executor_for: Callable[[ClusterSpec], Executor],
        gate: ApplyGate,
        clock: Clock,
        load_fleet: Callable[[FileTree], Fleet],
        resolve_tz: Callable[[str], tzinfo],
        settings: BotSettings,
        forge: Forge | None = None,
        fetch: bool = True,
        push: bool = True,
        publish: Callable[[Journal], None] | None = None,
        load_cluster: Callable[[FileTree, str], ClusterSpec | None] | None = None,
        may_act: Callable[[str], bool] | None = None,
        announcer: Announcer | None = None,
    ) -> None:
        self.repo = repo
        self.store = store
        self._pass_reads = threading.local()  # .current: the running pass's PassReads
        self.executor_for = executor_for
        # The policy gate every operation passes before its first step (docs/policies.md).
        self.gate = gate
        self.clock = clock
        self.load_fleet = load_fleet
        self.resolve_tz = resolve_tz
        self.settings = settings
        self.forge = forge
        self.fetch = fetch
        # False (``run --no-push``): nothing reaches the fleet remote. Revert commits stay
        # local, revert pull requests (which need a pushed branch) are not opened.
        self.push = push
        # How a transition reaches the pull request: ``PullRequestMirror.publish`` in the
        # long-running loop (posted from its own thread), else posted within the pass.
        self.publish = publish
        # One cluster's files at a commit (``fleetrepo.find_cluster``): a merge costs that
        # cluster's parse, not the fleet's. None: taken from ``load_fleet`` (whole fleet).
        self.load_cluster = load_cluster
        # Whether this replica may still act on a cluster (its Lease held, docs/leases.md),
        # asked before each step; None: always (one replica).
        self.may_act = may_act if may_act is not None else (lambda cluster: True)
        # Tells Events, notifications, metrics and logs what each transition means.
        self.announcer = announcer if announcer is not None else Announcer()
        # The other clusters this process runs (``run``: the scheduler's); None: one at a
        # time. A first pass records their baselines with its own, in one commit (#29).
        self.peers: Callable[[], Collection[str]] | None = None
        self._fleets: dict[str, Fleet] = {}
        self._fleet_errors: dict[str, ConfigError] = {}
        self._fleets_lock = threading.Lock()
        self._fleets_loading: dict[str, threading.Lock] = {}
        self.fleet_parses = 0  # whole-fleet parses so far (tests, benchmarks)
        self._watched_logs: dict[str, waves.WatchedLog] = {}
        self._specs: dict[tuple[str, str], ClusterSpec | None] = {}
        self._specs_lock = threading.Lock()
        self._shown: set[str] = set()  # clusters whose running operation was re-posted
        self._release_checked: dict[str, datetime] = {}  # cluster → last manual-revision check
        # cluster → when the soak that holds its change ends (``wave_verdicts``), if one does
        self.held_until: dict[str, datetime | None] = {}

    # -- the executor, and what a pass has read -------------------------------------------

    @property
    def executor_for(self) -> Callable[[ClusterSpec], Executor]:
        """The cluster's executor (``executor_for(spec)``). Within a pass (``pass_reads``) its
        Helm reads are shared by the whole pass (``bot.release_reads``)."""
        return _InPass(self, self._executor_factory)

    @executor_for.setter
    def executor_for(self, factory: Callable[[ClusterSpec], Executor]) -> None:
        # Given back what the getter handed out (a test restoring it): its factory, so the
        # reads are not wrapped twice.
        self._executor_factory = factory.factory if isinstance(factory, _InPass) else factory

    def _executor_in_pass(
        self, factory: Callable[[ClusterSpec], Executor], spec: ClusterSpec
    ) -> Executor:
        executor = factory(spec)
        reads: PassReads | None = getattr(self._pass_reads, "current", None)
        return executor if reads is None else reads.executor(executor)

    @contextmanager
    def pass_reads(self) -> Iterator[None]:
        """Within: one read of each release, shared by intake, backup and the helm steps;
        after: forgotten, so no later pass uses it. Per thread: passes of different clusters
        run in parallel, each with its own."""
        before = getattr(self._pass_reads, "current", None)
        self._pass_reads.current = PassReads()
        try:
            yield
        finally:
            self._pass_reads.current = before

    # -- helpers --------------------------------------------------------------------------

    def fleet_at(self, sha: str) -> Fleet:
        """The whole fleet at ``sha``, parsed once for every cluster's pass (#29): passes
        run in parallel, and the first to ask parses while the others wait for it. Fleet
        files that do not load are kept too (their ConfigError raised again): a commit's
        files never change."""
        with self._fleets_lock:
            found = self._fleet_known(sha)
            if found is not None:
                return found
            loading = self._fleets_loading.setdefault(sha, threading.Lock())
        with loading:
            with self._fleets_lock:
                found = self._fleet_known(sha)
                if found is not None:
                    return found
            try:
                fleet: Fleet | ConfigError = self.load_fleet(self.repo.tree(sha))
            except ConfigError as e:
                fleet = e
            with self._fleets_lock:
                self.fleet_parses += 1
                self._fleets_loading.pop(sha, None)
                for kept in (self._fleets, self._fleet_errors):
                    kept.pop(sha, None)
                    while len(kept) >= FLEET_CACHE:  # waves read every new head's fleet
                        kept.pop(next(iter(kept)))
                if isinstance(fleet, ConfigError):
                    self._fleet_errors[sha] = fleet
                else:
                    self._fleets[sha] = fleet
                found = self._fleet_known(sha)
        assert found is not None
        return found

    def _fleet_known(self, sha: str) -> Fleet | None:
        error = self._fleet_errors.get(sha)
        if error is not None:
            raise error
        return self._fleets.get(sha)

    def spec_at(self, sha: str, cluster: str) -> ClusterSpec | None:
        if self.load_cluster is None:
            return self.fleet_at(sha).clusters.get(cluster)
        key = (sha, cluster)
        with self._specs_lock:  # passes of several clusters run in parallel
            if key in self._specs:
                return self._specs[key]
        spec = self.load_cluster(self.repo.tree(sha), cluster)
        with self._specs_lock:
            if len(self._specs) >= SPEC_CACHE:  # a long-running bot sees many commits
                self._specs.pop(next(iter(self._specs)))
            self._specs[key] = spec
        return spec

    def pool_windows(self, spec: ClusterSpec) -> dict[str, windows.Window | None]:
        out: dict[str, windows.Window | None] = {}
        for pool in spec.rollout.pools:
            mw = pool.maintenance_window
            out[pool.name] = (
                None if mw is None else windows.Window.of(mw, self.resolve_tz(mw.timezone))
            )
        return out

    def read_deployed(self, spec: ClusterSpec) -> Deployed:
        """The release as it is now: ``helm history --max 1`` and, when there is one,
        ``helm get values``; within a pass, what the pass read already (``pass_reads``)."""
        helm = self.executor_for(spec).helm
        rel = spec.release
        info = helm.status(rel.release_name, rel.namespace)
        values = helm.get_values(rel.release_name, rel.namespace) if info else {}
        return Deployed(info=info, values=values)

    def judged(self, journal: Journal, spec: ClusterSpec, deployed: Deployed) -> Journal:
        """``journal`` as the policy gate leaves it (BLOCKED when refused). Fleet rules that
        do not parse at the operation's commit block it too, with their error."""
        try:
            extra = self.wave_verdicts(journal, spec, deployed)
            return self.gate.judge(journal, spec, deployed, extra)
        except ConfigError as e:
            first = str(e).splitlines()[0] if str(e) else type(e).__name__
            return replace(
                journal,
                status=OperationStatus.BLOCKED,
                failure=f"blocked: the policy rules do not load at "
                f"{journal.desired_sha[:12]}: {first}"[:600],
            )

    def wave_verdicts(
        self, journal: Journal, spec: ClusterSpec, deployed: Deployed
    ) -> tuple[Verdict, ...]:
        """The ``WAVES`` deny when promotion holds the change (``bot.waves``); the soak's
        end is kept for the pass's "come back at" (``held_until``). The waves, the
        ``failedVersions`` marks and the clusters are the watched branch's head's: a mark a
        person adds or removes reaches a change judged again (``bot.held``)."""
        head = self.repo.head(self.settings.watched_branch) or journal.desired_sha
        try:
            fleet = self.fleet_at(head)
        except ConfigError as e:
            if not promotion_gate.applies(self.settings):
                # Another cluster's files are broken, and the bot runs without waves: the
                # change is judged by its own files only, as before waves.
                return ()
            first = str(e).splitlines()[0] if str(e) else type(e).__name__
            return (promotion_gate.unreadable(f"the fleet does not load: {first}"),)
        found = waves.judge(
            store=self.store,
            settings=fleet.settings,
            clusters=fleet.clusters,
            spec=spec,
            before=deployed.info.chart_version if deployed.info is not None else "",
            now=self.clock.now(),
            version_of=self._chart_version_of,
            revert=journal.kind is OperationKind.ROLLBACK,
            pending=waves.pending_reader(
                self.repo, self.store, self.settings.watched_branch, self._watched_log(head)
            ),
        )
        self.held_until[journal.cluster] = found.soak_ends_at
        return found.verdicts

    def _watched_log(self, head: str) -> waves.WatchedLog:
        """The watched branch's log at ``head``, shared by every cluster's judgement."""
        with self._fleets_lock:
            found = self._watched_logs.get(head)
        if found is None:
            found = waves.WatchedLog(self.repo, self.settings.watched_branch, head)
            with self._fleets_lock:
                while len(self._watched_logs) >= FLEET_CACHE:
                    self._watched_logs.pop(next(iter(self._watched_logs)))
                self._watched_logs[head] = found
        return found

    def _chart_version_of(self, journal: Journal) -> str:
        """The chart version an operation's desired commit names ("" when unreadable)."""
        try:
            spec = self.spec_at(journal.desired_sha, journal.cluster)
        except ConfigError:
            return ""
        return spec.release.version if spec is not None else ""

    def save(
        self,
        journal: Journal,
        message: str,
        *,
        files: Mapping[str, bytes | None] | None = None,
        seen: str | None = None,
        push: bool = True,
    ) -> Journal:
        self.store.save(journal, message, files=files, seen=seen, push=push)
        self.mirror(journal)
        return journal

    def mirror(self, journal: Journal) -> None:
        """After a transition was recorded: the pull request shows it (one edited comment and
        a status), and the listeners hear what it means."""
        self.repost(journal)
        self.announcer.announce(journal)
        if journal.status in (OperationStatus.SUCCEEDED, OperationStatus.FAILED):
            self.compare_rehearsal(journal)

    def compare_rehearsal(self, journal: Journal) -> None:
        """A finished operation whose desired commit was rehearsed (``rehearse --record``)
        gets the comparison of predicted and measured pool times next to the rehearsal on
        the state branch (docs/rehearsal.md), committed without a push of its own: the
        pass's end (or the next transition) pushes it. One read when the commit was never
        rehearsed; nothing written when the comparison is kept already (a re-recorded
        failure, a restart). A failure here is logged and never changes the operation."""
        try:
            rehearsal_store.compare_finished(self.store, journal, push=False)
        except Exception as e:  # noqa: BLE001 - the operation's outcome is recorded already
            why = str(e).splitlines()[0] if isinstance(e, GitOpsBotError) and str(e) else ""
            log.warning(
                "%s: %s: the rehearsal of %s not compared: %s%s",
                journal.cluster,
                journal.op_id,
                journal.desired_sha[:12],
                type(e).__name__,
                f": {why}" if why else "",
            )

    def repost(self, journal: Journal) -> None:
        """The pull request shows ``journal``; nothing is announced."""
        if self.publish is not None:
            self.publish(journal)
        elif self.forge is not None:
            pr_mirror.post(self.forge, journal)

    def _close_switches(self, journal: Journal) -> None:
        spec = self.spec_at(journal.desired_sha, journal.cluster)
        if spec is None:
            return
        executor = self.executor_for(spec)
        for step in journal.steps:
            phase = journal.phase(step.name)
            if step.component and phase.state in (PhaseState.ROLLING, PhaseState.CANARY):
                policy = next((p for p in spec.rollout.pools if p.name == step.pool), None)
                # Git's batchInterval back where the bot pinned one (an availability budget)
                interval = (
                    policy.batch_interval_seconds
                    if policy is not None and admission.budget_bound(policy, step.component)
                    else None
                )
                try:
                    executor.set_switch(
                        spec,
                        step.pool,
                        step.component,
                        open_=False,
                        batch_interval_seconds=interval,
                    )
                except GitOpsBotError as e:
                    log.error("%s: could not close %s: %s", journal.cluster, step.name, e)

    # -- a new operation's first record, and a step's start with the previous end --------

    def backed_up(
        self, journal: Journal, spec: ClusterSpec, now: datetime
    ) -> tuple[Journal, dict[str, bytes | None]]:
        """``journal`` (a new operation, about to be recorded) with its backup step done and
        the step after it started, and the backup's files: the operation's first record
        carries them, one commit and one pass fewer before the first change (#13). Backup
        only reads the cluster, so running it before anything is recorded is safe: killed
        here, the next pass records the operation afresh. When it does not succeed at once
        (the API answers an error, or the step would wait), ``journal`` comes back unchanged
        and the step runs as usual after the record, with its retries and timeout."""
        pending = next((s for s in journal.steps if not s.state.finished), None)
        if (
            journal.status is not OperationStatus.RUNNING
            or pending is None
            or pending.kind is not StepKind.BACKUP
            or pending.state is not StepState.PENDING
        ):
            return journal, {}
        try:
            outcome = self.executor_for(spec).backup(journal, spec)
        except GitOpsBotError as e:
            log.info("%s: backup after the record: %s", journal.cluster, e)
            return journal, {}
        if outcome.state is not StepState.SUCCEEDED:
            return journal, {}
        done = replace(
            pending,
            state=StepState.SUCCEEDED,
            started_at=now,
            finished_at=now,
            attempts=1,
            detail=outcome.detail,
        )
        journal = journal.with_step(done)
        if outcome.rollback_point is not None and journal.rollback_point is None:
            journal = replace(journal, rollback_point=outcome.rollback_point)
        return self.start_following(journal), dict(outcome.files)

    def start_following(self, journal: Journal) -> Journal:
        """``journal`` with the next plain step started too, when nothing observed can change
        what comes next (``operation.following_step``): one commit for both transitions, not
        two (the store names the start in the commit's subject). The start is still committed
        and pushed before that step acts (the next pass, at once), as recovery needs: the helm
        step knows its own pending revision as "written after the step started", and the
        controller restart's annotation is its start. Its start is this moment, not the
        pass's: the step that just ran may have taken minutes, which must not count against
        the next step's timeout."""
        following = operation.following_step(journal)
        if following is None:
            return journal
        started = replace(
            following, state=StepState.RUNNING, started_at=self.clock.now(), attempts=1
        )
        return journal.with_step(started)
