"""A cluster in mid-rollout with any two features in play, and what its pass decides.

The interaction matrix of docs/decisions.md is checked with it (tests/core/test_interactions.py):
each feature is a change to one ``World`` (one GPU pool of four nodes, an upgrade whose first
hypervisor batch is done at 50 %, about to open the next), and ``outcome`` is what the pass
decides from it, through the same pure functions the reconciler calls: ``pass_decision.decide``
and, where that asks the act phase to look (gates judged, the canary verified, the GPU canary,
a rotation's restart), the pure judgement of what the look finds (``rollout.gates_judged``,
``verify_wait.judge``, ``hypervisor_restart.decide``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta

from gitopsbot.core.fleet.model import (
    ClusterSpec,
    Component,
    Environment,
    MaintenanceWindow,
    PoolPolicy,
    ReleaseSpec,
    RolloutPolicy,
    Share,
)
from gitopsbot.core.operations import operation, pass_decision, pause
from gitopsbot.core.operations.pass_decision import OperationView, PassAction, Seen
from gitopsbot.core.records import journal as journal_yaml
from gitopsbot.core.records.batch_record import BatchRecord, GateNote
from gitopsbot.core.records.journal import (
    Journal,
    OperationKind,
    OperationStatus,
    PhaseProgress,
    PhaseState,
    StepState,
)
from gitopsbot.core.rollouts import hypervisor_restart, rollout, verify_wait, windows
from gitopsbot.core.rollouts.gates import PromQueryGate
from gitopsbot.core.rollouts.workload_wait import WorkloadAwareness, WorkloadSnapshot, WorkloadWait
from gitopsbot.core.rotation import credentials as rotation
from gitopsbot.core.waves.canary_marks import CanaryFailure

T0 = datetime(2026, 6, 10, 2, 0, tzinfo=UTC)  # a Wednesday, 02:00 UTC
NOW = T0 + timedelta(minutes=10)
VERSION = "1.8.7"
OP = "prod-0123456789ab"
GATE = PromQueryGate("error-rate", "sum(rate(errors[5m]))", "<", 0.05)
LATENCY = PromQueryGate("latency", "histogram_quantile(0.99, latency)", "<", 0.5)
WAVES_DENY = "gitopsbot.yaml:9: WAVES denied: wave production waits for canary"


class CannotMeet(Exception):
    """The two features are never in play at once (the reason says why)."""


@dataclass(frozen=True)
class World:
    kind: OperationKind = OperationKind.UPGRADE
    component: Component = Component.HYPERVISOR
    pool: PoolPolicy = field(
        default_factory=lambda: PoolPolicy("gpu", batch_percentage=50, nodes=4)
    )
    # "between": the first batch done at 50 %, the switch closed, the next batch due;
    # "verify": the canary batch done, verified now.
    at: str = "between"
    holds: pause.Holds = pause.NONE
    comment_holds: dict[str, str] = field(default_factory=dict)
    window: windows.Window | None = None
    lease: bool = True
    mark: CanaryFailure | None = None
    failed: bool = False
    waves: bool = False
    out_of_service: tuple[str, ...] = ()
    sessions: tuple[str, ...] = ()
    open_seconds: int = 0
    gates: tuple[GateNote, ...] = ()  # what judging the gates finds
    gpu_canary: str = ""  # "", "running" or "failed": what the GPU canary finds
    killed: bool = False  # the journal is the one read back from the state branch
    # Which features made it, for messages.
    made_by: tuple[str, ...] = ()


ONE_KIND = "an operation is a rollback or a rotation, not both: the second waits in the queue"


def _kind(w: World, kind: OperationKind, name: str) -> World:
    if w.kind is not OperationKind.UPGRADE and w.kind is not kind:
        raise CannotMeet(ONE_KIND)
    return replace(w, kind=kind)


def _pool(w: World, name: str, **changes: object) -> World:
    """``w`` with the pool's policy changed for feature ``name``."""
    return replace(w, pool=replace(w.pool, **changes))  # type: ignore[arg-type]


def rollback(w: World) -> World:
    if w.waves:
        raise CannotMeet(NEVER_HELD)
    return _kind(w, OperationKind.ROLLBACK, "rollback")


