"""Mermaid Gantt blocks (core.gantt): the plan (a section per pool, phases one after another,
canary bar, batches folded past MAX_BARS, window and maxDuration) and an operation as it
happened (steps done / active / crit, mark-to-mark batch bars, rolling to now with the ETA,
halted in crit), with names Mermaid cannot misread."""

from __future__ import annotations

import re
from dataclasses import replace
from datetime import UTC, datetime, timedelta

from gitopsbot.core.fleet.model import Component, MaintenanceWindow, PoolPolicy
from gitopsbot.core.planning import gantt
from gitopsbot.core.records.journal import (
    Journal,
    OperationKind,
    PhaseProgress,
    PhaseState,
    ProgressMark,
    Step,
    StepKind,
    StepState,
)
from gitopsbot.core.rollouts import timeline

T0 = datetime(2026, 6, 10, 2, 0, tzinfo=UTC)
S = timedelta(seconds=1)
Z = int(T0.timestamp())
HEADER_KEYWORDS = ("gantt", "title ", "dateFormat ", "axisFormat ", "section ")


def _seconds(line: str) -> str:
    """A task's ``start, end`` in milliseconds (``dateFormat x``) read back as seconds, so
    the expectations below speak seconds; a value that is not whole seconds stays as it is
    and fails them."""
    m = re.search(r"(\d+), (\d+)$", line)
    if m is None or int(m[1]) % 1000 or int(m[2]) % 1000:
        return line
    return f"{line[: m.start()]}{int(m[1]) // 1000}, {int(m[2]) // 1000}"


def body(block: str) -> list[str]:
    lines = block.splitlines()
    assert lines[0] == "```mermaid"
    assert lines[1] == "gantt"
    assert lines[-1] == "```"
    return [_seconds(line.strip()) for line in lines[1:-1]]


def tasks(block: str) -> list[str]:
    return [line for line in body(block) if not line.startswith(HEADER_KEYWORDS)]


def sections(block: str) -> list[str]:
    return [line.removeprefix("section ") for line in body(block) if line.startswith("section ")]


def assert_mermaid_safe(block: str) -> None:
    for line in tasks(block):
        name, sep, data = line.partition(" :")
        assert sep, line
        assert not set(name) & set(":#;`"), line
        assert not set(data) & set(":#;"), line
    for line in body(block):
        if line.startswith(("section ", "title ")):
            assert not set(line) & set(":#;`"), line


def pool(name: str, **kw) -> PoolPolicy:
    return PoolPolicy(name, **kw)


# -- planned ---------------------------------------------------------------------------------


def test_planned_empty_input_gives_nothing() -> None:
    assert gantt.planned([]) == ""
    no_phases = timeline.pool_timeline(pool("a"), (), nodes=3)
    assert gantt.planned([no_phases]) == ""


def test_planned_splits_each_phase_estimate_over_its_batches() -> None:
    # 3 nodes at 50 %: 2 batches, estimate 2 × 90 + 1 × 3 = 183 s, 91 s per bar.
    a = timeline.pool_timeline(pool("a", batch_percentage=50), (Component.HYPERVISOR,), nodes=3)
    assert a.phases[0].estimate_seconds == 183
    block = gantt.planned([a])
    assert "dateFormat x" in body(block)
    assert sections(block) == ["a"]
    assert tasks(block) == ["hypervisor batch 1/2 :0, 91", "hypervisor batch 2/2 :91, 182"]


def test_planned_has_a_section_per_pool_one_after_another() -> None:
    comps = (Component.HYPERVISOR, Component.WORKER)
    a = timeline.pool_timeline(
        pool("a", batch_percentage=50, auto_update_worker=True), comps, nodes=3
    )
    b = timeline.pool_timeline(pool("b", batch_percentage=100), (Component.HYPERVISOR,), nodes=2)
    block = gantt.planned([a, b])
    assert sections(block) == ["a", "b"]
    lines = body(block)
    a_at, b_at = lines.index("section a"), lines.index("section b")
    a_tasks, b_tasks = lines[a_at + 1 : b_at], lines[b_at + 1 :]
    # pool a: hypervisor (2 × 91 s) then worker (2 × 60 + 3 = 123 → 61 s per bar)
    assert a_tasks == [
        "hypervisor batch 1/2 :0, 91",
        "hypervisor batch 2/2 :91, 182",
        "worker batch 1/2 :182, 243",
        "worker batch 2/2 :243, 304",
    ]
    # pool b starts where a ended: one batch, 90 s
    assert b_tasks == ["hypervisor batch 1/1 :304, 394"]


