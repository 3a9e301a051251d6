"""core.drift_baseline and core.drift's pending (issue 28 items 2, 3, 5): a change Git holds
back is pending, never drift; the bot's own pinned batch is never drift; the CRDs the bot
applied last are compared whatever operation came after."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from gitopsbot.core.charts.postrender import rolling_update_policy
from gitopsbot.core.drift import baseline as drift_baseline
from gitopsbot.core.drift import proposal as drift_proposal
from gitopsbot.core.drift import report as drift
from gitopsbot.core.fleet.model import Component, PoolPolicy, RolloutPolicy
from gitopsbot.core.operations.operation import new_operation, phase_step_name
from gitopsbot.core.records.journal import (
    Effect,
    Journal,
    OperationKind,
    OperationStatus,
    PhaseProgress,
    StepKind,
    StepState,
)

T0 = datetime(2026, 12, 1, 10, 0, tzinfo=UTC)
POLICY = RolloutPolicy(pools=(PoolPolicy("shared", batch_percentage=50),))
PINNED = rolling_update_policy(POLICY.pools[0])
WAVES = (
    "blocked by policy (denied): clusters/prod/release.yaml:5: WAVES denied: "
    "wave prod waits for wave staging"
)


def op(kind: OperationKind, sha: str, hours: int, status: OperationStatus, **kw: object) -> Journal:
    made = new_operation(
        kind=kind, cluster="prod", desired_sha=sha, created_at=T0 + timedelta(hours=hours),
        policy=POLICY,
    )  # fmt: skip
    return replace(made, status=status, **kw)  # type: ignore[arg-type]


def crds_done(journal: Journal, digest: str) -> Journal:
    step = replace(
        journal.step(str(StepKind.CRDS)),
        state=StepState.SUCCEEDED,
        finished_at=journal.created_at + timedelta(minutes=1),
        effect=Effect(description=digest),
    )
    return journal.with_step(step)


def desired(version: str, **kw: object) -> drift.DesiredState:
    base = drift.DesiredState(
        chart_version=version,
        values={"controller": {"replicas": 1}},
        crd_digest="sha256:crds",
        pool_policies={"shared": PINNED},
        images={"controller": "ctl:1"},
    )
    return replace(base, **kw)  # type: ignore[arg-type]


def observed(version: str, **kw: object) -> drift.ObservedState:
    base = drift.ObservedState(
        chart_version=version,
        revision=2,
        values=drift.observed_values({"controller": {"replicas": 1}}),
        crd_digest="sha256:crds",
        tfc_policies={"shared": dict(PINNED)},
        gpupool_policies={"shared": dict(PINNED)},
        gpupool_names={"shared": "tensor-fusion-shared"},
        controller_image="ctl:1",
    )
    return replace(base, **kw)  # type: ignore[arg-type]


# -- item 2: a change Git holds back is pending, never drift ----------------------------------


def test_a_promotion_held_by_waves_is_pending_and_never_proposed_away() -> None:
    upgrade = op(OperationKind.UPGRADE, "a" * 40, 0, OperationStatus.SUCCEEDED)
    held = op(OperationKind.UPGRADE, "b" * 40, 5, OperationStatus.BLOCKED, failure=WAVES)
    base = drift_baseline.of([held, upgrade])
    assert (base.applied, base.held) == (upgrade, held)
    why = base.pending_why()
    assert why == f"operation {held.op_id} {WAVES}"

    report = drift.compare(
        "prod", desired("1.8.7"), observed("1.8.0"), applied=desired("1.8.0"), pending_why=why
    )
    assert not report.drifted, report.lines()
    (pending,) = report.pending
    assert (pending.item.what, pending.item.desired, pending.item.observed) == (
        "chart",
        "1.8.7",
        "1.8.0",
    )
    assert pending.why == why
    assert report.summary() == "prod: no drift (1 pending)"
    assert f"  pending, not drift: chart: Helm release chart version: Git 1.8.7, cluster 1.8.0 " \
           f"({why})" in report.lines()  # fmt: skip
    # Nothing for a request to write: release.yaml keeps 1.8.7.
    assert drift_proposal.git_edits(report, {"release.yaml": "chart:\n  version: 1.8.7\n"}) == {}


def test_a_hand_edit_while_a_change_is_held_is_drift_against_what_the_bot_applied() -> None:
    held_values = {"controller": {"replicas": 1}, "agent": {"logLevel": "debug"}}
    report = drift.compare(
        "prod",
        desired("1.8.7", values=held_values),
        observed("1.8.0", values=drift.observed_values({"controller": {"replicas": 3}})),
        applied=desired("1.8.0"),
        pending_why="held",
    )
    assert [(i.what, i.where, i.desired, i.observed) for i in report.items] == [
        ("values", "controller.replicas", "1", "3")
    ]
    assert report.items[0].git_file == "values.yaml"  # Git may take it: the held change keeps
    assert sorted(p.item.where for p in report.pending) == ["Helm release chart version", "agent"]
    files = {"values.yaml": "controller:\n  replicas: 1\nagent:\n  logLevel: debug\n"}
    edited = drift_proposal.git_edits(report, files)["values.yaml"]
    assert "replicas: 3" in edited and "logLevel: debug" in edited
    body = drift_proposal.proposal(report, files, reapply=False).body
    assert "Pending, not drift" in body and "agent" in body


def test_a_hand_edit_where_the_held_change_writes_is_left_to_a_person() -> None:
    # Git holds replicas 2 back; the bot applied 1; a person set 3: a request writing 3 into
    # Git would undo the held change, so it lists it instead.
    report = drift.compare(
        "prod",
        desired("1.8.0", values={"controller": {"replicas": 2}}),
        observed("1.8.0", values=drift.observed_values({"controller": {"replicas": 3}})),
        applied=desired("1.8.0"),
        pending_why="held",
    )
    (item,) = report.items
    assert (item.desired, item.observed, item.git_file) == ("1", "3", "")
    assert drift_proposal.git_edits(report, {"values.yaml": "controller:\n  replicas: 2\n"}) == {}


def test_a_running_operation_and_a_queued_one_are_pending_with_their_reason() -> None:
    upgrade = op(OperationKind.UPGRADE, "a" * 40, 0, OperationStatus.SUCCEEDED)
    running = op(
        OperationKind.UPGRADE, "b" * 40, 5, OperationStatus.RUNNING, holds={"*": "alice: busy"}
    )
    base = drift_baseline.of([upgrade, running])
    assert base.applied == running and base.held is None
    assert base.pending_why() == f"operation {running.op_id} running (held: *: alice: busy)"
    until = T0 + timedelta(hours=9)
    queued = op(OperationKind.UPGRADE, "c" * 40, 6, OperationStatus.QUEUED)
    queued = replace(queued, queue=replace(queued.queue, queued_until=until))
    base = drift_baseline.of([upgrade, running, queued])
    assert base.applied == running and base.held == queued
    assert base.pending_why() == f"operation {queued.op_id} queued until 2026-12-01 19:00 UTC"
    # A blocked change older than what the bot applied since holds nothing back.
    old = op(OperationKind.UPGRADE, "d" * 40, -1, OperationStatus.BLOCKED, failure=WAVES)
    assert drift_baseline.of([old, upgrade]).held is None
    assert drift_baseline.of([upgrade]).pending_why().startswith("merged on the watched branch")


def test_git_behind_the_bots_own_rollback_is_pending_as_the_rollback() -> None:
    failed = op(OperationKind.UPGRADE, "a" * 40, 0, OperationStatus.FAILED)
    rollback = op(
        OperationKind.ROLLBACK, "b" * 40, 1, OperationStatus.SUCCEEDED, reverts_op=failed.op_id
    )
    why = drift_baseline.of([failed, rollback]).pending_why()
    assert why == (
        f"rollback {rollback.op_id} of {failed.op_id} by the bot: Git has not caught up yet"
    )


# -- item 3: the bot's own pinned batch is never drift ----------------------------------------


def test_a_batch_the_budget_shrank_is_the_bots_pin_not_drift() -> None:
    upgrade = op(OperationKind.UPGRADE, "a" * 40, 0, OperationStatus.SUCCEEDED)
    hv, worker = (phase_step_name("shared", c) for c in (Component.HYPERVISOR, Component.WORKER))
    upgrade = upgrade.with_phase(PhaseProgress(step=hv, batch_percentage=33))
    upgrade = upgrade.with_phase(PhaseProgress(step=worker))  # nothing opened: no pin
    base = drift_baseline.of([upgrade])
    assert base.pins == {"shared": {"batchPercentage": 33}}

    shrunk = {**PINNED, "batchPercentage": 33}
    seen = observed("1.8.7", tfc_policies={"shared": shrunk}, gpupool_policies={"shared": shrunk})
    report = drift.compare("prod", desired("1.8.7", pins=base.pins, pinned_by=upgrade.op_id), seen)
    assert not report.drifted, report.lines()
    assert [(p.item.where, p.item.observed, p.why) for p in report.pending] == [
        (
            "TensorFusionCluster tensor-fusion pool shared: batchPercentage",
            "33",
            f"pinned by the bot's operation {upgrade.op_id}",
        ),
        ("GPUPool tensor-fusion-shared: batchPercentage", "33",
         f"pinned by the bot's operation {upgrade.op_id}"),
    ]  # fmt: skip
    assert drift_proposal.git_edits(report, {"rollout.yaml": "pools:\n  shared:\n"}) == {}
    # A batch a person set (neither Git's nor the bot's pin) is drift as ever.
    by_hand = {**PINNED, "batchPercentage": 80}
    seen = observed("1.8.7", tfc_policies={"shared": by_hand})
    report = drift.compare("prod", desired("1.8.7", pins=base.pins), seen)
    assert [(i.where, i.observed) for i in report.items] == [
        ("TensorFusionCluster tensor-fusion pool shared: batchPercentage", "80")
    ]


# -- item 5: CRDs after an operation that did not apply them ---------------------------------


def test_the_crds_the_bot_applied_last_are_known_after_a_rotation_or_a_rollback() -> None:
    upgrade = crds_done(op(OperationKind.UPGRADE, "a" * 40, 0, OperationStatus.SUCCEEDED), "d1")
    rotation = op(OperationKind.ROTATION, "b" * 40, 2, OperationStatus.SUCCEEDED)
    rollback = op(OperationKind.ROLLBACK, "c" * 40, 3, OperationStatus.SUCCEEDED)
    assert drift_baseline.of([rotation, upgrade]).crd_digest == "d1"
    assert drift_baseline.of([upgrade, rotation, rollback]).crd_digest == "d1"
    newer = crds_done(op(OperationKind.UPGRADE, "e" * 40, 4, OperationStatus.FAILED), "d2")
    assert drift_baseline.of([newer, rotation, upgrade]).crd_digest == "d2"
    assert drift_baseline.of([rotation]).crd_digest == ""
