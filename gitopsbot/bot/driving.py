"""Operation driving: observe → decide → execute one step → record.

1. **Decide** (pure): ``core.operations.operation.next_step(journal, observations, now)``.
2. **Execute** one step, or the pool switch changes, through ``bot.steps.executor``.
3. **Record**: a commit on the state branch for every transition that buys safety, mirrored
   on the pull request (one comment per operation, edited, and the ``gitopsbot/apply``
   status). A step's end and the next plain step's start share one commit
   (``PassBase.start_following``); a read-only step records no start of its own
   (``operation.READ_ONLY_STEPS``); a pool boundary closes one pool and opens the next in one.

Resume: a killed pass leaves the journal at its last recorded transition; the next pass runs
the step again, and the executor recognises an effect that already happened (the Helm
revision description), so no step that took effect is repeated.

Replicas (docs/leases.md): ``may_act(cluster)`` is asked before a step is carried out (and
before each further round of pool switch changes in a pass); a replica that no longer holds
the cluster's Lease stops there, at the step boundary.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from gitopsbot.bot import canary_marks_store, log_context
from gitopsbot.bot.pass_base import PassBase, PassResult
from gitopsbot.bot.pr_commands import take_commands
from gitopsbot.bot.reverts import Reverts
from gitopsbot.bot.steps.executor import Executor
from gitopsbot.bot.steps.outcome import VERIFY_TIMEOUT_SECONDS, StepOutcome
from gitopsbot.core.fleet.model import ClearedVersion, ClusterSpec, Component
from gitopsbot.core.forge import pr_commands
from gitopsbot.core.operations import operation, pass_decision, pause
from gitopsbot.core.operations.operation import Action, Decision
from gitopsbot.core.operations.pass_decision import OperationView
from gitopsbot.core.planning import reviewed_chart
from gitopsbot.core.records import canary_record, node_states
from gitopsbot.core.records.journal import (
    Journal,
    OperationKind,
    OperationStatus,
    PhaseProgress,
    PhaseState,
    RollbackPoint,
    Step,
    StepKind,
    StepState,
)
from gitopsbot.core.rollouts import phase_clock, phase_view, rollout, verify_wait, windows
from gitopsbot.core.waves import canary_marks
from gitopsbot.core.waves.canary_marks import CanaryFailure
from gitopsbot.errors import ConfigError

log = logging.getLogger(__name__)

# Rounds of pool decisions one pass may carry out: a finished phase lets the next phase or
# pool open in the same pass (one save); bounded so a pass never runs on.
POOL_ROUNDS = 4


@dataclass(frozen=True, slots=True)
class Drive:
    """What one pass's drive of an operation works with in every round: the operation's
    spec at its commit, the executor of its cluster, and who holds its pools (Git, the
    comments, a failed-version mark). The journal, the time and the decision move on
    from round to round and are passed beside it."""

    spec: ClusterSpec
    executor: Executor
    holds: pause.Holds = pause.NONE


class Driver:
    """Advances an active operation by one decision: a step, the pool switches, or the end.
    A failure is handed to ``reverts`` (``onFailure``)."""

    def __init__(self, ctx: PassBase, reverts: Reverts) -> None:
        self.ctx = ctx
        self.reverts = reverts

    def take_inputs(self, journal: Journal) -> Journal:
        """``journal`` with what a person said since the last pass recorded: the pull
        request's commands (``/gitopsbot pause``, ``resume``, ``approve``) and ``approve:``
        in rollout.yaml at the watched branch's head. Unchanged when the operation's cluster
        is not in the fleet at its commit (the pass fails it)."""
        spec = self.ctx.spec_at(journal.desired_sha, journal.cluster)
        if spec is None:
            return journal
        journal = take_commands(self.ctx, journal, spec, self.pause_holds(journal))
        return self.git_approvals(journal, spec)

    def observe_operation(self, journal: Journal) -> OperationView | None:
        """What the active operation's decision reads: its spec at its commit, the pools'
        windows, who holds what (Git at the head, the comments, a failed-version mark) and
        each unfinished pool phase's pool. None when its cluster is not in the fleet at its
        commit."""
        spec = self.ctx.spec_at(journal.desired_sha, journal.cluster)
        if spec is None:
            return None
        holds = pause.merged(self.git_pauses(journal), pause.from_comments(journal))
        return OperationView(
            spec=spec,
            pool_windows=self.ctx.pool_windows(spec),
            holds=holds,
            mark=self.standing_mark(journal),
            observations=self._observe(journal, spec, self.ctx.executor_for(spec)),
        )

    def pause_holds(self, journal: Journal) -> pause.Holds:
        """Who holds the operation outside its pull request: Git's pauses and a failed-version
        mark of its version (``core.operations.pass_decision.mark_holds``)."""
        mark = pass_decision.mark_holds(journal, self.standing_mark(journal))
        return pause.merged(self.git_pauses(journal), mark)

    def git_pauses(self, journal: Journal) -> pause.Holds:
        """Which pools Git holds now (docs/pause.md): ``paused:`` in rollout.yaml at the
        watched branch's head, read each pass so an edit reaches the running operation.
        When the head's fleet does not load, the holds the journal recorded stay."""
        head = self.ctx.repo.head(self.ctx.settings.watched_branch)
        if head is None:
            return pause.NONE
        try:
            spec = self.ctx.spec_at(head, journal.cluster)
        except ConfigError as e:
            log.warning(
                "%s: pauses kept as recorded: the fleet at %s: %s",
                journal.cluster,
                head[:12],
                str(e).splitlines()[:1],
            )
            return pause.recorded(journal)
        if spec is None:
            return pause.NONE
        where = f"clusters/{journal.cluster}/rollout.yaml at {head[:12]}"
        return pause.from_policy(spec.rollout, where)

    def git_approvals(self, journal: Journal, spec: ClusterSpec) -> Journal:
        """``journal`` with the approvals ``approve:`` in rollout.yaml at the watched branch's
        head gives it (docs/pause.md), recorded as a comment's are (``approved:``, one line
        in ``commands:`` naming the file and commit). Unchanged when the head cannot be read:
        an approval waits for a fleet that loads, it is never assumed."""
        head = self.ctx.repo.head(self.ctx.settings.watched_branch)
        if head is None:
            return journal
        try:
            at_head = self.ctx.spec_at(head, journal.cluster)
        except ConfigError:
            return journal
        if at_head is None:
            return journal
        tokens = pause.approved_in_git(journal, spec.rollout, at_head.rollout)
        if not tokens:
            return journal
        where = f"clusters/{journal.cluster}/rollout.yaml at {head[:12]}"
        line = f"{where}: approve {journal.op_id}: approved {', '.join(tokens)}"
        approved = replace(
            journal,
            approved=tuple(dict.fromkeys((*journal.approved, *tokens))),
            commands=(*journal.commands, line)[-pr_commands.MAX_RECORDED :],
        )
        log.info("%s: %s", journal.cluster, line)
        return self.ctx.save(approved, f"{journal.op_id}: {line}"[:300])

    def _cleared(self) -> tuple[ClearedVersion, ...]:
        """``clearedVersions`` as the watched branch's head says now (a person's entry
        releases a hold without a restart); the bot's settings when it cannot be read."""
        head = self.ctx.repo.head(self.ctx.settings.watched_branch)
        if head is None:
            return self.ctx.settings.cleared_versions
        try:
            return self.ctx.fleet_at(head).settings.cleared_versions
        except ConfigError:
            return self.ctx.settings.cleared_versions

    def standing_mark(self, journal: Journal) -> CanaryFailure | None:
        """The standing failed-version mark of the operation's chart version, if any: a GPU
        canary failed on it anywhere in the fleet (issue 18) and ``clearedVersions`` at the
        watched branch's head does not clear it. Whom it holds is decided
        (``core.operations.pass_decision.mark_holds``)."""
        marks, _ = canary_marks_store.read_canary_marks(self.ctx.repo, self.ctx.store.branch)
        if not marks:
            return None
        try:
            spec = self.ctx.spec_at(journal.desired_sha, journal.cluster)
        except ConfigError:
            return None
        if spec is None:
            return None
        return canary_marks.hold_for(spec.release.version, marks, self._cleared())

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
        drive: Drive,
        now: datetime,
        observations: operation.Observations | None = None,
    ) -> PassResult:
        """Carry out ``decision``, made at ``now`` on ``observations``."""
        name = journal.cluster
        if decision.action is Action.IDLE:
            return PassResult(name, "idle")
        if decision.action is Action.WAIT:
            waiting = journal.step(decision.step) if decision.step else None
            if waiting is not None and waiting.detail != decision.reason and self.ctx.may_act(name):
                # Why a step waits is recorded once per change of reason (a person's pause
                # holding a rotation's restart), so status and the pull request say it.
                said = replace(waiting, detail=decision.reason)
                self.ctx.save(journal.with_step(said), f"{waiting.name}: {decision.reason}"[:300])
            return PassResult(name, "wait", decision.reason, decision.until)
        if decision.action is Action.START:
            started, files = self.ctx.backed_up(
                replace(journal, status=OperationStatus.RUNNING), drive.spec, now
            )
            message = f"{journal.op_id} started" + ("; backup succeeded" if files else "")
            self.ctx.save(started, message, files=files)
            return PassResult(name, "started", journal.op_id, now)
        if decision.action is Action.FINISH:
            done = replace(journal, status=OperationStatus.SUCCEEDED)
            self.ctx.save(done, f"{journal.kind} {journal.op_id} succeeded")
            return PassResult(name, "succeeded", journal.op_id)
        if decision.action is Action.REMEDIATE:
            return self.reverts.remediate(
                journal, drive.spec, decision.reason or decision.step, now
            )
        if decision.action is Action.DRIVE_POOLS:
            return self.drive_pools(decision, journal, drive, now, observations)
        return self.run_step(journal.step(decision.step), journal, drive, now)

    def run_step(self, step: Step, journal: Journal, drive: Drive, now: datetime) -> PassResult:
        log_context.note(operation=journal.op_id, step=step.name)  # until the pass ends
        # A step the previous transition's commit already started (``PassBase.start_following``)
        # arrives RUNNING with its start recorded and pushed: it acts without another save.
        # A read-only step needs no recorded start (operation.READ_ONLY_STEPS): its start is
        # recorded with its outcome, or with its first RUNNING save.
        unrecorded = False
        if step.state is StepState.PENDING:
            step = replace(step, state=StepState.RUNNING, started_at=now, attempts=1)
            if operation.start_must_be_recorded(step.kind):
                journal = self.ctx.save(journal.with_step(step), f"{step.name} started")
            else:
                unrecorded = True
        elif step.state is StepState.RUNNING and step.started_at is None:
            step = replace(step, started_at=now)
        rollback_to = self._rollback_target(journal) if step.kind is StepKind.ROLLBACK else None
        if not self.ctx.may_act(journal.cluster):  # recording "started" outlasted the Lease
            return PassResult(journal.cluster, "paused", f"lease not held: {step.name} not run")
        outcome = drive.executor.run(step, journal, drive.spec, now=now, rollback_to=rollback_to)
        if not self.ctx.may_act(journal.cluster):
            # Lost while the step ran (its helm was stopped): the new holder runs the step
            # again and recognises what took effect; recording here could overwrite its work.
            return PassResult(journal.cluster, "paused", f"lease lost during {step.name}")
        return self.record(outcome, step, journal, now, unrecorded=unrecorded)

    def _rollback_target(self, journal: Journal) -> RollbackPoint | None:
        """The undone operation's rollback point, with the chart archive the operation that
        made its revision applied (docs/plan.md, "Rollbacks"): what a rollback that must
        upgrade instead of ``helm rollback`` installs, compared."""
        undone = self.ctx.store.history(journal.cluster, journal.reverts_op)
        point = undone.rollback_point if undone is not None else None
        if point is None or not point.helm_revision:
            return point
        store = self.ctx.store
        names = store.history_names(journal.cluster)
        earlier = (store.history(journal.cluster, n.removesuffix(".yaml")) for n in names)
        archive, by = reviewed_chart.applied_archive(
            (j for j in earlier if j is not None), point.helm_revision
        )
        return replace(point, chart_archive=archive, applied_by=by)

    def record(
        self,
        outcome: StepOutcome,
        step: Step,
        journal: Journal,
        now: datetime,
        *,
        unrecorded: bool = False,
    ) -> PassResult:
        """Record ``outcome``. ``unrecorded``: the step's start is not on the state branch
        yet (a read-only step run from PENDING), so a RUNNING outcome is saved even when its
        detail did not change, and its timeout counts from that start across restarts."""
        if outcome.state is StepState.RUNNING:
            retry = now + timedelta(seconds=outcome.retry_after or 5)
            if outcome.detail != step.detail or unrecorded:
                journal = journal.with_step(replace(step, detail=outcome.detail))
                self.ctx.save(journal, f"{step.name}: {outcome.detail[:100]}")
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
        if outcome.state is StepState.FAILED and outcome.blocked:
            # Nothing of the operation reached the release: no revert, no rollback.
            journal = replace(journal, status=OperationStatus.BLOCKED)
            self.ctx._close_switches(journal)
            self.ctx.save(journal, f"{step.name} failed before changing anything: blocked")
            return PassResult(journal.cluster, "blocked", f"{step.name}: {outcome.detail}")
        journal = self.ctx.start_following(journal)
        # Pushed with the next transition when only reads or pool changes follow
        # (``operation.push_may_wait``); the pass's end pushes it unless it comes back at once.
        self.ctx.save(
            journal,
            f"{step.name} {outcome.state}",
            files=dict(outcome.files),
            push=not operation.push_may_wait(journal),
        )
        return PassResult(
            journal.cluster, str(outcome.state), f"{step.name}: {outcome.detail}", now
        )

    def drive_pools(
        self,
        decision: Decision,
        journal: Journal,
        drive: Drive,
        now: datetime,
        observations: operation.Observations | None = None,
    ) -> PassResult:
        """Carry out ``decision``'s switch changes and checks, and record them in one save.
        A phase that finished lets the next phase or pool open: observed again and decided
        again in the same pass (at most POOL_ROUNDS rounds, the Lease asked before each), so
        a pool boundary costs one commit and no extra pass. The last phase done starts the
        step after the pools in the same commit (``PassBase.start_following``)."""
        spec = drive.spec
        before = journal
        notes: list[str] = []
        advanced = False  # a phase finished in some round
        for round_ in range(POOL_ROUNDS):
            if round_:
                now = self.ctx.clock.now()
                observations = self._observe(journal, spec, drive.executor)
                again = operation.next_step(
                    journal,
                    observations,
                    now,
                    policy=spec.rollout,
                    pool_windows=self.ctx.pool_windows(spec),
                    holds=drive.holds,
                )
                if again.action is not Action.DRIVE_POOLS:
                    break
                if not self.ctx.may_act(journal.cluster):
                    # Records nothing either: the new holder observes what this pass did
                    # (a closed switch, a pool synced) and records it itself.
                    return PassResult(
                        journal.cluster, "paused", "lease not held: next pool not opened"
                    )
                decision = again
            journal, finished = self._pool_round(decision, journal, drive, now, notes)
            advanced = advanced or finished
            if not finished or journal.failure:
                break
        # A pool still rolling beside the one that finished is decided again in each round:
        # say it once.
        notes = list(dict.fromkeys(notes))
        if journal != before:
            journal = self.ctx.start_following(journal)
            self.ctx.save(journal, "; ".join(notes))
        # After a finished phase, come back at once, not a poll later: to run the step after
        # the pools, or to look at (and wait on the watch of) the pool just opened.
        until = now if advanced else decision.until
        # Rolling pools: wait on their GPUPools' watch (a bounded slice) rather than sleep
        # to ``until``, so the pass after a batch comes when the controller moved it.
        # The wait compares with what the decision was made on, so a batch finished since
        # (while this pass saved) brings the next pass at once.
        rolling = [
            ref
            for ref, pd in decision.phases
            if pd.action is rollout.PhaseAction.WAIT and pd.phase.state is PhaseState.ROLLING
        ]
        observed = observations.pools if observations is not None else {}
        seen = {
            ref.pool: observed[(ref.pool, ref.component)].version
            for ref in rolling
            if (ref.pool, ref.component) in observed
        }
        if rolling and until is not None and until > now and not journal.failure:
            moved = drive.executor.await_pools(
                spec, [ref.pool for ref in rolling], (until - now).total_seconds(), seen=seen
            )
            until = now if moved else until
        return PassResult(journal.cluster, "pools", "; ".join(notes), until)

    def _pool_round(
        self, decision: Decision, journal: Journal, drive: Drive, now: datetime, notes: list[str]
    ) -> tuple[Journal, bool]:
        """One decision's switch changes and canary checks: the journal with their phases and
        steps, and whether a phase finished. Appends what it did to ``notes``."""
        spec, executor = drive.spec, drive.executor
        advanced = False
        for ref, pd in decision.phases:
            step = journal.step(ref.step)
            phase = pd.phase
            if pd.action is rollout.PhaseAction.OPEN_SWITCH:
                executor.set_switch(
                    spec,
                    ref.pool,
                    ref.component,
                    open_=True,
                    batch_percentage=pd.batch_percentage,
                    batch_interval_seconds=pd.batch_interval_seconds,
                )
            elif pd.action is rollout.PhaseAction.CLOSE_SWITCH or pd.close:
                executor.set_switch(
                    spec,
                    ref.pool,
                    ref.component,
                    open_=False,
                    batch_interval_seconds=pd.batch_interval_seconds,
                )
            if pd.action is rollout.PhaseAction.CHECK_GATES:
                # Gates are judged with the switch closed, between two batches (issue 18).
                pool_policy = next(p for p in spec.rollout.pools if p.name == ref.pool)
                judged = executor.judge_gates(spec, ref.pool, pool_policy.gates)
                pd = rollout.gates_judged(pool_policy, phase, judged, now)
                phase = pd.phase
                if pd.action is rollout.PhaseAction.WAIT and pd.until == now:
                    advanced = True  # passed: decide again in this pass, to open the batch
            if pd.action is rollout.PhaseAction.VERIFY_CANARY:
                # Judged against the operation's start: a pod Pending since before it is
                # reported, not blamed on the canary (core.verify_wait).
                problems = executor.check(
                    spec,
                    [ref.pool],
                    canary=True,
                    component=ref.component,
                    predates=journal.created_at,
                )
                window = self.ctx.pool_windows(spec).get(ref.pool)
                pool_policy = next(p for p in spec.rollout.pools if p.name == ref.pool)
                pd = verify_wait.judge(
                    policy=pool_policy,
                    decision=pd,
                    problems=problems,
                    now=now,
                    window=window,
                    timeout_seconds=VERIFY_TIMEOUT_SECONDS,
                )
                phase = pd.phase
                if pd.action is rollout.PhaseAction.VERIFY_CANARY:  # passed
                    pd, phase = self._gpu_canary(journal, drive, ref, pd, phase, now, window)
            if ref.component is Component.HYPERVISOR and phase.state is not PhaseState.PENDING:
                checked = phase.canary_done and not journal.phase(ref.step).canary_done
                checked = checked or phase.batches.gates_passed_at == now
                phase = self._node_states(drive, ref.pool, step, phase, pd, now, checked)
            hold_moved = phase.paused_by != journal.phase(ref.step).paused_by  # held, let go
            # A new reason to wait (recorded once per change, core.verify_wait): the step says it.
            wait_moved = phase.batches.waiting != journal.phase(ref.step).batches.waiting
            if step.state is StepState.PENDING and phase.state is not PhaseState.PENDING:
                step = replace(step, state=StepState.RUNNING, started_at=now, attempts=1)
            if phase.state is PhaseState.DONE:
                step = replace(step, state=StepState.SUCCEEDED, finished_at=now, detail=pd.reason)
                advanced = True
            elif pd.action is rollout.PhaseAction.HALT:
                step = replace(step, state=StepState.FAILED, finished_at=now, detail=pd.reason)
                journal = replace(journal, failure=f"{step.name}: {pd.reason}")
            elif pd.reason and (pd.action is not rollout.PhaseAction.WAIT or hold_moved):
                step = replace(step, detail=pd.reason)
            elif wait_moved and phase.batches.waiting:
                step = replace(step, detail=phase.batches.waiting)
            note = f"{ref.step} {pd.action} {phase.progress}%"
            if hold_moved:
                note += f" ({phase.paused_by or 'resumed'})"
            elif wait_moved:  # said once, in the journal's commit and the log
                note += f" ({phase.batches.waiting or 'no longer waiting'})"
            journal = journal.with_step(step).with_phase(phase)
            notes.append(note)
        return journal, advanced

    def _node_states(
        self,
        drive: Drive,
        pool: str,
        step: Step,
        phase: PhaseProgress,
        pd: rollout.PhaseDecision,
        now: datetime,
        checked: bool,
    ) -> PhaseProgress:
        """The phase with each node's state as seen now (issue 18, core.node_states): which
        batch took it, updated, verified once the canary check or the gates passed after
        it, failed with a halt (only those a batch took and that are not back), held while
        a gate, the window or a person keeps the switch closed. Recorded with the phase, so
        a restart resumes from it."""
        held = ""
        if phase.state in (PhaseState.BETWEEN, PhaseState.PAUSED):
            held = phase.batches.waiting or phase.paused_by or "switch closed"
        batch = phase_view.view(phase, step, now).batch
        records = node_states.advance(
            phase.nodes,
            drive.executor.node_snapshots(drive.spec, pool),
            batch=batch,
            gate_hold=held,
            now=now,
        )
        if checked:  # the canary check or the gates passed in this round
            updated = node_states.names_in(records, node_states.NodeState.UPDATED)
            records = node_states.verified(records, updated, now)
        if pd.action is rollout.PhaseAction.HALT:
            records = node_states.halted(records, pd.reason, now)
        return replace(phase, nodes=records)

    def _gpu_canary(
        self,
        journal: Journal,
        drive: Drive,
        ref: rollout.PhaseRef,
        pd: rollout.PhaseDecision,
        phase: PhaseProgress,
        now: datetime,
        window: windows.Window | None = None,
    ) -> tuple[rollout.PhaseDecision, PhaseProgress]:
        """After the canary batch's pods check out: the GPU-path smoke workload of
        ``canary-smoke.yaml`` through a worker on an updated node (issue 18). It gates the
        rest: running, the switch stays closed; failed, the pool halts and the version is
        marked failed on the state branch for every cluster and wave; passed (or none set),
        the rest of the pool rolls."""
        spec = drive.spec
        smoke = spec.canary_smoke
        pool = next((p for p in spec.rollout.pools if p.name == ref.pool), None)
        result = None
        if smoke is not None and pool is not None and smoke.applies_to(pool):
            started = phase.batches.started_at or phase.last_progress_at or now
            result = drive.executor.gpu_canary(spec, smoke, ref.pool, journal.op_id, now, started)
        if result is None or result.passed:
            note = f"; {result.message}" if result is not None else ""
            passed = replace(pd, reason=pd.reason + note)
            # The evidence stays with the phase: the step's detail is replaced by the next
            # batch's reason, and the pod is gone.
            kept = canary_record.of(result, now) if result is not None else None
            # The verify's clock stops with it; the next open starts the switch's.
            rolled = phase_clock.stop_clock(phase, now, PhaseState.ROLLING)
            rolled = replace(
                rolled,
                canary_done=True,
                canary=kept,
                batches=verify_wait.cleared(rolled.batches),
            )
            return passed, rolled
        if not result.failed:  # still running: look again
            reason = f"GPU canary: {result.message}"
            pool_policy = next(p for p in spec.rollout.pools if p.name == ref.pool)
            waited = verify_wait.waiting(pool_policy, phase, reason, now, window, None)
            return replace(pd, action=rollout.PhaseAction.WAIT, reason=result.message), waited
        phase = phase_clock.stop_clock(phase, now, phase.state)
        phase = replace(phase, canary=canary_record.of(result, now))
        why = f"GPU canary: {result.message}"
        if journal.kind is OperationKind.UPGRADE:
            failure = canary_marks.failure_of(
                result,
                version=spec.release.version,
                cluster=spec.name,
                pool=ref.pool,
                op_id=journal.op_id,
                at=now,
            )
            if failure is not None:
                canary_marks_store.record_canary_failure(
                    self.ctx.store, self.ctx.repo, failure, self._cleared()
                )
                why += f"; {spec.release.version} marked failed for every cluster and wave"
        halted = replace(phase, state=PhaseState.HALTED, halt_reason=why)
        return replace(pd, action=rollout.PhaseAction.HALT, reason=why), halted