def test_planned_draws_the_canary_batch_first() -> None:
    # canary adds readiness + wait: 183 + 93 = 276 s over 3 bars of 92 s.
    p = pool("a", batch_percentage=50, canary_batch_percentage=10)
    a = timeline.pool_timeline(p, (Component.HYPERVISOR,), nodes=3)
    assert tasks(gantt.planned([a])) == [
        "hypervisor canary :active, 0, 92",
        "hypervisor batch 1/2 :92, 184",
        "hypervisor batch 2/2 :184, 276",
    ]


def test_planned_without_canary_has_no_canary_bar() -> None:
    a = timeline.pool_timeline(pool("a", batch_percentage=50), (Component.HYPERVISOR,), nodes=3)
    assert "canary" not in gantt.planned([a])


def test_planned_draws_up_to_max_bars_one_by_one() -> None:
    pct = 9  # ceil(100 / 9) = 12 batches: not folded
    a = timeline.pool_timeline(pool("a", batch_percentage=pct), (Component.HYPERVISOR,), nodes=20)
    assert a.phases[0].batches == gantt.MAX_BARS
    bars = tasks(gantt.planned([a]))
    assert len(bars) == gantt.MAX_BARS
    assert bars[0].startswith("hypervisor batch 1/12 :")
    assert bars[-1].startswith("hypervisor batch 12/12 :")


def test_planned_folds_batches_past_max_bars() -> None:
    # 5 %: 20 batches, estimate 20 × 90 + 19 × 3 = 1857 s, 92 s each → one bar of 1840 s.
    a = timeline.pool_timeline(pool("a", batch_percentage=5), (Component.HYPERVISOR,), nodes=20)
    assert a.phases[0].batches == 20 > gantt.MAX_BARS
    assert tasks(gantt.planned([a])) == ["hypervisor batches 1-20 :0, 1840"]


def test_planned_folded_bar_is_followed_by_the_next_phase() -> None:
    comps = (Component.HYPERVISOR, Component.WORKER)
    p = pool("a", batch_percentage=5, auto_update_worker=True)
    a = timeline.pool_timeline(p, comps, nodes=20)
    bars = tasks(gantt.planned([a]))
    assert bars[0] == "hypervisor batches 1-20 :0, 1840"
    assert bars[1].startswith("worker batches 1-20 :1840, ")


def test_planned_window_length_and_max_duration_from_each_pools_start() -> None:
    window = MaintenanceWindow("0 2 * * *", 3600)
    a = timeline.pool_timeline(
        pool("a", batch_percentage=50, maintenance_window=window, max_duration_seconds=7200),
        (Component.HYPERVISOR,),
        nodes=3,
    )
    b = timeline.pool_timeline(
        pool("b", batch_percentage=50, maintenance_window=window, max_duration_seconds=600),
        (Component.HYPERVISOR,),
        nodes=3,
    )
    lines = body(gantt.planned([a, b]))
    a_part = lines[lines.index("section a") : lines.index("section b")]
    b_part = lines[lines.index("section b") :]
    assert "maintenance window length :done, 0, 3600" in a_part
    assert "maxDuration :milestone, crit, 7200, 7200" in a_part
    assert "maintenance window length :done, 182, 3782" in b_part
    assert "maxDuration :milestone, crit, 782, 782" in b_part


def test_planned_without_window_or_deadline_draws_neither() -> None:
    a = timeline.pool_timeline(pool("a", batch_percentage=50), (Component.HYPERVISOR,), nodes=3)
    block = gantt.planned([a])
    assert "maintenance window" not in block
    assert "maxDuration" not in block


