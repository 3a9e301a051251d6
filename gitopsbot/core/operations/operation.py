"""An operation's steps, and the pure decision of what to do next (Flux-style: decide, never
mutate).

``new_operation`` builds the journal of an upgrade, rollback, controller restart or
rollout-only change; ``next_step(journal, observations, now, ...)`` returns a ``Decision`` the
reconciler carries out through the ports and then records. Step order (R6-R16):

- upgrade: backup, crds, helm-upgrade, controller-ready, [controller-restart R24],
  pool/<pool>/<component>..., verify
- rollout-only (no chart version change): backup, helm-upgrade, controller-ready, pools, verify
- controller-restart (R24: only dynamicConfig / schedulerConfig changed): backup, helm-upgrade,
  controller-restart, controller-ready, verify
- rollback (R16): backup, rollback, controller-ready, pools, verify; CRDs are never touched
- rotation (R17-R20, core.rotation): backup, [helm-upgrade], [vendor-secret],
  [controller-restart], controller-ready, [agent-reconnect], [hypervisor-restart/<pool>...],
  verify
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from enum import StrEnum
from typing import Any

from gitopsbot.core.fleet.model import ClusterSpec, Component, PoolPolicy, RolloutPolicy
from gitopsbot.core.operations import pause
from gitopsbot.core.planning.plan import Plan
from gitopsbot.core.planning.plan import StepKind as PlanStep
from gitopsbot.core.records.journal import (
    Journal,
    OperationKind,
    OperationStatus,
    PhaseState,
    Step,
    StepKind,
    StepState,
)
from gitopsbot.core.rollouts import rollout, windows
from gitopsbot.core.rotation import credentials as rotation

HELM_DESCRIPTION = "gitopsbot op={op} step=helm-upgrade"


def helm_description(op_id: str) -> str:
    """The description the bot gives its Helm revision, so a restart recognises it."""
    return HELM_DESCRIPTION.format(op=op_id)


def operation_id(cluster: str, sha: str) -> str:
    """Deterministic: a restart that re-reads the same merge finds the same journal."""
    return f"{cluster}-{sha[:12]}"


def phase_step_name(pool: str, component: Component) -> str:
    return f"pool/{pool}/{component}"


def _pool_steps(policy: RolloutPolicy) -> list[Step]:
    steps: list[Step] = []
    for pool in policy.rollout_order():  # canaryPool first
        for component in rollout.phase_components(pool):
            steps.append(
                Step(
                    name=phase_step_name(pool.name, component),
                    kind=StepKind.POOL_PHASE,
                    pool=pool.name,
                    component=component,
                )
            )
    return steps


def rotation_steps(
    policy: RolloutPolicy, credentials: frozenset[rotation.Credential]
) -> tuple[Step, ...]:
    """A rotation's steps (core.rotation): only what rotating these credentials takes."""
    steps = [Step(name=str(StepKind.BACKUP), kind=StepKind.BACKUP)]
    if rotation.needs_helm_upgrade(credentials):
        steps.append(Step(name=str(StepKind.HELM_UPGRADE), kind=StepKind.HELM_UPGRADE))
    if rotation.Credential.VENDOR_KEYS in credentials:
        steps.append(Step(name=str(StepKind.VENDOR_SECRET), kind=StepKind.VENDOR_SECRET))
    if rotation.needs_controller_restart(credentials):
        steps.append(Step(name=str(StepKind.CONTROLLER_RESTART), kind=StepKind.CONTROLLER_RESTART))
    steps.append(Step(name=str(StepKind.CONTROLLER_READY), kind=StepKind.CONTROLLER_READY))
    if rotation.Credential.AGENT_TOKEN in credentials:
        steps.append(Step(name=str(StepKind.AGENT_RECONNECT), kind=StepKind.AGENT_RECONNECT))
    if rotation.Credential.GREPTIME_PASSWORD in credentials:
        for pool in policy.ordered_pools():
            steps.append(
                Step(
                    name=hypervisor_restart_step(pool.name),
                    kind=StepKind.HYPERVISOR_RESTART,
                    pool=pool.name,
                )
            )
    steps.append(Step(name=str(StepKind.VERIFY), kind=StepKind.VERIFY))
    return tuple(steps)


def hypervisor_restart_step(pool: str) -> str:
    return f"hypervisor-restart/{pool}"


