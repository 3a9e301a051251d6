"""``status --watch`` in a pipe tells a pause and a resume (#28 item 9): the per-change lines
(``bot.report.change_lines``) compare what holds a phase too, not only its state and progress,
so a pending phase a pause in Git holds, and its resume, each give one line."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from gitopsbot.bot import report
from gitopsbot.core.fleet.model import PoolPolicy, RolloutPolicy
from gitopsbot.core.operations.operation import new_operation
from gitopsbot.core.records.journal import Journal, OperationKind, PhaseProgress, PhaseState

T0 = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)
STEP = "pool/b/hypervisor"
WHY = "clusters/lab/rollout.yaml:12 paused: true"


def operation() -> Journal:
    return new_operation(
        kind=OperationKind.UPGRADE,
        cluster="lab",
        desired_sha="d" * 40,
        created_at=T0,
        policy=RolloutPolicy(pools=(PoolPolicy("a"), PoolPolicy("b"))),
    )


def test_a_pause_and_a_resume_of_a_pending_phase_are_each_one_line() -> None:
    running = operation()
    seen: dict[str, str] = {}
    report.change_lines(running, T0, seen)  # what was printed in full

    paused = running.with_phase(PhaseProgress(STEP, paused_by=WHY))
    lines = report.change_lines(paused, T0 + timedelta(seconds=5), seen)
    assert [line for line in lines if STEP in line] == [
        f"lab/{running.op_id}: · {STEP} pending · paused: {WHY}"
    ]
    assert report.change_lines(paused, T0 + timedelta(seconds=10), seen) == []  # told once

    resumed = running.with_phase(PhaseProgress(STEP))
    lines = report.change_lines(resumed, T0 + timedelta(seconds=15), seen)
    assert [line for line in lines if STEP in line] == [
        f"lab/{running.op_id}: · {STEP} pending · resumed"
    ]


def test_a_rolling_phase_paused_says_by_what() -> None:
    rolling = operation().with_phase(
        PhaseProgress(STEP, PhaseState.ROLLING, progress=25, started_at=T0, opened_at=T0)
    )
    seen: dict[str, str] = {}
    report.change_lines(rolling, T0, seen)
    paused = rolling.with_phase(
        PhaseProgress(STEP, PhaseState.PAUSED, progress=25, started_at=T0, paused_by=WHY)
    )
    (line,) = [x for x in report.change_lines(paused, T0 + timedelta(minutes=1), seen) if STEP in x]
    assert "paused" in line and line.endswith(f" · paused: {WHY}")