def test_planned_sanitises_pool_names() -> None:
    a = timeline.pool_timeline(
        pool("a:b#c;d", batch_percentage=50, max_duration_seconds=60),
        (Component.HYPERVISOR,),
        nodes=3,
    )
    block = gantt.planned([a])
    assert sections(block) == ["a b c d"]
    assert "a:b" not in block and "#" not in block and ";" not in block
    assert_mermaid_safe(block)


# -- actual ----------------------------------------------------------------------------------


def at(seconds: int) -> datetime:
    return T0 + seconds * S


def pool_step(name: str = "pool/a/hypervisor", **kw) -> Step:
    return Step(
        name,
        StepKind.POOL_PHASE,
        kw.pop("state", StepState.RUNNING),
        started_at=kw.pop("started_at", at(100)),
        pool="a",
        component=Component.HYPERVISOR,
        **kw,
    )


def rolling(name: str = "pool/a/hypervisor", **kw) -> PhaseProgress:
    base = PhaseProgress(
        name,
        PhaseState.ROLLING,
        started_at=at(100),
        opened_at=at(100),
        progress=50,
        last_progress_at=at(130),
        batch_percentage=50,
        batch_interval_seconds=1,
        total=3,
        marks=(ProgressMark(0, at(100)), ProgressMark(50, at(130))),
    )
    return replace(base, **kw)


def op(steps: tuple[Step, ...], phases: tuple[PhaseProgress, ...] = ()) -> Journal:
    return Journal(
        op_id="op-7",
        kind=OperationKind.UPGRADE,
        cluster="c",
        desired_sha="a" * 40,
        created_at=T0,
        steps=steps,
        phases=phases,
    )


def test_actual_empty_input_gives_nothing() -> None:
    assert gantt.actual(op(()), at(10)) == ""
    not_started = (Step("backup", StepKind.BACKUP), pool_step(state=StepState.PENDING))
    pending = PhaseProgress("pool/a/hypervisor")
    assert gantt.actual(op(not_started, (pending,)), at(10)) == ""


def test_actual_steps_done_active_and_crit() -> None:
    steps = (
        Step("backup", StepKind.BACKUP, StepState.SUCCEEDED, at(0), at(10)),
        Step("crds", StepKind.CRDS, StepState.FAILED, at(10), at(14)),
        Step("helm-upgrade", StepKind.HELM_UPGRADE, StepState.RUNNING, at(14)),
        Step("verify", StepKind.VERIFY),  # not started: not drawn
    )
    block = gantt.actual(op(steps), at(50))
    assert sections(block) == ["steps"]
    assert tasks(block) == [
        f"backup :done, {Z}, {Z + 10}",
        f"crds :crit, {Z + 10}, {Z + 14}",
        f"helm-upgrade :active, {Z + 14}, {Z + 50}",
    ]
    assert "upgrade op-7 as it happened" in block


def test_actual_an_instant_step_still_gets_a_visible_bar() -> None:
    steps = (Step("backup", StepKind.BACKUP, StepState.SUCCEEDED, at(5), at(5)),)
    assert tasks(gantt.actual(op(steps), at(50))) == [f"backup :done, {Z + 5}, {Z + 6}"]


def test_actual_rolling_phase_batches_now_and_eta() -> None:
    # observed pace 30 s per step; 1 step left; 10 s since the last mark: ETA 20 s.
    block = gantt.actual(op((pool_step(),), (rolling(),)), at(140))
    assert sections(block) == ["pool/a/hypervisor"]
    assert tasks(block) == [
        f"to 50% :done, {Z + 100}, {Z + 130}",
        f"rolling now :active, {Z + 130}, {Z + 140}",
        f"ETA to 100% :{Z + 140}, {Z + 160}",
    ]


def test_actual_draws_each_mark_to_mark_batch() -> None:
    marks = tuple(ProgressMark(p, at(100 + i * 30)) for i, p in enumerate((0, 20, 40, 60)))
    ph = rolling(progress=60, batch_percentage=20, total=10, marks=marks)
    bars = [t for t in tasks(gantt.actual(op((pool_step(),), (ph,)), at(200))) if ":done" in t]
    assert bars == [
        f"to 20% :done, {Z + 100}, {Z + 130}",
        f"to 40% :done, {Z + 130}, {Z + 160}",
        f"to 60% :done, {Z + 160}, {Z + 190}",
    ]


