"""One reconcile pass for one cluster: observe → decide → execute one step → record.

The pass (style-research §6.3):

1. **Intake**: new commits on the watched branch touching ``clusters/<name>/`` become an
   operation (a revert of a recorded operation becomes a rollback), placed by the merge
   queue (``core.merge_queue``). The first pass ever only records the branch head as the
   baseline: the bot applies merges it sees happen, not the history before it.
2. **Decide** (pure): ``core.operation.next_step(journal, observations, now)``.
3. **Execute** one step, or the pool switch changes, through ``bot.executor``.
4. **Record**: a commit on the state branch for every transition, mirrored on the pull
   request (one comment per operation, edited, and the ``gitopsbot/apply`` status).

Resume: a killed pass leaves the journal at its last recorded transition; the next pass runs
the step again, and the executor recognises an effect that already happened (the Helm
revision description), so no step that took effect is repeated.

On failure (a step FAILED, a rollout halted), ``rollout.on_failure`` decides: ``rollback``
commits a revert to the watched branch (Git stays the truth) and starts the rollback;
``revert-pr`` opens a pull request with the revert for a person to merge; ``halt`` stops.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timedelta, tzinfo
from typing import Any

from gitopsbot.bot import pr_mirror
from gitopsbot.bot.executor import VERIFY_TIMEOUT_SECONDS, Executor, StepOutcome
from gitopsbot.bot.journal_store import JournalStore, cluster_dir
from gitopsbot.core import journal as journal_mod
from gitopsbot.core import merge_queue, operation, rollout, windows
from gitopsbot.core.commit_classes import desired_paths, reverted_shas
from gitopsbot.core.journal import (
    Journal,
    OperationKind,
    OperationStatus,
    PhaseState,
    RollbackPoint,
    Step,
    StepKind,
    StepState,
)
from gitopsbot.core.model import BotSettings, ClusterSpec, Fleet
from gitopsbot.core.operation import Action, Decision
from gitopsbot.errors import (
    ConfigError,
    ForgeError,
    GitFailed,
    GitOpsBotError,
    PermanentError,
    PushRefused,
)
from gitopsbot.ports.clock import Clock
from gitopsbot.ports.files import FileTree
from gitopsbot.ports.forge import Forge
from gitopsbot.ports.repo import CommitInfo, Repo

log = logging.getLogger(__name__)

_PR_IN_MESSAGE = re.compile(r"(?:pull request #|\(#|!)(\d+)")
LOG_LIMIT = 200
SPEC_CACHE = 256  # cluster specs kept, by (commit, cluster)
# remediation of a failed operation whose revert is committed but not yet pushed (the sha follows)
REVERTING = "reverting:"
# In a failed operation's remediation: the revert pull request of a refused automatic revert
# could not be opened. Retried (``_retry_revert_pr``) at most every REVERT_PR_RETRY.
PR_NOT_OPENED = "revert PR not opened"
REFUSED_PUSH = "refused the revert push"
REVERT_PR_RETRY = timedelta(minutes=5)
_ROLLBACK_IN_REMEDIATION = re.compile(r"^rollback:([\w.-]+)")


@dataclass(frozen=True, slots=True)
class PassResult:
    cluster: str
    action: str
    detail: str = ""
    next_at: datetime | None = None  # come back no later than this


class Reconciler:
    """Drives every cluster's operations. Ports are injected; ``executor_for`` builds the
    executor of a cluster (its Cluster and Helm ports) from the cluster's spec."""

    def __init__(
        self,
        *,
        repo: Repo,
        store: JournalStore,
        executor_for: Callable[[ClusterSpec], Executor],
        clock: Clock,
        load_fleet: Callable[[FileTree], Fleet],
        resolve_tz: Callable[[str], tzinfo],
        settings: BotSettings,
        forge: Forge | None = None,
        fetch: bool = True,
        push: bool = True,
        publish: Callable[[Journal], None] | None = None,
        load_cluster: Callable[[FileTree, str], ClusterSpec | None] | None = None,
    ) -> None:
        self.repo = repo
        self.store = store
        self.executor_for = executor_for
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
        self._fleets: dict[str, Fleet] = {}
        self._specs: dict[tuple[str, str], ClusterSpec | None] = {}
        self._specs_lock = threading.Lock()
        self._shown: set[str] = set()  # clusters whose running operation was re-posted
        self._pr_retried: dict[str, datetime] = {}  # cluster → last revert-PR retry

    # -- helpers --------------------------------------------------------------------------

    def fleet_at(self, sha: str) -> Fleet:
        if sha not in self._fleets:
            self._fleets[sha] = self.load_fleet(self.repo.tree(sha))
        return self._fleets[sha]

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

    def save(
        self,
        journal: Journal,
        message: str,
        *,
        files: Mapping[str, bytes | None] | None = None,
        seen: str | None = None,
    ) -> Journal:
        self.store.save(journal, message, files=files, seen=seen)
        self.mirror(journal)
        return journal

    def mirror(self, journal: Journal) -> None:
        """The pull request shows every transition: one edited comment and a status."""
        if self.publish is not None:
            self.publish(journal)
        elif self.forge is not None:
            pr_mirror.post(self.forge, journal)

    # -- the pass -------------------------------------------------------------------------

    def reconcile(self, cluster: str) -> PassResult:
        now = self.clock.now()
        if self.fetch:
            self.repo.fetch()
        if cluster not in self._shown:
            # After a restart: the last transition may have been recorded but not yet posted.
            self._shown.add(cluster)
            running = self.store.current(cluster)
            if running is not None and running.active:
                self.mirror(running)
        intake = self.intake(cluster, now)
        if intake is not None:
            return intake
        current = self.store.current(cluster)
        if current is not None and current.kind is OperationKind.ROLLBACK:
            self._retry_revert_pr(current, now)
        if current is None or not current.active:
            queued = self.store.queued(cluster)
            if queued is None:
                return PassResult(cluster, "idle")
            spec = self.spec_at(queued.desired_sha, cluster)
            wins = list(self.pool_windows(spec).values()) if spec else []
            promoted = merge_queue.promote(queued, now=now, pool_windows=wins)
            if promoted.status is OperationStatus.QUEUED:
                if promoted != queued:
                    self.save(promoted, "queued until the window opens")
                return PassResult(cluster, "queued", next_at=promoted.queue.queued_until)
            self.store.start(promoted, f"{promoted.kind} {promoted.op_id} started")
            self.mirror(promoted)
            return PassResult(cluster, "started", promoted.op_id, next_at=now)
        return self.advance(current, now)

    def intake(self, cluster: str, now: datetime) -> PassResult | None:
        head = self.repo.head(self.settings.watched_branch)
        if head is None:
            return None
        current = self.store.current(cluster)
        if current is not None and self._reverting(current):
            # The failed operation's own revert (committed, perhaps not pushed yet) is not a
            # person's revert: remediation finishes first, new commits are taken in after.
            return None
        seen = self.store.seen(cluster)
        if seen == head:
            return None
        if seen is None:
            self.store.commit(
                {f"clusters/{cluster}/seen": (head + "\n").encode()},
                f"{cluster}: baseline {head[:12]}",
            )
            return PassResult(cluster, "baseline", head)
        commits = self.repo.log(self.settings.watched_branch, seen, LOG_LIMIT)
        touching = [c for c in commits if self._touches(c, cluster)]
        if not touching:
            self.store.commit(
                {f"clusters/{cluster}/seen": (head + "\n").encode()},
                f"{cluster}: nothing new up to {head[:12]}",
            )
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
            self.store.commit({f"clusters/{cluster}/seen": (head + "\n").encode()}, text)
            return None
        try:
            spec = self.spec_at(newest.sha, cluster)
        except ConfigError as e:
            # Bad fleet files got merged: nothing is applied; the next good commit is.
            log.error("%s: fleet invalid at %s: %s", cluster, newest.sha[:12], e)
            self.store.commit(
                {f"clusters/{cluster}/seen": (head + "\n").encode()},
                f"{cluster}: fleet invalid at {newest.sha[:12]}; nothing applied\n\n{e}"[:4000],
            )
            return PassResult(cluster, "invalid", str(e))
        if spec is None:
            self.store.commit(
                {f"clusters/{cluster}/seen": (head + "\n").encode()},
                f"{cluster}: removed from the fleet at {newest.sha[:12]}; nothing applied",
            )
            return PassResult(cluster, "removed", newest.sha)
        new = self._operation_for(newest, spec, now)
        return self._admit(new, spec, head, now)

    def _reverting(self, journal: Journal) -> bool:
        """A failed step awaits ``onFailure: rollback`` (``remediate`` runs next)."""
        if not journal.active or not any(s.state is StepState.FAILED for s in journal.steps):
            return False
        try:
            spec = self.spec_at(journal.desired_sha, journal.cluster)
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
        current = self.store.current(cluster)
        if current is None or current.kind is not OperationKind.ROLLBACK or not current.reverts_op:
            return None
        undone = self.store.history(cluster, current.reverts_op)
        rollback = self._automatic_rollback(undone) if undone is not None else None
        if rollback is None or rollback.op_id != current.op_id:
            return None
        paths = desired_paths(cluster)
        same = all(
            self.repo.read(commit.sha, p) == self.repo.read(current.desired_sha, p) for p in paths
        )
        return current if same else None

    def _automatic_rollback(self, failed: Journal) -> Journal | None:
        """The rollback ``onFailure: rollback`` started for ``failed``, when recorded."""
        match = _ROLLBACK_IN_REMEDIATION.match(failed.remediation)
        if match is None:
            return None
        return self.store.history(failed.cluster, match.group(1))

    def _touches(self, commit: CommitInfo, cluster: str) -> bool:
        prefix = f"clusters/{cluster}/"
        if not commit.parents:
            return True
        return any(
            p.startswith(prefix) for p in self.repo.diff_paths(commit.parents[0], commit.sha)
        )

    def _operation_for(self, commit: CommitInfo, spec: ClusterSpec, now: datetime) -> Journal:
        pr = self._pr_number(commit)
        base = commit.parents[0] if commit.parents else ""
        undone = self._undone(commit, spec.name)
        if undone is not None:
            return operation.new_operation(
                kind=OperationKind.ROLLBACK,
                cluster=spec.name,
                desired_sha=commit.sha,
                created_at=now,
                policy=spec.rollout,
                pr_number=pr,
                reverts_op=undone.op_id,
                base_sha=base,
            )
        shape = self._shape(spec)
        return operation.new_operation(
            kind=shape.kind,
            cluster=spec.name,
            desired_sha=commit.sha,
            created_at=now,
            policy=spec.rollout,
            pr_number=pr,
            crds=shape.crds,
            restart=shape.restart,
            base_sha=base,
        )

    def _shape(self, spec: ClusterSpec) -> operation.Shape:
        """Compare with what will be deployed when this change starts: the running
        operation's target if one runs, else the Helm release."""
        secret_paths = [r.values_path for r in spec.credentials.secrets]
        current = self.store.current(spec.name)
        before = (
            self.spec_at(current.desired_sha, spec.name) if current and current.active else None
        )
        if before is not None:
            chart: str | None = before.release.version
            values: Mapping[str, Any] = before.values
        else:
            helm = self.executor_for(spec).helm
            status = helm.status(spec.release.release_name, spec.release.namespace)
            chart = status.chart_version if status else None
            values = (
                helm.get_values(spec.release.release_name, spec.release.namespace) if status else {}
            )
        changed = operation.changed_paths(values, spec.values, ignore=secret_paths)
        return operation.classify_change(
            deployed_chart=chart, target_chart=spec.release.version, changed=changed
        )

    def _undone(self, commit: CommitInfo, cluster: str) -> Journal | None:
        """The recorded operation this commit undoes: named by git's "This reverts commit"
        line, or (a hand-made undo) the cluster's last operation when the commit restores
        exactly the desired files that operation started from."""
        for sha in reverted_shas(commit.message):
            found = self._find_op(cluster, sha)
            if found is not None and found.rollback_point is not None:
                return found
        last = self.store.current(cluster)
        if (
            last is None
            or not last.base_sha
            or last.kind is OperationKind.ROLLBACK
            or last.rollback_point is None
            or last.rollback_point.helm_revision == 0
        ):
            return None
        paths = desired_paths(cluster)
        now = [self.repo.read(commit.sha, p) for p in paths]
        before = [self.repo.read(last.base_sha, p) for p in paths]
        return last if now == before else None

    def _find_op(self, cluster: str, sha: str) -> Journal | None:
        found = self.store.history(cluster, operation.operation_id(cluster, sha))
        if found is not None and found.desired_sha.startswith(sha[:12]):
            return found
        return None

    def _pr_number(self, commit: CommitInfo) -> int | None:
        if self.forge is not None:
            try:
                for pr in self.forge.list_merged_since(commit.time - timedelta(days=7)):
                    if pr.merge_commit_sha == commit.sha:
                        return pr.number
            except ForgeError as e:
                log.warning("could not list merged pull requests: %s", e)
        match = _PR_IN_MESSAGE.search(commit.summary)
        return int(match.group(1)) if match else None

    def _admit(self, new: Journal, spec: ClusterSpec, head: str, now: datetime) -> PassResult:
        current = self.store.current(spec.name)
        queued = self.store.queued(spec.name)
        if (
            new.kind is OperationKind.ROLLBACK
            and current is not None
            and current.active
            and current.op_id == new.reverts_op
        ):
            # The change being reverted is still running: stop it here, the rollback follows.
            self._close_switches(current)
            current = replace(
                current, status=OperationStatus.FAILED, failure="reverted", remediation="reverted"
            )
            self.save(current, f"{current.op_id} stopped: reverted by {new.desired_sha[:12]}")
        admission = merge_queue.admit(
            new,
            running=current,
            queued=queued,
            now=now,
            pool_windows=list(self.pool_windows(spec).values()),
        )
        if admission.superseded is not None:
            self.save(admission.superseded, f"{admission.superseded.op_id} superseded")
            if queued is not None and admission.journal.status is not OperationStatus.QUEUED:
                self.store.commit({f"clusters/{spec.name}/queued.yaml": None}, "queue emptied")
        placed = admission.journal
        if placed.status is OperationStatus.QUEUED:
            when = (
                f"expected start {admission.expected_start.isoformat()}"
                if admission.expected_start
                else "after the running operation"
            )
            self.save(placed, f"{placed.kind} {placed.op_id} queued: {when}", seen=head)
            return PassResult(spec.name, "queued", when, next_at=admission.expected_start)
        self.save(placed, f"{placed.kind} {placed.op_id} started", seen=head)
        return PassResult(spec.name, "started", placed.op_id, next_at=now)

    # -- advancing an active operation ----------------------------------------------------

    def advance(self, journal: Journal, now: datetime) -> PassResult:
        spec = self.spec_at(journal.desired_sha, journal.cluster)
        if spec is None:
            failed = replace(
                journal,
                status=OperationStatus.FAILED,
                failure=f"cluster {journal.cluster} is not in the fleet at "
                f"{journal.desired_sha[:12]}",
            )
            self.save(failed, "failed: cluster missing")
            return PassResult(journal.cluster, "failed", failed.failure)
        executor = self.executor_for(spec)
        observations = self._observe(journal, spec, executor)
        decision = operation.next_step(
            journal, observations, now, policy=spec.rollout, pool_windows=self.pool_windows(spec)
        )
        return self.carry_out(decision, journal, spec, executor, now)

    def _observe(
        self, journal: Journal, spec: ClusterSpec, executor: Executor
    ) -> operation.Observations:
        pending = next((s for s in journal.steps if not s.state.finished), None)
        if pending is None or pending.kind is not StepKind.POOL_PHASE:
            return operation.Observations()
        seen = {}
        for step in journal.steps:
            if step.kind is StepKind.POOL_PHASE and step.component and not step.state.finished:
                found = executor.observe_pool(spec, step.pool, step.component)
                if found is not None:
                    seen[(step.pool, step.component)] = found
        return operation.Observations(seen)

    def carry_out(
        self,
        decision: Decision,
        journal: Journal,
        spec: ClusterSpec,
        executor: Executor,
        now: datetime,
    ) -> PassResult:
        name = journal.cluster
        if decision.action is Action.IDLE:
            return PassResult(name, "idle")
        if decision.action is Action.WAIT:
            return PassResult(name, "wait", decision.reason, decision.until)
        if decision.action is Action.START:
            self.save(replace(journal, status=OperationStatus.RUNNING), f"{journal.op_id} started")
            return PassResult(name, "started", journal.op_id, now)
        if decision.action is Action.FINISH:
            done = replace(journal, status=OperationStatus.SUCCEEDED)
            self.save(done, f"{journal.kind} {journal.op_id} succeeded")
            return PassResult(name, "succeeded", journal.op_id)
        if decision.action is Action.REMEDIATE:
            return self.remediate(journal, spec, decision.reason or decision.step, now)
        if decision.action is Action.DRIVE_POOLS:
            return self.drive_pools(decision, journal, spec, executor, now)
        return self.run_step(journal.step(decision.step), journal, spec, executor, now)

    def run_step(
        self, step: Step, journal: Journal, spec: ClusterSpec, executor: Executor, now: datetime
    ) -> PassResult:
        if step.state is StepState.PENDING:
            step = replace(step, state=StepState.RUNNING, started_at=now, attempts=1)
            journal = self.save(journal.with_step(step), f"{step.name} started")
        elif step.state is StepState.RUNNING and step.started_at is None:
            step = replace(step, started_at=now)
        rollback_to = self._rollback_target(journal) if step.kind is StepKind.ROLLBACK else None
        outcome = executor.run(step, journal, spec, now=now, rollback_to=rollback_to)
        return self.record(outcome, step, journal, now)

    def _rollback_target(self, journal: Journal) -> RollbackPoint | None:
        undone = self.store.history(journal.cluster, journal.reverts_op)
        return undone.rollback_point if undone is not None else None

    def record(
        self, outcome: StepOutcome, step: Step, journal: Journal, now: datetime
    ) -> PassResult:
        if outcome.state is StepState.RUNNING:
            retry = now + timedelta(seconds=outcome.retry_after or 5)
            if outcome.detail != step.detail:
                journal = journal.with_step(replace(step, detail=outcome.detail))
                self.save(journal, f"{step.name}: {outcome.detail[:100]}")
            return PassResult(journal.cluster, "running", f"{step.name}: {outcome.detail}", retry)
        finished = replace(
            step,
            state=outcome.state,
            finished_at=now,
            detail=outcome.detail,
            effect=outcome.effect or step.effect,
        )
        journal = journal.with_step(finished)
        if outcome.rollback_point is not None and journal.rollback_point is None:
            journal = replace(journal, rollback_point=outcome.rollback_point)
        if outcome.state is StepState.FAILED:
            journal = replace(journal, failure=f"{step.name}: {outcome.detail}")
        self.save(journal, f"{step.name} {outcome.state}", files=dict(outcome.files))
        return PassResult(
            journal.cluster, str(outcome.state), f"{step.name}: {outcome.detail}", now
        )

    def drive_pools(
        self,
        decision: Decision,
        journal: Journal,
        spec: ClusterSpec,
        executor: Executor,
        now: datetime,
    ) -> PassResult:
        before = journal
        notes: list[str] = []
        # A finished phase lets the next pool or phase start: come back at once, not a poll later.
        advanced = False
        for ref, pd in decision.phases:
            step = journal.step(ref.step)
            phase = pd.phase
            if pd.action is rollout.PhaseAction.OPEN_SWITCH:
                executor.set_switch(
                    spec, ref.pool, ref.component, open_=True, batch_percentage=pd.batch_percentage
                )
            elif pd.action is rollout.PhaseAction.CLOSE_SWITCH or pd.close:
                executor.set_switch(spec, ref.pool, ref.component, open_=False)
            if pd.action is rollout.PhaseAction.VERIFY_CANARY:
                problems = executor.check(spec, [ref.pool], canary=True, component=ref.component)
                since = phase.last_progress_at or now
                settling = (now - since).total_seconds() < VERIFY_TIMEOUT_SECONDS
                if problems and settling:  # pods of the canary batch may still be starting
                    pd = replace(pd, action=rollout.PhaseAction.WAIT, reason="; ".join(problems))
                elif problems:
                    pd = replace(
                        pd, action=rollout.PhaseAction.HALT, reason="canary: " + "; ".join(problems)
                    )
                    phase = replace(phase, state=PhaseState.HALTED, halt_reason=pd.reason)
                else:
                    phase = replace(phase, canary_done=True, state=PhaseState.ROLLING)
            if step.state is StepState.PENDING and phase.state is not PhaseState.PENDING:
                step = replace(step, state=StepState.RUNNING, started_at=now, attempts=1)
            if phase.state is PhaseState.DONE:
                step = replace(step, state=StepState.SUCCEEDED, finished_at=now, detail=pd.reason)
                advanced = True
            elif pd.action is rollout.PhaseAction.HALT:
                step = replace(step, state=StepState.FAILED, finished_at=now, detail=pd.reason)
                journal = replace(journal, failure=f"{step.name}: {pd.reason}")
            elif pd.reason and pd.action is not rollout.PhaseAction.WAIT:
                step = replace(step, detail=pd.reason)
            journal = journal.with_step(step).with_phase(phase)
            notes.append(f"{ref.step} {pd.action} {phase.progress}%")
        if journal != before:
            self.save(journal, "; ".join(notes))
        until = now if advanced else decision.until
        return PassResult(journal.cluster, "pools", "; ".join(notes), until)

    def _close_switches(self, journal: Journal) -> None:
        spec = self.spec_at(journal.desired_sha, journal.cluster)
        if spec is None:
            return
        executor = self.executor_for(spec)
        for step in journal.steps:
            phase = journal.phase(step.name)
            if step.component and phase.state in (PhaseState.ROLLING, PhaseState.CANARY):
                try:
                    executor.set_switch(spec, step.pool, step.component, open_=False)
                except GitOpsBotError as e:
                    log.error("%s: could not close %s: %s", journal.cluster, step.name, e)

    # -- on failure -----------------------------------------------------------------------

    def remediate(
        self, journal: Journal, spec: ClusterSpec, reason: str, now: datetime
    ) -> PassResult:
        self._close_switches(journal)
        policy = spec.rollout.on_failure
        name = journal.cluster
        can_roll_back = (
            journal.kind is not OperationKind.ROLLBACK
            and journal.rollback_point is not None
            and journal.rollback_point.helm_revision > 0
        )
        if policy == "halt" or not can_roll_back:
            failed = replace(journal, status=OperationStatus.FAILED, remediation="halt")
            self.save(failed, f"{journal.op_id} failed and halted: {reason[:100]}")
            return PassResult(name, "failed", reason)
        message = (
            f'Revert "{name}: {journal.op_id}"\n\nThis reverts commit {journal.desired_sha}.\n\n'
            f"gitopsbot: {journal.kind} failed: {reason[:500]}"
        )
        watched = self.settings.watched_branch
        if policy == "rollback":
            # Resumable: each pass redoes what is missing. The revert commit is found again on
            # the watched branch by its "This reverts commit" line (a kill before the push, or
            # after it), never made twice; intake leaves the branch alone meanwhile.
            sha = self._revert_on_watched(journal)
            if sha is None:
                try:
                    sha = self.repo.revert_commit(watched, journal.desired_sha, message)
                except GitFailed as e:  # later changes conflict: a person decides
                    why = f"halt (no automatic revert: {e})"[:600]
                    log.error("%s: %s failed; %s", name, journal.op_id, why)
                    failed = replace(journal, status=OperationStatus.FAILED, remediation=why)
                    self.save(failed, f"{journal.op_id} failed; {why}")
                    return PassResult(name, "failed", f"{reason}; {why}")
            if journal.remediation != f"{REVERTING}{sha}":
                journal = replace(journal, remediation=f"{REVERTING}{sha}")
                self.save(journal, f"{journal.op_id} failed; revert {sha[:12]} committed")
            if not self.push:
                log.warning("%s: revert %s kept local (--no-push)", name, sha[:12])
                return self._start_rollback(
                    journal, spec, sha, now, seen=sha, note=" (local only: --no-push)"
                )
            try:
                # A transient failure escapes: the next pass pushes this same commit again.
                self.repo.push(watched)
            except PushRefused as refused:
                return self._refused_revert(journal, spec, reason, message, refused, now)
            # A replay onto a moved remote rewrites the commit: take the one pushed.
            sha = self._revert_on_watched(journal) or sha
            return self._start_rollback(journal, spec, sha, now, seen=sha)
        return self._revert_pull_request(journal, reason, message)

    def _revert_on_watched(self, journal: Journal) -> str | None:
        """The commit on the watched branch (local or pushed) that reverts this operation."""
        watched = self.settings.watched_branch
        for commit in reversed(self.repo.log(watched, journal.desired_sha, LOG_LIMIT)):
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
        failed = replace(
            journal,
            status=OperationStatus.FAILED,
            remediation=f"rollback:{rollback.op_id}{remediation}",
        )
        history = {
            f"{cluster_dir(name)}/history/{failed.op_id}.yaml": journal_mod.dumps(failed).encode()
        }
        text = (
            f"{journal.op_id} failed; rolling back by revert {sha[:12]}{note}{remediation}"
            f"\n\nrollback {rollback.op_id} started"
        )
        self.save(replace(rollback, status=OperationStatus.RUNNING), text, files=history, seen=seen)
        self.mirror(failed)
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
        watched = self.settings.watched_branch
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
        watched = self.settings.watched_branch
        try:
            self.repo.push(branch)
        except GitOpsBotError as e:
            log.error("%s: could not push %s: %s", journal.cluster, branch, e)
            return f"revert PR not opened: push of {branch} failed: {e}"[:600]
        if self.forge is None:
            return f"no forge configured: revert PR not opened; the revert is on branch {branch}"
        try:
            pr = self.forge.open_or_update_pull_request(
                branch=branch,
                base=watched,
                title=(
                    f"Revert {journal.cluster}: {journal.op_id} "
                    "(already rolled back: merge to make Git match)"
                ),
                body=(
                    f"The {journal.kind} failed: {reason}\n\n"
                    f"The cluster has ALREADY been rolled back (operation {rollback_id}), "
                    f"from this branch's revert commit: `{watched}` refused the bot's revert "
                    f"push ({refused}).\n\nMerging this pull request makes Git match the "
                    "cluster. The merge is recorded as seen; it does not roll back again."
                ),
                marker=f"revert/{journal.op_id}",
            )
        except ForgeError as e:
            log.error("%s: could not open the revert pull request: %s", journal.cluster, e)
            return f"revert PR not opened: {e}; the revert is on branch {branch}"[:600]
        log.info("%s: revert PR #%s opened for %s", journal.cluster, pr.number, journal.op_id)
        return f"revert-pr:#{pr.number}"

    def _retry_revert_pr(self, rollback: Journal, now: datetime) -> None:
        """The automatic rollback ran (or runs) but its revert pull request could not be
        opened (the forge was down, the branch push failed): try again, every
        REVERT_PR_RETRY, until Git can be made to match the cluster; then record it."""
        name = rollback.cluster
        if self.forge is None or not self.push or not rollback.reverts_op:
            return
        last = self._pr_retried.get(name)
        if last is not None and now - last < REVERT_PR_RETRY:
            return
        failed = self.store.history(name, rollback.reverts_op)
        if failed is None or failed.op_id == rollback.op_id:
            return
        text = failed.remediation
        if PR_NOT_OPENED not in text or REFUSED_PUSH not in text:
            return
        self._pr_retried[name] = now
        branch = f"gitopsbot/revert/{failed.op_id}"
        if self.repo.head(branch) is None:
            return  # the revert never reached a branch: nothing to propose
        why = "its words are in the state branch's log"
        outcome = self._open_refused_revert_pr(failed, branch, rollback.op_id, failed.failure, why)
        if not outcome.startswith("revert-pr:#"):
            log.warning("%s: revert PR still not opened: %s", name, outcome)
            return
        kept = text[: text.index(PR_NOT_OPENED)]
        if kept.endswith("no forge configured: "):  # a forge was configured since
            kept = kept[: -len("no forge configured: ")]
        updated = replace(failed, remediation=f"{kept}{outcome}")
        path = f"{cluster_dir(name)}/history/{failed.op_id}.yaml"
        self.store.commit(
            {path: journal_mod.dumps(updated).encode()},
            f"{name}: {failed.op_id}: {outcome} (retried)\n\nGitopsbot-Operation: {failed.op_id}",
        )
        self.mirror(updated)

    def _revert_branch(self, journal: Journal, message: str) -> str:
        """``gitopsbot/revert/<op id>``: the watched head plus the revert; its head sha. Made
        once; a later pass (a resume) finds it."""
        branch = f"gitopsbot/revert/{journal.op_id}"
        head = self.repo.head(branch)
        if head is not None:
            return head
        base = self.repo.head(self.settings.watched_branch)
        # A branch starts from the watched head; revert_commit adds the undo on top.
        self.repo.commit_files(branch, {}, f"Start revert of {journal.op_id}", parent=base)
        return self.repo.revert_commit(branch, journal.desired_sha, message)

    def _revert_pull_request(self, journal: Journal, reason: str, message: str) -> PassResult:
        if self.forge is None:
            failed = replace(journal, status=OperationStatus.FAILED, remediation="halt (no forge)")
            self.save(failed, f"{journal.op_id} failed; no forge for a revert PR")
            return PassResult(journal.cluster, "failed", reason)
        if not self.push:
            # A pull request needs its branch on the remote: skip it, and say so.
            why = "revert PR not opened: --no-push keeps the revert branch off the remote"
            failed = replace(journal, status=OperationStatus.FAILED, remediation=f"halt ({why})")
            self.save(failed, f"{journal.op_id} failed; {why}")
            return PassResult(journal.cluster, "failed", f"{reason}; {why}")
        watched = self.settings.watched_branch
        branch = f"gitopsbot/revert/{journal.op_id}"
        self._revert_branch(journal, message)
        try:
            self.repo.push(branch)
        except PushRefused as e:  # permanent: say why and stop, instead of failing each pass
            why = f"revert PR not opened: the remote refused {branch}: {e}"[:600]
            log.error("%s: %s", journal.cluster, why)
            failed = replace(journal, status=OperationStatus.FAILED, remediation=f"halt ({why})")
            self.save(failed, f"{journal.op_id} failed; {why}")
            return PassResult(journal.cluster, "failed", f"{reason}; {why}")
        try:
            pr = self.forge.open_or_update_pull_request(
                branch=branch,
                base=watched,
                title=f"Revert {journal.cluster}: {journal.op_id} ({journal.kind} failed)",
                body=f"The {journal.kind} failed: {reason}\n\nMerge this to roll back.",
                marker=f"revert/{journal.op_id}",
            )
        except ForgeError as e:
            raise PermanentError(f"could not open the revert pull request: {e}") from e
        failed = replace(
            journal, status=OperationStatus.FAILED, remediation=f"revert-pr:#{pr.number}"
        )
        self.save(failed, f"{journal.op_id} failed; revert PR #{pr.number} opened")
        return PassResult(journal.cluster, "revert-pr", f"#{pr.number}")
