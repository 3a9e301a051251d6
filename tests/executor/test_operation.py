"""Operation step lists per kind (CRDs skipped for rollbacks, R24 restart, F3 phases only,
canary pool first) and next_step as a table: queued/wait/start, first unfinished step, a
failed step → remediate, pools driven through the rollout machine, finish."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from gitopsbot.core.fleet.model import Component, MaintenanceWindow, PoolPolicy, RolloutPolicy
from gitopsbot.core.operations import operation
from gitopsbot.core.operations.operation import Action
from gitopsbot.core.records.journal import (
    OperationKind,
    OperationStatus,
    PhaseState,
    QueueState,
    StepState,
)
from gitopsbot.core.rollouts import windows
from gitopsbot.core.rollouts.gates import PromQueryGate
from gitopsbot.core.rollouts.rollout import PhaseAction, PoolObservation

T0 = datetime(2026, 6, 10, 2, 0, tzinfo=UTC)
POLICY = RolloutPolicy(
    pools=(
        PoolPolicy("a", auto_update_worker=True, phases=(Component.HYPERVISOR, Component.WORKER)),
        PoolPolicy("b"),
    ),
    canary_pool="b",
)


def names(kind: OperationKind, **kw) -> list[str]:
    return [s.name for s in operation.build_steps(kind, POLICY, **kw)]


@pytest.mark.parametrize(
    ("kind", "kw", "expected"),
    [
        (
            OperationKind.UPGRADE,
            {},
            [
                "backup",
                "crds",
                "helm-upgrade",
                "controller-ready",
                "pool/b/hypervisor",
                "pool/a/hypervisor",
                "pool/a/worker",
                "verify",
            ],
        ),
        (
            OperationKind.UPGRADE,
            {"crds": False, "restart": True},
            [
                "backup",
                "helm-upgrade",
                "controller-ready",
                "controller-restart",
                "controller-ready-after-restart",
                "pool/b/hypervisor",
                "pool/a/hypervisor",
                "pool/a/worker",
                "verify",
            ],
        ),
        (
            OperationKind.ROLLBACK,
            {},
            [
                "backup",
                "rollback",
                "controller-ready",
                "pool/b/hypervisor",
                "pool/a/hypervisor",
                "pool/a/worker",
                "verify",
            ],
        ),
        (
            OperationKind.CONTROLLER_RESTART,
            {},
            ["backup", "helm-upgrade", "controller-restart", "controller-ready", "verify"],
        ),
        (
            OperationKind.ROLLOUT_ONLY,
            {},
            [
                "backup",
                "helm-upgrade",
                "controller-ready",
                "pool/b/hypervisor",
                "pool/a/hypervisor",
                "pool/a/worker",
                "verify",
            ],
        ),
    ],
    ids=["upgrade", "upgrade-no-crds-r24", "rollback", "controller-restart", "rollout-only"],
)
def test_step_lists(kind, kw, expected) -> None:
    assert names(kind, **kw) == expected


def test_operation_id_is_deterministic_and_helm_description_names_it() -> None:
    j = operation.new_operation(
        kind=OperationKind.UPGRADE,
        cluster="prod",
        desired_sha="0123456789abcdef",
        created_at=T0,
        policy=POLICY,
    )
    assert j.op_id == "prod-0123456789ab"
    assert operation.helm_description(j.op_id) == "gitopsbot op=prod-0123456789ab step=helm-upgrade"


def journal():
    return operation.new_operation(
        kind=OperationKind.UPGRADE,
        cluster="prod",
        desired_sha="abc",
        created_at=T0,
        policy=POLICY,
    )


def finish(j, *steps, state=StepState.SUCCEEDED):
    for name in steps:
        j = j.with_step(replace(j.step(name), state=state))
    return j


def nxt(j, obs=None, now=T0, pool_windows=None):
    return operation.next_step(
        j, obs or operation.Observations(), now, policy=POLICY, pool_windows=pool_windows or {}
    )


def test_none_or_finished_is_idle() -> None:
    assert nxt(None).action is Action.IDLE
    assert nxt(replace(journal(), status=OperationStatus.SUCCEEDED)).action is Action.IDLE


def test_queued_waits_then_starts() -> None:
    q = replace(journal(), status=OperationStatus.QUEUED, queue=QueueState(T0 + timedelta(hours=1)))
    d = nxt(q)
    assert (d.action, d.until) == (Action.WAIT, T0 + timedelta(hours=1))
    assert nxt(q, now=T0 + timedelta(hours=1)).action is Action.START


def test_steps_run_in_order_skipped_counts_as_finished() -> None:
    j = journal()
    assert (nxt(j).action, nxt(j).step) == (Action.RUN_STEP, "backup")
    j = finish(j, "backup")
    j = finish(j, "crds", state=StepState.SKIPPED)
    assert nxt(j).step == "helm-upgrade"


def test_failed_step_remediates() -> None:
    j = finish(journal(), "backup")
    j = j.with_step(replace(j.step("crds"), state=StepState.FAILED, detail="storedVersions"))
    d = nxt(j)
    assert (d.action, d.step, d.reason) == (Action.REMEDIATE, "crds", "storedVersions")


def test_pools_are_driven_canary_pool_first() -> None:
    j = finish(journal(), "backup", "crds", "helm-upgrade", "controller-ready")
    seen = {
        ("b", Component.HYPERVISOR): PoolObservation(0, False, False, nodes=2),
        ("a", Component.HYPERVISOR): PoolObservation(0, False, False, nodes=2),
    }
    d = nxt(j, operation.Observations(seen))
    assert d.action is Action.DRIVE_POOLS
    assert [(r.step, pd.action) for r, pd in d.phases] == [
        ("pool/b/hypervisor", PhaseAction.OPEN_SWITCH)
    ]


def test_pool_waiting_for_its_window() -> None:
    j = finish(journal(), "backup", "crds", "helm-upgrade", "controller-ready")
    w = windows.Window.of(MaintenanceWindow("0 4 * * *", 600), UTC)
    seen = {("b", Component.HYPERVISOR): PoolObservation(0, False, False, nodes=2)}
    d = nxt(j, operation.Observations(seen), pool_windows={"b": w})
    assert d.phases[0][1].action is PhaseAction.WAIT
    assert d.until == T0 + timedelta(hours=2)


def test_missing_observation_waits() -> None:
    j = finish(journal(), "backup", "crds", "helm-upgrade", "controller-ready")
    assert nxt(j).action is Action.WAIT


def test_all_done_finishes() -> None:
    j = journal()
    j = finish(j, *[s.name for s in j.steps])
    assert nxt(j).action is Action.FINISH
    assert j.phase("pool/b/hypervisor").state is PhaseState.PENDING  # phases untouched


# -- what a change needs -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("deployed", "target", "changed", "expected"),
    [
        (None, "1.0.0", set(), operation.Shape(OperationKind.UPGRADE, crds=True)),
        ("1.0.0", "1.1.0", {"cluster.hypervisorImage"}, operation.Shape(OperationKind.UPGRADE)),
        (
            "1.0.0",
            "1.0.0",
            {"dynamicConfig.metricsTTL"},
            operation.Shape(OperationKind.CONTROLLER_RESTART, crds=False, restart=True),
        ),
        (
            "1.0.0",
            "1.0.0",
            {"schedulerConfig", "dynamicConfig.x"},
            operation.Shape(OperationKind.CONTROLLER_RESTART, crds=False, restart=True),
        ),
        (
            "1.0.0",
            "1.0.0",
            {"cluster.hypervisorImage"},
            operation.Shape(OperationKind.ROLLOUT_ONLY, crds=False),
        ),
        (
            "1.0.0",
            "1.0.0",
            {"cluster.hypervisorImage", "dynamicConfig.metricsTTL"},
            operation.Shape(OperationKind.ROLLOUT_ONLY, crds=False, restart=True),
        ),
        (
            "1.0.0",
            "1.0.0",
            {"dynamicConfigs.x"},  # a prefix of the name is not the key
            operation.Shape(OperationKind.ROLLOUT_ONLY, crds=False),
        ),
    ],
    ids=[
        "first-install",
        "chart",
        "r24-dynamic",
        "r24-both",
        "rollout-only",
        "rollout-and-r24",
        "not-r24",
    ],
)
def test_classify_change(deployed, target, changed, expected) -> None:
    assert (
        operation.classify_change(deployed_chart=deployed, target_chart=target, changed=changed)
        == expected
    )


def test_changed_paths_ignores_secret_paths() -> None:
    before = {"agent": {"enrollToken": "***", "agentId": "a"}, "x": [1, 2], "y": {"z": 1}}
    after = {"agent": {"agentId": "b"}, "x": [1, 2], "y": {"z": 1, "w": 2}}
    assert operation.changed_paths(before, after, ignore=["agent.enrollToken"]) == {
        "agent.agentId",
        "y.w",
    }


def test_rollout_only_with_r24_restarts_the_controller() -> None:
    steps = [
        s.name for s in operation.build_steps(OperationKind.ROLLOUT_ONLY, POLICY, restart=True)
    ]
    assert steps[:5] == [
        "backup",
        "helm-upgrade",
        "controller-ready",
        "controller-restart",
        "controller-ready-after-restart",
    ]


# -- a rollback is not judged by gates (issue 28 item 1) -------------------------------------

GATE = PromQueryGate("error-rate", "sum(rate(errors[5m]))", "<", 0.05)
GATED = RolloutPolicy(pools=(PoolPolicy("a", batch_percentage=50, gates=(GATE,)),))


def _at_pools(kind: OperationKind) -> object:
    j = operation.new_operation(
        kind=kind, cluster="prod", desired_sha="abc", created_at=T0, policy=GATED,
        reverts_op="prod-000000000000" if kind is OperationKind.ROLLBACK else "",
    )  # fmt: skip
    j = finish(j, *[s.name for s in j.steps if not s.name.startswith("pool/")])
    seen = {("a", Component.HYPERVISOR): PoolObservation(0, False, False, nodes=2)}
    return operation.next_step(j, operation.Observations(seen), T0, policy=GATED, pool_windows={})


def test_an_upgrade_judges_its_gates_before_the_first_batch() -> None:
    d = _at_pools(OperationKind.UPGRADE)
    assert [pd.action for _, pd in d.phases] == [PhaseAction.CHECK_GATES]  # type: ignore[attr-defined]


def test_a_rollback_opens_the_batch_without_judging_the_gates_that_failed_the_upgrade() -> None:
    d = _at_pools(OperationKind.ROLLBACK)
    assert [pd.action for _, pd in d.phases] == [PhaseAction.OPEN_SWITCH]  # type: ignore[attr-defined]
    assert [pd.batch_percentage for _, pd in d.phases] == [50]  # type: ignore[attr-defined]
