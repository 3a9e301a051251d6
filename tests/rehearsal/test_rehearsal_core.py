"""core.rehearsal's pure parts: the comparison with the plan and with the real operation's
journal, the state-branch record, the compressed lines for the plan comment."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from gitopsbot.core import rehearsal as rh
from gitopsbot.core.fleet.model import Component
from gitopsbot.core.forge.forge_types import find_marker, with_marker
from gitopsbot.core.records.journal import (
    Journal,
    OperationKind,
    PhaseProgress,
    Step,
    StepKind,
    StepState,
)

T0 = datetime(2026, 12, 1, tzinfo=UTC)


def _rehearsal(*, hit: bool = False) -> rh.Rehearsal:
    a = rh.PoolRun(
        "inference",
        16,
        ("hypervisor", "worker"),
        rh.Outcome.MAX_DURATION if hit else rh.Outcome.DONE,
        T0,
        T0 + timedelta(hours=2),
        waited_seconds=3600,
        batches=21,
        estimate_seconds=4050,
    )
    b = rh.PoolRun(
        "training",
        24,
        ("hypervisor",),
        rh.Outcome.NOT_STARTED if hit else rh.Outcome.DONE,
        None if hit else T0 + timedelta(days=4),
        None if hit else T0 + timedelta(days=4, seconds=1650),
        batches=0 if hit else 5,
        estimate_seconds=1650,
    )
    return rh.Rehearsal(
        cluster="production",
        chart="tensor-fusion 1.8.7",
        desired_sha="abc123",
        started_at=T0,
        finished_at=T0 + timedelta(days=4, seconds=1650),
        pools=(a, b),
        moments=(rh.Moment(T0, "inference", "starts"),),
        verification=("Verify the pools",),
        rollback=rh.rollback_steps((a, b), "revert-pr"),
        on_failure="revert-pr",
    )


def test_rolling_time_leaves_window_waits_out() -> None:
    r = _rehearsal()
    assert r.pools[0].rolling_seconds == 3600  # 2h span, 1h of it waiting for a window
    assert rh.predicted(r) == {"inference": 3600, "training": 1650}


def test_comparison_with_the_plan_uses_the_stated_tolerance() -> None:
    rows = {c.pool: c for c in rh.compare(rh.predicted(_rehearsal()), rh.estimates(_rehearsal()))}
    assert rows["training"].within and rows["training"].difference_seconds == 0
    # 3600 vs 4050: 450s off, inside 25% of 4050 (1012s).
    assert rows["inference"].tolerance_seconds == int(4050 * rh.TOLERANCE)
    assert rows["inference"].within
    assert not rh.compare({"x": 100}, {"x": 1000})[0].within
    assert rh.compare({"x": 100}, {"x": 130})[0].within  # the 60 s floor for short pools


def test_a_deadline_hit_is_said_plainly_everywhere() -> None:
    r = _rehearsal(hit=True)
    assert not r.succeeded and [p.pool for p in r.deadline_hits] == ["inference"]
    assert "MAXDURATION HIT: pool inference" in rh.render_text(r)
    assert "⚠️ inference hits its maxDuration" in rh.compressed(r)
    assert rh.predicted(r) == {}  # neither pool finished: nothing to predict
    assert rh.to_dict(r)["succeeded"] is False


def test_rollback_never_touches_crds_and_follows_on_failure() -> None:
    steps = rh.rollback_steps(_rehearsal().pools, "halt")
    assert any("never touches CRDs (R16)" in s for s in steps)
    assert any(s.startswith("pool training: hypervisor back") for s in steps)
    assert steps[-1].endswith("(onFailure: halt)")


def test_record_and_comparison_with_the_measured_operation() -> None:
    r = _rehearsal()
    record = rh.to_record(r)
    assert rh.record_path("production", "abc123") == "rehearsals/production/abc123.yaml"
    assert rh.predicted_from_record(record) == {"inference": 3600, "training": 1650}
    journal = Journal(
        op_id="production-abc123",
        kind=OperationKind.UPGRADE,
        cluster="production",
        desired_sha="abc123",
        created_at=T0,
        steps=(
            Step(
                "pool/inference/hypervisor",
                StepKind.POOL_PHASE,
                StepState.SUCCEEDED,
                T0,
                T0 + timedelta(hours=1),
                pool="inference",
                component=Component.HYPERVISOR,
            ),
            Step(
                "pool/inference/worker",
                StepKind.POOL_PHASE,
                StepState.SUCCEEDED,
                T0,
                T0 + timedelta(hours=1),
                pool="inference",
                component=Component.WORKER,
            ),
            Step(
                "pool/training/hypervisor",
                StepKind.POOL_PHASE,
                StepState.SUCCEEDED,
                T0,
                T0 + timedelta(hours=9),
                pool="training",
                component=Component.HYPERVISOR,
            ),
        ),
        phases=(
            PhaseProgress("pool/inference/hypervisor", open_seconds=2000),
            PhaseProgress("pool/inference/worker", open_seconds=1500),
            # no open_seconds recorded: the step's span (window waits in it) stands in
        ),
    )
    assert rh.measured(journal) == {"inference": 3500, "training": 9 * 3600}
    cmp = rh.against_operation(record, journal)
    rows = cmp.to_record()["pools"]
    assert rows["inference"]["within"] and rows["inference"]["difference_seconds"] == 100
    assert not rows["training"]["within"]
    assert cmp.lines()[0] == "rehearsal vs operation production-abc123 (rolling time):"


def test_compressed_lines_are_one_per_pool() -> None:
    text = rh.compressed(_rehearsal())
    lines = [ln for ln in text.splitlines() if ln.startswith("- ")]
    assert lines == [
        "- inference: +0s → +2h00m00s, 1h00m00s rolling, waits 1h00m00s for its window: done",
        "- training: +96h00m00s → +96h27m30s, 27m30s rolling: done",
    ]


def test_the_plan_comment_section_replaces_an_earlier_one() -> None:
    record = rh.to_record(_rehearsal())
    sec = rh.section(record)
    assert sec.startswith(rh.SECTION_START) and "**Rehearsal**" in sec
    plan = "## Plan\n\nsteps\n"
    once = rh.with_section(plan, sec)
    assert once.startswith(plan.rstrip("\n")) and once.endswith(rh.SECTION_END + "\n")
    assert rh.with_section(once, sec) == once  # a later plan: replaced, not doubled
    assert rh.with_section(once, "").strip() == plan.strip()  # turned off: removed
    assert rh.section(None) == "" and rh.with_section(plan, "") == plan
    # Not taken for the comment's own marker: the forge keeps it, and finds the plan's.
    assert find_marker(sec) is None
    assert rh.SECTION_START in with_marker(once, "plan/production")
    tag = find_marker(with_marker(once, "plan/production"))
    assert tag is not None and tag.marker == "plan/production"