def build_steps(
    kind: OperationKind,
    policy: RolloutPolicy,
    *,
    crds: bool = True,
    restart: bool = False,
    credentials: frozenset[rotation.Credential] = frozenset(),
) -> tuple[Step, ...]:
    """The step list of an operation. ``crds``: the target chart ships CRDs to apply (R7);
    ``restart``: R24 applies (a controller restart after the upgrade); ``credentials``: what
    a rotation rotates."""
    if kind is OperationKind.ROTATION:
        return rotation_steps(policy, credentials)

    def s(kind_: StepKind) -> Step:
        return Step(name=str(kind_), kind=kind_)

    backup, ready, verify = s(StepKind.BACKUP), s(StepKind.CONTROLLER_READY), s(StepKind.VERIFY)
    upgrade, bounce = s(StepKind.HELM_UPGRADE), s(StepKind.CONTROLLER_RESTART)
    pools = _pool_steps(policy)
    if kind is OperationKind.ROLLBACK:
        return (backup, s(StepKind.ROLLBACK), ready, *pools, verify)
    if kind is OperationKind.CONTROLLER_RESTART:
        return (backup, upgrade, bounce, ready, verify)
    head = [backup]
    if kind is OperationKind.UPGRADE and crds:
        head.append(s(StepKind.CRDS))
    head += [upgrade, ready]
    if restart:
        head += [
            bounce,
            Step(name="controller-ready-after-restart", kind=StepKind.CONTROLLER_READY),
        ]
    return (*head, *pools, verify)


# R24: a change to these values needs a controller restart that helm upgrade does not do.
RESTART_KEYS = ("dynamicConfig", "schedulerConfig")


@dataclass(frozen=True, slots=True)
class Shape:
    """What kind of operation a change needs, and which optional steps."""

    kind: OperationKind
    crds: bool = True
    restart: bool = False
    # What a ROTATION rotates (core.rotation).
    credentials: frozenset[rotation.Credential] = frozenset()


