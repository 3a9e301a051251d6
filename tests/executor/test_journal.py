"""The journal value: YAML round trip for any journal (Hypothesis), stable output, step and
phase replacement, and refusal of foreign or broken documents."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gitopsbot.core.fleet.model import Component
from gitopsbot.core.records import journal as J
from gitopsbot.core.records.canary_record import CanaryRecord
from gitopsbot.core.rollouts.canary_smoke import CanaryEvidence, CanaryVerdict

text = st.text(st.characters(exclude_categories=("Cs",)), max_size=20)
# Hypothesis wants naive bounds for aware datetimes.
LOW, HIGH = datetime(2000, 1, 1), datetime(2100, 1, 1)  # noqa: DTZ001
some_time = st.datetimes(min_value=LOW, max_value=HIGH, timezones=st.just(UTC))
times = st.one_of(st.none(), some_time)
effects = st.one_of(st.none(), st.builds(J.Effect, st.integers(0, 10**6), text, text))
steps = st.builds(
    J.Step,
    name=text,
    kind=st.sampled_from(J.StepKind),
    state=st.sampled_from(J.StepState),
    started_at=times,
    finished_at=times,
    detail=text,
    effect=effects,
    pool=text,
    component=st.one_of(st.none(), st.sampled_from(Component)),
    attempts=st.integers(0, 100),
)
phases = st.builds(
    J.PhaseProgress,
    step=text,
    state=st.sampled_from(J.PhaseState),
    started_at=times,
    opened_at=times,
    open_seconds=st.integers(0, 10**7),
    progress=st.integers(0, 100),
    last_progress_at=times,
    halt_reason=text,
    canary_done=st.booleans(),
    canary=st.one_of(
        st.none(),
        st.builds(
            CanaryRecord,
            verdict=st.sampled_from([CanaryVerdict.PASSED, CanaryVerdict.FAILED]),
            at=some_time,
            evidence=st.builds(CanaryEvidence, text, text, text, text, text, text, text),
        ),
    ),
)
points = st.one_of(
    st.none(),
    st.builds(
        J.RollbackPoint,
        helm_revision=st.integers(0, 1000),
        chart_version=text,
        values_digest=text,
        crd_bundle_digest=text,
        images=st.dictionaries(text, st.dictionaries(text, text, max_size=3), max_size=3),
    ),
)
journals = st.builds(
    J.Journal,
    op_id=text,
    kind=st.sampled_from(J.OperationKind),
    cluster=text,
    desired_sha=text,
    base_sha=text,
    created_at=some_time,
    status=st.sampled_from(J.OperationStatus),
    pr_number=st.one_of(st.none(), st.integers(1, 10**6)),
    steps=st.lists(steps, max_size=4).map(tuple),
    phases=st.lists(phases, max_size=3).map(tuple),
    rollback_point=points,
    queue=st.builds(J.QueueState, queued_until=times, superseded_by=text, behind=text),
    failure=text,
    reverts_op=text,
    remediation=text,
    verdicts=st.lists(text, max_size=3).map(tuple),
)


@settings(max_examples=100, deadline=None)
@given(journals)
def test_yaml_round_trip(j: J.Journal) -> None:
    out = J.dumps(j)
    assert J.loads(out) == j
    assert J.dumps(J.loads(out)) == out  # deterministic


def _sample() -> J.Journal:
    t = datetime(2026, 5, 1, 12, tzinfo=UTC)
    return J.Journal(
        op_id="prod-abc",
        kind=J.OperationKind.UPGRADE,
        cluster="prod",
        desired_sha="abc",
        created_at=t,
        steps=J.new_steps([("backup", J.StepKind.BACKUP), ("verify", J.StepKind.VERIFY)]),
    )


def test_times_are_written_in_utc() -> None:
    j = _sample()
    from zoneinfo import ZoneInfo

    local = j.created_at.astimezone(ZoneInfo("Asia/Shanghai"))
    from dataclasses import replace

    out = J.dumps(replace(j, created_at=local))
    assert "created_at: '2026-05-01T12:00:00+00:00'" in out


def test_with_step_and_phase_replace_by_name() -> None:
    j = _sample()
    done = J.Step("backup", J.StepKind.BACKUP, J.StepState.SUCCEEDED)
    j2 = j.with_step(done)
    assert j2.step("backup").state is J.StepState.SUCCEEDED
    assert j2.step("verify").state is J.StepState.PENDING
    assert j.step("backup").state is J.StepState.PENDING  # values, not mutation
    p = J.PhaseProgress("verify", progress=40)
    j3 = j2.with_phase(p).with_phase(J.PhaseProgress("verify", progress=60))
    assert [x.progress for x in j3.phases] == [60]
    assert j3.phase("nope").state is J.PhaseState.PENDING
    with pytest.raises(KeyError):
        j.step("nope")


def test_foreign_documents_are_refused() -> None:
    with pytest.raises(ValueError, match="format"):
        J.loads("format: something-else\nop_id: x\n")
    with pytest.raises(ValueError, match="not a mapping"):
        J.loads("- a\n- b\n")


def test_naive_time_is_refused() -> None:
    from dataclasses import replace

    bad = replace(_sample(), created_at=datetime(2026, 1, 1) + timedelta(0))  # noqa: DTZ001
    with pytest.raises(ValueError, match="timezone-aware"):
        J.dumps(bad)