def rotation_(w: World) -> World:
    if w.waves:
        raise CannotMeet(NO_VERSION)
    return _kind(w, OperationKind.ROTATION, "rotation")


def _gate(w: World, gate: PromQueryGate, found: str, evidence: str) -> World:
    changed = _pool(w, gate.name, gates=(*w.pool.gates, gate))
    return replace(changed, gates=(*w.gates, GateNote(gate.name, found, evidence)))


def gate_fail(w: World) -> World:
    return _gate(w, GATE, "fail", "0.2 >= 0.05")


def gate_inconclusive(w: World) -> World:
    return _gate(w, LATENCY, "inconclusive", "Prometheus answered 503")


def pause_git(w: World) -> World:
    reason = "paused in Git (clusters/prod/rollout.yaml at 3f2a1b0c9d8e, pool gpu)"
    return replace(w, holds=pause.merged(w.holds, pause.Holds(pools={"gpu": reason})))


def pause_comment(w: World) -> World:
    return replace(w, comment_holds={"gpu": "paused by @alice (comment 17)"})


def approval(w: World) -> World:
    return _pool(w, "approval", require_approval="canary-batch", canary_batch_percentage=25)


NEVER_HELD = "waves never hold a revert: it goes back to a version the wave ran before"


NO_VERSION = (
    "waves hold a chart version; a rotation changes none. Merged on top of a held bump it is"
    " compared with the bump and waits in the queue behind it, the bump held as it was; they"
    " never make one upgrade (ROTATION-ALONE would refuse it, the bump lost with it): the row"
    " rotation × wave hold below"
)


def wave_hold(w: World) -> World:
    if w.kind is OperationKind.ROLLBACK:
        raise CannotMeet(NEVER_HELD)
    if w.kind is OperationKind.ROTATION:
        raise CannotMeet(NO_VERSION)
    return replace(w, waves=True)


def canary_mark(w: World) -> World:
    mark = CanaryFailure(VERSION, "staging", "gpu", "staging-aaaaaaaaaaaa", T0, "exit 1")
    return replace(w, mark=mark)


def window_closed(w: World) -> World:
    # Open 04:00-04:10 UTC daily: closed at 02:10.
    return replace(w, window=windows.Window.of(MaintenanceWindow("0 4 * * *", 600), UTC))


def deadline(w: World) -> World:
    # 5 minutes: a phase switched open for 15, a rotation's restart started 10 ago.
    return replace(_pool(w, "deadline", max_duration_seconds=300), open_seconds=900)


def budget(w: World) -> World:
    if w.component is not Component.HYPERVISOR:
        raise CannotMeet("budget: maxUnavailable bounds hypervisor batches, not worker/client")
    return replace(_pool(w, "budget", max_unavailable=Share(1)), out_of_service=("gpu-node-3",))


def workload_wait(w: World) -> World:
    if w.pool.max_unavailable is not None:
        raise CannotMeet(
            "workload wait: waitForWorkloads holds worker/client batches, the budget hypervisor"
        )
    wait = WorkloadWait("app=llm", "ml", "no-active-session", 3600, "halt")
    changed = _pool(
        w,
        "workload wait",
        auto_update_worker=True,
        phases=(Component.HYPERVISOR, Component.WORKER),
        workloads=WorkloadAwareness(wait=wait),
    )
    return replace(changed, component=Component.WORKER, sessions=("ml/llm-0",))


def gpu_canary(w: World) -> World:
    changed = _pool(w, "GPU canary", canary_batch_percentage=25)
    return replace(changed, at="verify", gpu_canary="failed")


def lease_lost(w: World) -> World:
    return replace(w, lease=False)


def bot_killed(w: World) -> World:
    return replace(w, killed=True)


def failed_step(w: World) -> World:
    return replace(w, failed=True)