def test_actual_window_close_milestone_for_an_unfinished_phase() -> None:
    ph = rolling(window_closes_at=at(3600))
    block = gantt.actual(op((pool_step(),), (ph,)), at(140))
    assert f"window closes :milestone, {Z + 3600}, {Z + 3600}" in tasks(block)


def test_actual_halted_phase_is_crit_without_eta() -> None:
    ph = rolling(
        state=PhaseState.HALTED, opened_at=None, halt_reason="stalled", window_closes_at=at(3600)
    )
    lines = tasks(gantt.actual(op((pool_step(state=StepState.FAILED),), (ph,)), at(900)))
    assert f"halted at 50% :crit, {Z + 130}, {Z + 900}" in lines
    assert not any(line.startswith(("rolling now", "ETA", "window closes")) for line in lines)


def test_actual_done_phase_has_batches_only() -> None:
    marks = (ProgressMark(0, at(100)), ProgressMark(50, at(130)), ProgressMark(100, at(160)))
    ph = rolling(
        state=PhaseState.DONE,
        progress=100,
        opened_at=None,
        marks=marks,
        window_closes_at=at(3600),
    )
    st = pool_step(state=StepState.SUCCEEDED, finished_at=at(161))
    assert tasks(gantt.actual(op((st,), (ph,)), at(900))) == [
        f"to 50% :done, {Z + 100}, {Z + 130}",
        f"to 100% :done, {Z + 130}, {Z + 160}",
    ]


def test_actual_without_marks_rolls_from_the_phase_start() -> None:
    ph = rolling(marks=(), progress=0, batch_percentage=0, total=0)
    lines = tasks(gantt.actual(op((pool_step(),), (ph,)), at(140)))
    assert lines[0] == f"rolling now :active, {Z + 100}, {Z + 140}"
    assert not any(line.startswith("to ") for line in lines)


def test_actual_pending_phase_has_no_section_but_steps_still_show() -> None:
    steps = (
        Step("backup", StepKind.BACKUP, StepState.SUCCEEDED, at(0), at(10)),
        pool_step(state=StepState.PENDING, started_at=None),
    )
    block = gantt.actual(op(steps, (PhaseProgress("pool/a/hypervisor"),)), at(50))
    assert sections(block) == ["steps"]


def test_actual_sanitises_names() -> None:
    steps = (
        Step("we:ird#st;ep", StepKind.VERIFY, StepState.SUCCEEDED, at(0), at(10)),
        pool_step("pool/a:b#c;d/hypervisor"),
    )
    block = gantt.actual(op(steps, (rolling("pool/a:b#c;d/hypervisor"),)), at(140))
    assert sections(block) == ["steps", "pool/a b c d/hypervisor"]
    assert tasks(block)[0] == f"we ird st ep :done, {Z}, {Z + 10}"
    assert_mermaid_safe(block)


def test_actual_covers_every_batch_past_max_bars() -> None:
    marks = tuple(ProgressMark(p, at(100 + p * 10)) for p in range(21))  # 0..20 % at 1 %
    ph = rolling(progress=20, batch_percentage=1, total=100, marks=marks)
    lines = tasks(gantt.actual(op((pool_step(),), (ph,)), at(400)))
    done = [line for line in lines if ":done," in line]
    last_mark = int(marks[-1].at.timestamp())
    assert done[-1].endswith(f", {last_mark}")


def test_a_paused_phase_is_not_drawn_as_rolling_and_its_past_window_is_not_shown() -> None:
    paused = rolling(
        state=PhaseState.PAUSED,
        opened_at=None,
        open_seconds=100,
        window_closes_at=at(200),
    )
    lines = tasks(gantt.actual(op((pool_step(),), (paused,)), at(5000)))
    assert any(line.startswith("paused, window closed :") for line in lines), lines
    assert not any("rolling now" in line or ":active" in line for line in lines), lines
    assert not any("window closes" in line for line in lines), lines
    assert not any(line.startswith("ETA") for line in lines), lines