def _leaves(value: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    if isinstance(value, Mapping) and value:
        for key, child in value.items():
            yield from _leaves(child, f"{prefix}.{key}" if prefix else str(key))
    else:
        yield prefix, value


def changed_paths(
    before: Mapping[str, Any], after: Mapping[str, Any], *, ignore: Collection[str] = ()
) -> set[str]:
    """Dotted leaf paths whose value differs (lists compare whole). ``ignore``: paths (and
    their children) left out, e.g. the secret paths Git never holds."""
    a, b = dict(_leaves(before)), dict(_leaves(after))
    changed = {p for p in a.keys() | b.keys() if a.get(p) != b.get(p)}
    return {p for p in changed if not any(p == i or p.startswith(i + ".") for i in ignore)}


def classify_change(
    *,
    deployed_chart: str | None,
    target_chart: str,
    changed: Collection[str],
    rotated: frozenset[rotation.Credential] = frozenset(),
) -> Shape:
    """The operation a change needs. A chart version change (or a first install) is an
    upgrade with CRDs; otherwise a rotation when credentials rotate and no value changed
    (core.rotation; with other changes the apply gate refuses it, ROTATION-ALONE), a
    rollout-only change, or a controller restart (R24) when only dynamicConfig /
    schedulerConfig changed."""
    if deployed_chart is None or deployed_chart != target_chart:
        return Shape(OperationKind.UPGRADE, crds=True)
    if rotated and not changed:
        return Shape(OperationKind.ROTATION, crds=False, credentials=rotated)

    def r24(path: str) -> bool:
        return any(path == k or path.startswith(k + ".") for k in RESTART_KEYS)

    touched = any(r24(p) for p in changed)
    if touched and all(r24(p) for p in changed):
        return Shape(OperationKind.CONTROLLER_RESTART, crds=False, restart=True)
    return Shape(OperationKind.ROLLOUT_ONLY, crds=False, restart=touched)


def shape_between(before: ClusterSpec, after: ClusterSpec) -> Shape | None:
    """The operation that takes a cluster from ``before``'s files to ``after``'s (values at
    secret paths left out, credentials compared for a rotation); None when nothing differs."""
    secret_paths = [r.values_path for r in after.credentials.secrets]
    changed = changed_paths(before.values, after.values, ignore=secret_paths)
    rotated = rotation.rotated(before.credentials, after.credentials)
    if not changed and not rotated and before.release.version == after.release.version:
        return None
    return classify_change(
        deployed_chart=before.release.version,
        target_chart=after.release.version,
        changed=changed,
        rotated=rotated,
    )


def shape_of_plan(plan: Plan) -> Shape:
    """The operation a rendered plan describes (its steps say CRDs and R24)."""
    kinds = {s.kind for s in plan.steps}
    crds, restart = PlanStep.CRDS in kinds, PlanStep.CONTROLLER_RESTART in kinds
    if plan.versions.chart_before != plan.versions.chart_after:
        return Shape(OperationKind.UPGRADE, crds=crds, restart=restart)
    if restart and PlanStep.POOL_ROLLOUT not in kinds:
        return Shape(OperationKind.CONTROLLER_RESTART, crds=False, restart=True)
    return Shape(OperationKind.ROLLOUT_ONLY, crds=crds, restart=restart)


def new_operation(
    *,
    kind: OperationKind,
    cluster: str,
    desired_sha: str,
    created_at: datetime,
    policy: RolloutPolicy,
    pr_number: int | None = None,
    crds: bool = True,
    restart: bool = False,
    reverts_op: str = "",
    base_sha: str = "",
    credentials: frozenset[rotation.Credential] = frozenset(),
) -> Journal:
    return Journal(
        op_id=operation_id(cluster, desired_sha),
        kind=kind,
        cluster=cluster,
        desired_sha=desired_sha,
        created_at=created_at,
        pr_number=pr_number,
        steps=build_steps(kind, policy, crds=crds, restart=restart, credentials=credentials),
        reverts_op=reverts_op,
        base_sha=base_sha,
    )


class Action(StrEnum):
    IDLE = "idle"  # nothing to do (no active operation)
    WAIT = "wait"  # queued, or waiting for a window; come back at ``until``
    START = "start"  # a queued operation may start now
    RUN_STEP = "run-step"  # run ``step`` through the executor
    DRIVE_POOLS = "drive-pools"  # carry out ``phases`` (switch changes, canary checks)
    REMEDIATE = "remediate"  # a step failed or a rollout halted: apply rollout.on_failure
    FINISH = "finish"  # every step succeeded or was skipped


@dataclass(frozen=True, slots=True)
class Observations:
    """What the reconciler observed this pass, keyed (pool, component)."""

    pools: Mapping[tuple[str, Component], rollout.PoolObservation] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Decision:
    action: Action
    step: str = ""
    phases: tuple[tuple[rollout.PhaseRef, rollout.PhaseDecision], ...] = ()
    until: datetime | None = None
    reason: str = ""


def next_step(
    journal: Journal | None,
    observations: Observations,
    now: datetime,
    *,
    policy: RolloutPolicy,
    pool_windows: Mapping[str, windows.Window | None],
    holds: pause.Holds = pause.NONE,
) -> Decision:
    """What the reconciler should do next for this journal. ``holds``: the pools a person
    holds (core.pause), read by the caller from the watched branch's head. Pure."""
    if journal is None or not journal.active:
        return Decision(Action.IDLE)
    if journal.status is OperationStatus.QUEUED:
        until = journal.queue.queued_until
        if until is not None and now < until:
            return Decision(Action.WAIT, until=until, reason="queued until the window opens")
        return Decision(Action.START)
    failed = next((s for s in journal.steps if s.state is StepState.FAILED), None)
    if failed is not None:
        return Decision(Action.REMEDIATE, step=failed.name, reason=failed.detail)
    pending = next((s for s in journal.steps if not s.state.finished), None)
    if pending is None:
        return Decision(Action.FINISH)
    if pending.kind is StepKind.HYPERVISOR_RESTART and holds.reason(pending.pool):
        # A rotation's restart deletes the pool's hypervisor pods: a person's pause holds it
        # between two batches as it holds a rollout's switch (docs/decisions.md).
        reason = f"paused: {holds.reason(pending.pool)}"
        return Decision(Action.WAIT, step=pending.name, until=now + rollout.POLL, reason=reason)
    if pending.kind is not StepKind.POOL_PHASE:
        return Decision(Action.RUN_STEP, step=pending.name)
    return _drive_pools(journal, observations, now, policy, pool_windows, holds)


# Steps that only read the cluster (backup writes only the state branch, with its outcome).
# Run again after a kill, they do no harm, and nothing recovers by their start time, so they
# run from PENDING without a "started" commit: started_at is kept in memory and recorded with
# the outcome, or with the first RUNNING save (controller-ready's and verify's timeouts then
# count from it across restarts; killed before any save, the read just starts over).
# verify's smoke-test Pod is found again by its name, not by the step's start.
# crds, helm-upgrade, controller-restart and rollback change the cluster: their start is
# pushed before they act, so a restart knows they may have taken effect (helm-upgrade and
# rollback recognise their revision as written after it; controller-restart's annotation is it).
READ_ONLY_STEPS: frozenset[StepKind] = frozenset(
    {StepKind.BACKUP, StepKind.CONTROLLER_READY, StepKind.VERIFY, StepKind.AGENT_RECONNECT}
)


def start_must_be_recorded(kind: StepKind) -> bool:
    """Whether a step of ``kind`` must have its start committed and pushed before it acts
    (it changes the cluster; see READ_ONLY_STEPS). Pure."""
    return kind not in READ_ONLY_STEPS


def push_may_wait(journal: Journal) -> bool:
    """Whether the record of ``journal``, just after a step ended, may wait in the bot's
    mirror for the next transition's push instead of being pushed before the bot goes on
    (#13). True when what comes next only reads the cluster (a READ_ONLY_STEPS step) or
    drives the pools (switch changes are recorded after they happen and recognised from the
    cluster after a restart): lost in a crash, the record costs that read again, nothing
    more. False when the next step changes the cluster (its start must be pushed before it
    acts), when the operation ended, or when a step failed. Pure."""
    if journal.status is not OperationStatus.RUNNING:
        return False
    if any(s.state is StepState.FAILED for s in journal.steps):
        return False
    pending = next((s for s in journal.steps if not s.state.finished), None)
    if pending is None:
        return False
    return pending.kind in READ_ONLY_STEPS or pending.kind is StepKind.POOL_PHASE


def following_step(journal: Journal) -> Step | None:
    """The plain step ``next_step`` would run next on this running journal whatever the
    observations, policy and windows (no failed step, the first unfinished step pending and
    not a pool phase); None otherwise. Lets a step's end and the next step's start be
    recorded in one state-branch commit (for a read-only step too: its recorded start costs
    nothing there and lets its timeout count from it). Pure."""
    if journal.status is not OperationStatus.RUNNING:
        return None
    if any(s.state is StepState.FAILED for s in journal.steps):
        return None
    pending = next((s for s in journal.steps if not s.state.finished), None)
    if pending is None or pending.kind is StepKind.POOL_PHASE:
        return None
    return pending if pending.state is StepState.PENDING else None


def obeyed_by(pool: PoolPolicy, kind: OperationKind) -> PoolPolicy:
    """The pool's policy as an operation of ``kind`` obeys it (docs/decisions.md#precedence).

    A rollback goes back to what ran before without the checks an upgrade must pass: no gate,
    no availability budget, no workload wait, no canary batch (so no canary verify, GPU
    canary or approval after it) and no ``maxDuration``. Each of them may be the very thing
    the failed upgrade broke (the gate's metric, the nodes out of service, the sessions that
    do not end), and judged again it would halt or hold its own rollback and leave the
    cluster half-reverted. Argo Rollouts' abort returns to stable the same way, without
    analysis or steps. What a rollback still obeys: the maintenance window and a person's
    pause (the caller's holds), the batch size and interval, the stall timeout (a rollback
    that makes no progress is a failure a person must see), and the hard safety rules
    outside the pools (CRDs are never downgraded, R16)."""
    if kind is not OperationKind.ROLLBACK:
        return pool
    return replace(
        pool,
        gates=(),
        max_unavailable=None,
        workloads=None,
        canary_batch_percentage=0,
        require_approval="",
        max_duration_seconds=None,
    )


def _drive_pools(
    journal: Journal,
    observations: Observations,
    now: datetime,
    policy: RolloutPolicy,
    pool_windows: Mapping[str, windows.Window | None],
    holds: pause.Holds,
) -> Decision:
    refs = [
        rollout.PhaseRef(s.name, s.pool, s.component)
        for s in journal.steps
        if s.kind is StepKind.POOL_PHASE and s.component is not None
    ]
    states = {
        s.name: PhaseState.DONE if s.state.finished else journal.phase(s.name).state
        for s in journal.steps
        if s.kind is StepKind.POOL_PHASE
    }
    # Approvals are decided here, on the journal as it is now: a canary pool finishing in
    # one round of a pass holds the next pool in the next round.
    holds = pause.merged(holds, pause.approval_holds(journal, policy))
    pools = {p.name: obeyed_by(p, journal.kind) for p in policy.pools}
    decided: list[tuple[rollout.PhaseRef, rollout.PhaseDecision]] = []
    waits: list[datetime] = []
    for ref in rollout.runnable_phases(policy, refs, states):
        seen = observations.pools.get((ref.pool, ref.component))
        pool = pools.get(ref.pool)
        if seen is None or pool is None:
            waits.append(now + rollout.POLL)
            continue
        d = rollout.decide_phase(
            policy=pool,
            component=ref.component,
            observed=seen,
            phase=journal.phase(ref.step),
            now=now,
            window=pool_windows.get(ref.pool),
            held=holds.reason(ref.pool),
        )
        decided.append((ref, d))
        if d.until is not None:
            waits.append(d.until)
    until = min(waits) if waits else None
    if not decided:
        return Decision(Action.WAIT, until=until, reason="waiting for pool status")
    return Decision(Action.DRIVE_POOLS, phases=tuple(decided), until=until)