FEATURES: dict[str, Callable[[World], World]] = {
    "rollback": rollback,
    "gate-fail": gate_fail,
    "gate-inconclusive": gate_inconclusive,
    "pause-git": pause_git,
    "pause-comment": pause_comment,
    "approval": approval,
    "wave-hold": wave_hold,
    "canary-mark": canary_mark,
    "rotation": rotation_,
    "window": window_closed,
    "deadline": deadline,
    "budget": budget,
    "workload-wait": workload_wait,
    "gpu-canary": gpu_canary,
    "lease-lost": lease_lost,
    "bot-killed": bot_killed,
}


def made(*names: str) -> World:
    w = World()
    for name in names:
        w = FEATURES[name](w)
        w = replace(w, made_by=(*w.made_by, name))
    return w


# -- the pass ---------------------------------------------------------------------------------


def _spec(w: World) -> ClusterSpec:
    release = ReleaseSpec("https://charts.invalid", "tensor-fusion", VERSION, "tf", "tf-system")
    return ClusterSpec(
        name="prod",
        environment=Environment.PRODUCTION,
        release=release,
        values={},
        rollout=RolloutPolicy(pools=(w.pool,)),
    )


def _journal(w: World, spec: ClusterSpec) -> Journal:
    credentials = (
        frozenset({rotation.Credential.GREPTIME_PASSWORD})
        if w.kind is OperationKind.ROTATION
        else frozenset()
    )
    j = operation.new_operation(
        kind=w.kind,
        cluster="prod",
        desired_sha="0123456789abcdef",
        created_at=T0,
        policy=spec.rollout,
        reverts_op="prod-000000000000" if w.kind is OperationKind.ROLLBACK else "",
        credentials=credentials,
    )
    j = replace(j, status=OperationStatus.RUNNING, holds=dict(w.comment_holds))
    target = (
        operation.hypervisor_restart_step("gpu")
        if w.kind is OperationKind.ROTATION
        else operation.phase_step_name("gpu", w.component)
    )
    for step in j.steps:
        if step.name == target:
            break
        j = j.with_step(replace(step, state=StepState.SUCCEEDED, started_at=T0, finished_at=T0))
    step = j.step(target)
    j = j.with_step(replace(step, state=StepState.RUNNING, started_at=T0, attempts=1))
    if w.kind is not OperationKind.ROTATION:
        j = j.with_phase(_phase(w, target))
    if w.failed:
        failed = replace(j.step(target), state=StepState.FAILED, detail="stalled")
        j = replace(j.with_step(failed), failure=f"{target}: stalled")
    if w.waves:
        j = replace(j, status=OperationStatus.BLOCKED, verdicts=(WAVES_DENY,))
    if w.killed:
        j = journal_yaml.loads(journal_yaml.dumps(j))
    return j


def _phase(w: World, step: str) -> PhaseProgress:
    canary = w.pool.canary_batch_percentage > 0
    if w.at == "verify":
        return PhaseProgress(
            step=step,
            state=PhaseState.CANARY_VERIFY,
            started_at=T0,
            opened_at=NOW - timedelta(seconds=30),
            open_seconds=w.open_seconds,
            progress=25,
            last_progress_at=NOW - timedelta(seconds=30),
            batches=BatchRecord(from_progress=25, started_at=NOW - timedelta(seconds=30)),
        )
    return PhaseProgress(
        step=step,
        state=PhaseState.BETWEEN,
        started_at=T0,
        open_seconds=w.open_seconds,
        progress=50,
        last_progress_at=NOW - timedelta(seconds=30),
        canary_done=canary,
        batches=BatchRecord(from_progress=50, started_at=NOW - timedelta(seconds=30)),
    )


def _observation(w: World) -> rollout.PoolObservation:
    return rollout.PoolObservation(
        progress=25 if w.at == "verify" else 50,
        synced=False,
        switch_open=False,
        nodes=4,
        current=False,
        units=2 if w.component is Component.WORKER else None,
        out_of_service=w.out_of_service,
        workload=(
            WorkloadSnapshot(workloads=("ml/llm",), sessions=w.sessions)
            if w.pool.workloads is not None
            else None
        ),
    )


