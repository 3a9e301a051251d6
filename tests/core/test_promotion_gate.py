"""The evidence of waves derived from journals (core.promotion_gate), and the gate's verdict.

Journals are built with ``core.operations.operation.new_operation`` (the steps the bot really
runs), then
their steps set as the executor would leave them.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from gitopsbot.core.fleet.model import (
    BotSettings,
    ClusterSpec,
    Environment,
    FailedVersion,
    ReleaseSpec,
    RolloutPolicy,
    Wave,
    WaveSelector,
)
from gitopsbot.core.operations import operation
from gitopsbot.core.records.journal import (
    Journal,
    OperationKind,
    OperationStatus,
    PhaseProgress,
    PhaseState,
    RollbackPoint,
    StepKind,
    StepState,
)
from gitopsbot.core.waves.promotion import ClusterEvidence
from gitopsbot.core.waves.promotion_gate import (
    decide_change,
    evidence_from,
    held_only_by_waves,
    unreadable,
    verdict,
)

T0 = datetime(2026, 12, 4, 10, 0, tzinfo=UTC)
VERSIONS = {"a" * 40: "1.8.6", "b" * 40: "1.8.7", "c" * 40: "1.8.6"}


def version_of(j: Journal) -> str:
    return VERSIONS.get(j.desired_sha, "")


def op(
    sha: str,
    at: datetime,
    status: OperationStatus = OperationStatus.SUCCEEDED,
    *,
    kind: OperationKind = OperationKind.UPGRADE,
    verified: datetime | None = None,
    reverts: str = "",
) -> Journal:
    j = operation.new_operation(
        kind=kind,
        cluster="staging",
        desired_sha=sha,
        created_at=at,
        policy=RolloutPolicy(),
        reverts_op=reverts,
    )
    done = status is OperationStatus.SUCCEEDED
    steps = []
    for s in j.steps:
        state = StepState.SUCCEEDED if done or s.kind is not StepKind.VERIFY else StepState.PENDING
        if status is OperationStatus.RUNNING and s.kind is not StepKind.BACKUP:
            state = StepState.PENDING
        finished = None
        if state is StepState.SUCCEEDED:
            finished = verified if s.kind is StepKind.VERIFY and verified else at
        steps.append(replace(s, state=state, finished_at=finished))
    return replace(j, status=status, steps=tuple(steps))


def test_no_operation_no_version() -> None:
    assert evidence_from("staging", [], version_of) == ClusterEvidence("staging")


def test_verified_version_soaks_from_first_verification() -> None:
    first = op("a" * 40, T0, verified=T0 + timedelta(minutes=5))
    second = op("b" * 40, T0 + timedelta(hours=1), verified=T0 + timedelta(hours=1, minutes=5))
    values_only = op("d" * 40, T0 + timedelta(hours=2), verified=T0 + timedelta(hours=2, minutes=3))
    e = evidence_from(
        "staging", [values_only, first, second], lambda j: VERSIONS.get(j.desired_sha, "1.8.7")
    )
    assert e.chart_version == "1.8.7"
    assert e.verified_at == T0 + timedelta(hours=1, minutes=5)  # the version's first
    assert e.last_verified_at == T0 + timedelta(hours=2, minutes=3)  # the latest operation's
    assert not e.in_flight and not e.trouble


def test_running_operation_is_in_flight_and_not_verified() -> None:
    first = op("a" * 40, T0, verified=T0)
    running = op("b" * 40, T0 + timedelta(hours=1), OperationStatus.RUNNING)
    e = evidence_from("staging", [first, running], version_of)
    assert e.in_flight
    assert e.chart_version == "1.8.6"  # its helm step has not taken effect yet
    upgraded = running.with_step(
        replace(running.step("helm-upgrade"), state=StepState.SUCCEEDED, finished_at=T0)
    )
    e = evidence_from("staging", [first, upgraded], version_of)
    assert e.chart_version == "1.8.7" and e.verified_at is None


def test_blocked_and_superseded_change_nothing() -> None:
    first = op("a" * 40, T0, verified=T0)
    blocked = replace(op("b" * 40, T0 + timedelta(hours=1)), status=OperationStatus.BLOCKED)
    gone = replace(op("b" * 40, T0 + timedelta(hours=2)), status=OperationStatus.SUPERSEDED)
    e = evidence_from("staging", [first, blocked, replace(gone, op_id="other")], version_of)
    assert e.chart_version == "1.8.6" and e.verified_at == T0


def test_rollback_is_trouble_for_the_version_it_left() -> None:
    first = op("a" * 40, T0, verified=T0)
    bad = op("b" * 40, T0 + timedelta(hours=1), OperationStatus.FAILED)
    bad = bad.with_step(replace(bad.step("helm-upgrade"), state=StepState.SUCCEEDED))
    back_at = T0 + timedelta(hours=2)
    back = op(
        "c" * 40,
        back_at,
        kind=OperationKind.ROLLBACK,
        reverts=bad.op_id,
        verified=back_at + timedelta(minutes=2),
    )
    e = evidence_from("staging", [first, bad, back], version_of)
    assert e.trouble == "rolled back" and e.trouble_version == "1.8.7"
    assert e.chart_version == "1.8.6"
    assert e.verified_at == back_at + timedelta(minutes=2)  # verified again after the rollback


def test_halted_phase_is_trouble() -> None:
    j = op("b" * 40, T0, OperationStatus.FAILED)
    j = replace(
        j,
        phases=(
            PhaseProgress(
                step="pool",
                state=PhaseState.HALTED,
                last_progress_at=T0 + timedelta(minutes=9),
            ),
        ),
    )
    e = evidence_from("staging", [j], version_of)
    assert e.trouble == "halted" and e.trouble_at == T0 + timedelta(minutes=9)
    assert e.verified_at is None


# -- the decision and its verdict --------------------------------------------------------------


def spec(name: str, env: Environment, version: str = "1.8.7") -> ClusterSpec:
    release = ReleaseSpec("https://charts.example", "tensor-fusion", version, "tf", "tf")
    return ClusterSpec(name, env, release, {}, RolloutPolicy())


WAVES = (
    Wave("staging", WaveSelector(environment=Environment.STAGING), soak_seconds=3600),
    Wave("production", WaveSelector(environment=Environment.PRODUCTION)),
)
SETTINGS = BotSettings(waves=WAVES)
FLEET = (spec("staging", Environment.STAGING), spec("prod", Environment.PRODUCTION))


def test_held_change_names_missing_cluster_and_soak_end() -> None:
    now = T0 + timedelta(minutes=30)
    e = {"staging": ClusterEvidence("staging", "1.8.7", verified_at=T0)}
    d = decide_change(
        settings=SETTINGS, clusters=FLEET, evidence=e, spec=FLEET[1], before="1.8.6", now=now
    )
    assert not d.allowed
    found = verdict(d, FLEET[1])
    assert found is not None and found.rule_id == "WAVES" and found.blocking
    assert "staging verified 1.8.7 at 10:00 UTC, soak ends 11:00 UTC" in found.message
    line = f"clusters/prod/release.yaml: WAVES denied: {found.message}"
    assert held_only_by_waves([line])
    later = decide_change(
        settings=SETTINGS,
        clusters=FLEET,
        evidence=e,
        spec=FLEET[1],
        before="1.8.6",
        now=T0 + timedelta(hours=1),
    )
    assert later.allowed and verdict(later, FLEET[1]) is None


def test_values_only_change_passes_unless_gated() -> None:
    d = decide_change(
        settings=SETTINGS, clusters=FLEET, evidence={}, spec=FLEET[1], before="1.8.7", now=T0
    )
    assert d.allowed


def test_failed_version_is_located_at_its_mark() -> None:
    settings = replace(SETTINGS, failed_versions=(FailedVersion("1.8.7", line=9),))
    d = decide_change(
        settings=settings, clusters=FLEET, evidence={}, spec=FLEET[0], before="1.8.6", now=T0
    )
    found = verdict(d, FLEET[0])
    assert found is not None and found.location is not None
    assert found.location.file == "gitopsbot.yaml" and found.location.line == 9
    # Judged again on later passes: removing the mark in Git lifts it.
    assert held_only_by_waves([f"gitopsbot.yaml:9: WAVES denied: {found.message}"])


def test_unreadable_evidence_denies() -> None:
    v = unreadable("no gitopsbot/state branch")
    assert v.blocking and "no gitopsbot/state branch" in v.message


def test_another_deny_is_not_lifted_by_time() -> None:
    lines = ["x: WAVES denied: wave production waits", "y: F3 denied: phase without switch"]
    assert not held_only_by_waves(lines)


def test_a_rollback_whose_commit_is_unreadable_returns_to_the_rollback_point() -> None:
    first = op("a" * 40, T0, verified=T0)
    bad = op("b" * 40, T0 + timedelta(hours=1), OperationStatus.FAILED)
    bad = bad.with_step(replace(bad.step("helm-upgrade"), state=StepState.SUCCEEDED))
    bad = replace(bad, rollback_point=RollbackPoint(helm_revision=3, chart_version="1.8.6"))
    back = op(
        "e" * 40,  # a commit this reader does not have
        T0 + timedelta(hours=2),
        kind=OperationKind.ROLLBACK,
        reverts=bad.op_id,
        verified=T0 + timedelta(hours=2, minutes=1),
    )
    e = evidence_from("staging", [first, bad, back], version_of)
    assert e.chart_version == "1.8.6" and e.trouble_version == "1.8.7"
