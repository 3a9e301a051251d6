"""The per-pool phase state machine as a table: open only inside the window, close (pause) when
it ends and resume in the next, halt on maxDuration (switch-open time only) and on a stall
(F4 Pending node named), canary batch then verify, done at 100% + synced (R14) or with no GPU
nodes; and which phases may run at once (canary pool alone first, policy order,
maxParallelPools, halted blocks all)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from gitopsbot.core.fleet.model import Component, MaintenanceWindow, PoolPolicy, RolloutPolicy
from gitopsbot.core.records.journal import PhaseProgress, PhaseState
from gitopsbot.core.rollouts import rollout, windows
from gitopsbot.core.rollouts.rollout import HaltReason, PhaseAction, PoolObservation

T0 = datetime(2026, 6, 10, 2, 0, tzinfo=UTC)  # the window opens at 02:00 UTC for 1 hour
WINDOW = windows.Window.of(MaintenanceWindow("0 2 * * *", 3600), UTC)
POOL = PoolPolicy("a", batch_percentage=25, max_duration_seconds=7200, stall_timeout_seconds=300)


def obs(progress: int = 0, *, open_: bool = False, synced: bool = False, pending=()):
    return PoolObservation(progress, synced, open_, nodes=4, pending_nodes=tuple(pending))


def rolling(opened: datetime, *, progress: int = 0, since: datetime | None = None, spent=0):
    return PhaseProgress(
        "pool/a/hypervisor",
        PhaseState.ROLLING,
        started_at=opened,
        opened_at=opened,
        open_seconds=spent,
        progress=progress,
        last_progress_at=since or opened,
    )


def decide(observed, phase, now, *, policy=POOL, window=WINDOW):
    return rollout.decide_phase(
        policy=policy,
        component=Component.HYPERVISOR,
        observed=observed,
        phase=phase,
        now=now,
        window=window,
    )


NEW = PhaseProgress("pool/a/hypervisor")
M = timedelta(minutes=1)

CASES = [
    # id, observed, phase, now, expected action, expected recorded state
    ("before window: wait", obs(), NEW, T0 - 30 * M, PhaseAction.WAIT, PhaseState.PENDING),
    ("window open: open", obs(), NEW, T0 + M, PhaseAction.OPEN_SWITCH, PhaseState.ROLLING),
    (
        "rolling: wait",
        obs(25, open_=True),
        rolling(T0),
        T0 + 5 * M,
        PhaseAction.WAIT,
        PhaseState.ROLLING,
    ),
    (
        "window ends: close",
        obs(50, open_=True),
        rolling(T0, progress=50, since=T0 + 59 * M),
        T0 + 61 * M,
        PhaseAction.CLOSE_SWITCH,
        PhaseState.PAUSED,
    ),
    (
        "paused: wait",
        obs(50),
        replace(rolling(T0), state=PhaseState.PAUSED, opened_at=None),
        T0 + 2 * 60 * M,
        PhaseAction.WAIT,
        PhaseState.PAUSED,
    ),
    (
        "next window: reopen",
        obs(50),
        replace(
            rolling(T0, progress=50), state=PhaseState.PAUSED, opened_at=None, open_seconds=900
        ),
        T0 + timedelta(days=1) + M,
        PhaseAction.OPEN_SWITCH,
        PhaseState.ROLLING,
    ),
    (
        "done: close",
        obs(100, open_=True, synced=True),
        rolling(T0),
        T0 + 9 * M,
        PhaseAction.CLOSE_SWITCH,
        PhaseState.DONE,
    ),
    (
        "done while closed",
        obs(100, synced=True),
        NEW,
        T0 + 9 * M,
        PhaseAction.DONE,
        PhaseState.DONE,
    ),
    (
        "100 not synced: not done",
        obs(100, open_=True),
        rolling(T0, progress=100),
        T0 + 2 * M,
        PhaseAction.WAIT,
        PhaseState.ROLLING,
    ),
    (
        "deadline",
        obs(75, open_=True),
        rolling(T0, progress=75, since=T0 + 29 * M, spent=90 * 60),
        T0 + 30 * M,
        PhaseAction.HALT,
        PhaseState.HALTED,
    ),
    (
        "stall",
        obs(25, open_=True, pending=["gpu-7"]),
        rolling(T0, progress=25, since=T0),
        T0 + 5 * M,
        PhaseAction.HALT,
        PhaseState.HALTED,
    ),
]


@pytest.mark.parametrize(
    ("observed", "phase", "now", "action", "state"),
    [c[1:] for c in CASES],
    ids=[c[0] for c in CASES],
)
def test_phase_table(observed, phase, now, action, state) -> None:
    d = decide(observed, phase, now)
    assert d.action is action, d.reason
    assert d.phase.state is state


def test_open_carries_batch_percentage_and_starts_the_clocks() -> None:
    d = decide(obs(), NEW, T0 + M)
    assert d.batch_percentage == 25
    assert d.phase.started_at == d.phase.opened_at == d.phase.last_progress_at == T0 + M


def test_pause_accumulates_open_time_and_waits_for_next_opening() -> None:
    d = decide(obs(50, open_=True), rolling(T0, progress=50, since=T0 + 59 * M), T0 + 61 * M)
    assert d.phase.open_seconds == 61 * 60
    assert d.phase.opened_at is None
    assert d.until == T0 + timedelta(days=1)


def test_deadline_excludes_window_pauses() -> None:
    # 115 minutes used on earlier nights; 4 minutes into this one: 119, under 120.
    phase = replace(rolling(T0 + timedelta(days=1), progress=50), open_seconds=115 * 60)
    assert decide(obs(50, open_=True), phase, T0 + timedelta(days=1, minutes=4)).action is (
        PhaseAction.WAIT
    )
    d = decide(obs(50, open_=True), phase, T0 + timedelta(days=1, minutes=5))
    assert d.action is PhaseAction.HALT
    assert d.halt is HaltReason.MAX_DURATION
    assert d.close  # halting closes the switch


def test_stall_names_the_pending_node() -> None:
    d = decide(obs(25, open_=True, pending=["gpu-7"]), rolling(T0, progress=25), T0 + 5 * M)
    assert d.halt is HaltReason.STALLED
    assert "gpu-7" in d.reason and "F4" in d.reason


def test_progress_resets_the_stall_clock() -> None:
    d = decide(obs(50, open_=True), rolling(T0, progress=25), T0 + 5 * M)
    assert d.action is PhaseAction.WAIT
    assert d.phase.progress == 50 and d.phase.last_progress_at == T0 + 5 * M


def test_wait_comes_back_no_later_than_the_next_deadline() -> None:
    d = decide(obs(25, open_=True), rolling(T0, progress=25, since=T0 + 4 * M), T0 + 8 * M)
    assert d.until is not None and d.until <= T0 + 9 * M  # the stall deadline


@pytest.mark.parametrize(
    ("interval", "look"),
    [(1, 2), (4, 4), (30, 10)],
    ids=["short batches: every 2s", "one batch interval", "long batches: POLL"],
)
def test_a_rolling_pool_is_looked_at_about_once_per_batch(interval: int, look: int) -> None:
    # The next phase should start soon after the controller's last batch (issue 5's
    # benchmark), without polling a slow rollout more than every POLL.
    policy = replace(POOL, batch_interval_seconds=interval)
    now = T0 + 8 * M
    d = decide(obs(25, open_=True), rolling(T0, progress=25, since=now), now, policy=policy)
    assert d.action is PhaseAction.WAIT
    assert d.until == now + timedelta(seconds=look)


@pytest.mark.parametrize(
    ("interval", "progress", "look"),
    [(3, 80, 3.0), (3, 90, 0.5), (30, 90, 3.0), (600, 95, 10.0)],
    ids=["not the last batch", "last batch: often", "last batch: a tenth", "capped at POLL"],
)
def test_the_last_batch_is_looked_at_more_often(interval: int, progress: int, look: float) -> None:
    # The pool is done the moment its last batch's pods are replaced: the next pool should
    # start within a fraction of a second (issue 5's benchmark, ratio <= 1.05).
    policy = replace(POOL, batch_interval_seconds=interval, batch_percentage=10)
    now = T0 + 8 * M
    d = decide(
        obs(progress, open_=True), rolling(T0, progress=progress, since=now), now, policy=policy
    )
    assert d.action is PhaseAction.WAIT
    assert d.until == now + timedelta(seconds=look)


def test_no_gpu_nodes_is_done_at_once() -> None:
    empty = PoolObservation(None, False, False, nodes=0)
    d = decide(empty, NEW, T0 - 5 * M)  # even outside the window: nothing will roll
    assert d.action is PhaseAction.DONE


def test_no_window_means_always_open() -> None:
    assert decide(obs(), NEW, T0 - 5 * M, window=None).action is PhaseAction.OPEN_SWITCH


def test_canary_batch_then_verify_then_the_rest() -> None:
    pool = replace(POOL, canary_batch_percentage=10)
    d1 = decide(obs(), NEW, T0 + M, policy=pool)
    assert (d1.action, d1.batch_percentage, d1.phase.state) == (
        PhaseAction.OPEN_SWITCH,
        10,
        PhaseState.CANARY,
    )
    d2 = decide(obs(0, open_=True), d1.phase, T0 + 2 * M, policy=pool)
    assert d2.action is PhaseAction.WAIT
    d3 = decide(obs(10, open_=True), d2.phase, T0 + 3 * M, policy=pool)
    assert (d3.action, d3.phase.state) == (PhaseAction.CLOSE_SWITCH, PhaseState.CANARY_VERIFY)
    d4 = decide(obs(10), d3.phase, T0 + 4 * M, policy=pool)
    assert d4.action is PhaseAction.VERIFY_CANARY
    verified = replace(d4.phase, canary_done=True)
    d5 = decide(obs(10), verified, T0 + 5 * M, policy=pool)
    assert (d5.action, d5.batch_percentage) == (PhaseAction.OPEN_SWITCH, 25)


def test_halted_stays_halted() -> None:
    halted = replace(NEW, state=PhaseState.HALTED, halt_reason="x")
    d = decide(obs(100, synced=True, open_=True), halted, T0 + M)
    assert d.action is PhaseAction.HALT and d.close


# -- which phases run -----------------------------------------------------------------------


def refs(*pools: str, comps=(Component.HYPERVISOR, Component.WORKER)):
    return [rollout.PhaseRef(f"pool/{p}/{c}", p, c) for p in pools for c in comps]


def names(result):
    return [r.step for r in result]


def test_phases_in_a_pool_go_in_order_and_pools_one_at_a_time() -> None:
    policy = RolloutPolicy(pools=(PoolPolicy("a"), PoolPolicy("b")), order=("b", "a"))
    r = refs("a", "b")
    assert names(rollout.runnable_phases(policy, r, {})) == ["pool/b/hypervisor"]
    states = {"pool/b/hypervisor": PhaseState.DONE}
    assert names(rollout.runnable_phases(policy, r, states)) == ["pool/b/worker"]
    states["pool/b/worker"] = PhaseState.DONE
    assert names(rollout.runnable_phases(policy, r, states)) == ["pool/a/hypervisor"]


def test_max_parallel_pools() -> None:
    policy = RolloutPolicy(
        pools=(PoolPolicy("a"), PoolPolicy("b"), PoolPolicy("c")), max_parallel_pools=2
    )
    assert names(rollout.runnable_phases(policy, refs("a", "b", "c"), {})) == [
        "pool/a/hypervisor",
        "pool/b/hypervisor",
    ]


def test_canary_pool_runs_alone_first() -> None:
    policy = RolloutPolicy(
        pools=(PoolPolicy("a"), PoolPolicy("b")), canary_pool="b", max_parallel_pools=2
    )
    r = refs("a", "b")
    assert names(rollout.runnable_phases(policy, r, {})) == ["pool/b/hypervisor"]
    done_b = {"pool/b/hypervisor": PhaseState.DONE, "pool/b/worker": PhaseState.DONE}
    assert names(rollout.runnable_phases(policy, r, done_b)) == ["pool/a/hypervisor"]


def test_a_halt_blocks_everything() -> None:
    policy = RolloutPolicy(pools=(PoolPolicy("a"), PoolPolicy("b")), max_parallel_pools=2)
    assert (
        rollout.runnable_phases(policy, refs("a", "b"), {"pool/a/hypervisor": PhaseState.HALTED})
        == ()
    )


def test_phase_components_only_those_switched_on_f3() -> None:
    pool = PoolPolicy("a", auto_update_worker=True, phases=(Component.WORKER,))
    assert rollout.phase_components(pool) == (Component.HYPERVISOR, Component.WORKER)
    off = PoolPolicy("b", auto_update_hypervisor=False)
    assert rollout.phase_components(off) == ()


def test_synced_but_pods_not_current_is_not_done() -> None:
    stale = PoolObservation(100, True, False, nodes=4, current=False)
    assert decide(stale, NEW, T0 + M).action is PhaseAction.OPEN_SWITCH
    fresh = replace(stale, current=True)
    assert decide(fresh, NEW, T0 + M).action is PhaseAction.DONE