def seen(w: World) -> Seen:
    spec = _spec(w)
    j = _journal(w, spec)
    observations = operation.Observations(
        {} if w.kind is OperationKind.ROTATION else {("gpu", w.component): _observation(w)}
    )
    view = OperationView(
        spec=spec,
        pool_windows={"gpu": w.window},
        holds=pause.merged(w.holds, pause.from_comments(j)),
        mark=w.mark,
        observations=observations,
    )
    return Seen(
        cluster="prod",
        now=NOW,
        current=j,
        operating=view if j.active else None,
        lease_held=w.lease,
    )


def outcome(w: World) -> str:
    """What the pass does, as the matrix writes it (docs/decisions.md#the-matrix)."""
    s = seen(w)
    d = pass_decision.decide(s)
    if d.action is PassAction.NOT_HOLDER:
        return "lease"
    if d.action is PassAction.REJUDGE:
        return "waves"
    assert d.action is PassAction.OPERATE and d.step is not None, d
    step = d.step
    if step.action is operation.Action.REMEDIATE:
        return "remediate"
    if step.action is operation.Action.WAIT and step.step:
        return _held(step.reason)
    if step.action is operation.Action.RUN_STEP:
        return _restart(w, s)
    assert step.action is operation.Action.DRIVE_POOLS, step
    ((_, pd),) = step.phases
    return _phase_outcome(w, pd)


def _held(reason: str) -> str:
    """Who holds, as the matrix writes it: every hold named in ``reason``."""
    found = [
        label
        for label, said in (
            ("paused", "paused "),
            ("approval", "awaiting approval"),
            ("mark", "GPU canary failed on"),
        )
        if said in reason
    ]
    assert found, f"held for an unknown reason: {reason}"
    return " + ".join(found)


def _restart(w: World, s: Seen) -> str:
    """A rotation's hypervisor restart, looked at: four old pods, all ready."""
    pods = [
        hypervisor_restart.HypervisorPod(f"hv-{i}", f"node-{i}", T0 - timedelta(days=1), True)
        for i in range(4)
    ]
    d = hypervisor_restart.decide(
        pods,
        pool="gpu",
        vector_on=True,
        started_at=T0,
        now=NOW,
        batch_percentage=w.pool.batch_percentage,
        batch_interval_seconds=w.pool.batch_interval_seconds,
        window_open=windows.is_open(w.window, NOW),
        window_opens_at=windows.next_open(w.window, NOW) if w.window is not None else None,
        max_duration_seconds=w.pool.max_duration_seconds,
        expected=4,
    )
    if d.action is hypervisor_restart.Action.DELETE:
        return "restart"
    if d.action is hypervisor_restart.Action.FAIL:
        return "deadline"
    if "maintenance window" in d.reason:
        return "window"
    raise AssertionError(d)


def _phase_outcome(w: World, pd: rollout.PhaseDecision) -> str:
    policy = operation.obeyed_by(w.pool, w.kind)
    if pd.action is rollout.PhaseAction.CHECK_GATES:
        pd = rollout.gates_judged(policy, pd.phase, w.gates, NOW)
        if pd.action is rollout.PhaseAction.HALT:
            return "gate fail"
        if pd.until is not None and pd.until > NOW:
            return "gate retry"
        return "opens"  # passed: the pass decides again at once and opens the batch
    if pd.action is rollout.PhaseAction.VERIFY_CANARY:
        pd = verify_wait.judge(
            policy=policy, decision=pd, problems=[], now=NOW, window=w.window, timeout_seconds=600
        )
        assert pd.action is rollout.PhaseAction.VERIFY_CANARY
        if w.gpu_canary == "failed":
            return "GPU canary fail"
        return "opens"
    if pd.action is rollout.PhaseAction.OPEN_SWITCH:
        return "opens"
    if pd.action is rollout.PhaseAction.HALT:
        if "maxDuration" in pd.reason:
            return "deadline"
        if "waitForWorkloads" in pd.reason:
            return "sessions"
        raise AssertionError(pd)
    if pd.phase.paused_by:
        return _held(pd.phase.paused_by)
    reason = pd.reason
    if "maintenance window" in reason:
        return "window"
    if "availability budget" in reason or "maxUnavailable" in reason:
        return "budget"
    if "active GPU session" in reason:
        return "sessions"
    raise AssertionError(f"{w.made_by}: {pd.action} {reason!r}")
