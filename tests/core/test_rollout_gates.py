"""core/rollout at batch boundaries (issue 18): with gates the switch closes after each batch
(between-batches), the gates are judged (CHECK_GATES), a pass opens the next batch, a fail
halts naming the gate and its evidence, inconclusive retries gateRetries times
gateRetryInterval apart then halts; without gates the switch closes at a boundary only when
admission no longer allows the pinned batch (the budget shrinks it, the window no longer
fits it)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from gitopsbot.core.fleet.model import Component, MaintenanceWindow, PoolPolicy, Share
from gitopsbot.core.records import batch_record
from gitopsbot.core.records.batch_record import BatchRecord, GateNote
from gitopsbot.core.records.journal import PhaseProgress, PhaseState
from gitopsbot.core.rollouts import phase_clock, phase_view, rollout, windows
from gitopsbot.core.rollouts.gates import PromQueryGate
from gitopsbot.core.rollouts.rollout import HaltReason, PhaseAction, PhaseDecision, PoolObservation

T0 = datetime(2026, 6, 10, 2, 0, tzinfo=UTC)
WINDOW = windows.Window.of(MaintenanceWindow("0 2 * * *", 3600), UTC)
GATE = PromQueryGate("error-rate", "sum(rate(errors[5m]))", "<", 0.05)
GATED = PoolPolicy(
    "a",
    batch_percentage=34,
    stall_timeout_seconds=600,
    gates=(GATE,),
    gate_retries=1,
    gate_retry_interval_seconds=30,
)
S = timedelta(seconds=1)


def obs(
    progress: int, *, open_: bool, nodes: int = 3, down: tuple[str, ...] = ()
) -> PoolObservation:
    return PoolObservation(progress, False, open_, nodes=nodes, out_of_service=down)


def decide(
    policy: PoolPolicy, observed: PoolObservation, phase: PhaseProgress, now: datetime
) -> PhaseDecision:
    return rollout.decide_phase(
        policy=policy,
        component=Component.HYPERVISOR,
        observed=observed,
        phase=phase,
        now=now,
        window=WINDOW,
    )


def test_gates_are_judged_before_the_first_batch() -> None:
    d = decide(GATED, obs(0, open_=False), PhaseProgress("pool/a/hypervisor"), T0)
    assert d.action is PhaseAction.CHECK_GATES and d.phase.state is PhaseState.PENDING
    passed = rollout.gates_judged(GATED, d.phase, [GateNote("error-rate", "pass", "0.01")], T0)
    assert passed.action is PhaseAction.WAIT and passed.until == T0
    assert passed.phase.batches.gates_passed == 0
    opened = decide(GATED, obs(0, open_=False), passed.phase, T0 + S)
    assert opened.action is PhaseAction.OPEN_SWITCH and opened.batch_percentage == 34


def _opened(policy: PoolPolicy) -> PhaseProgress:
    d = decide(policy, obs(0, open_=False), PhaseProgress("pool/a/hypervisor"), T0)
    if d.action is PhaseAction.CHECK_GATES:
        d = rollout.gates_judged(policy, d.phase, [GateNote("error-rate", "pass", "0")], T0)
        d = decide(policy, obs(0, open_=False), d.phase, T0)
    assert d.action is PhaseAction.OPEN_SWITCH
    return d.phase


def test_a_batch_boundary_closes_the_switch_and_the_gates_judge_the_next() -> None:
    phase = _opened(GATED)
    assert phase.state is PhaseState.ROLLING and phase.batches.from_progress == 0
    # still in the first batch: rolling
    assert decide(GATED, obs(0, open_=True), phase, T0 + 5 * S).action is PhaseAction.WAIT
    # the controller finished a batch: progress 33
    d = decide(GATED, obs(33, open_=True), phase, T0 + 40 * S)
    assert d.action is PhaseAction.CLOSE_SWITCH and d.until == T0 + 40 * S
    # The deadline's clock runs on between batches (the bot's own wait counts).
    assert d.phase.state is PhaseState.BETWEEN and d.phase.opened_at == phase.opened_at
    assert d.phase.batches.seconds == (40,) and d.phase.batches.from_progress == 33
    assert d.phase.batches.waiting == "batch finished at 33%: gates judge the next"
    # closed between batches: judge
    check = decide(GATED, obs(33, open_=False), d.phase, T0 + 41 * S)
    assert check.action is PhaseAction.CHECK_GATES and check.phase.state is PhaseState.BETWEEN
    notes = [GateNote("error-rate", "pass", "sum(rate(errors[5m])) = 0.01")]
    judged = rollout.gates_judged(GATED, check.phase, notes, T0 + 42 * S)
    assert judged.action is PhaseAction.WAIT and "gates passed: error-rate" in judged.reason
    assert judged.phase.batches.gates == tuple(notes)
    assert judged.phase.batches.gates_passed == 33
    again = decide(GATED, obs(33, open_=False), judged.phase, T0 + 42 * S)
    assert again.action is PhaseAction.OPEN_SWITCH and again.phase.state is PhaseState.ROLLING
    assert again.phase.batches.from_progress == 33 and again.phase.batches.waiting == ""


def _between(policy: PoolPolicy) -> PhaseProgress:
    d = decide(policy, obs(33, open_=True), _opened(policy), T0 + 40 * S)
    assert d.phase.state is PhaseState.BETWEEN
    return d.phase


def test_a_failed_gate_halts_naming_it_and_its_evidence() -> None:
    notes = [
        GateNote("error-rate", "fail", "sum(rate(errors[5m])) = 0.4, not < 0.05"),
        GateNote("alerts", "pass", "no alerts firing"),
    ]
    d = rollout.gates_judged(GATED, _between(GATED), notes, T0 + 41 * S)
    assert d.action is PhaseAction.HALT and d.halt is HaltReason.GATE
    assert d.reason == "pool a: gate error-rate failed: sum(rate(errors[5m])) = 0.4, not < 0.05"
    assert d.phase.state is PhaseState.HALTED and d.phase.halt_reason == d.reason
    assert d.phase.batches.gates == tuple(notes)
    # recorded halted: it stays halted, closing the switch if someone opened it
    after = decide(GATED, obs(33, open_=True), d.phase, T0 + 50 * S)
    assert after.action is PhaseAction.HALT and after.close


def test_inconclusive_retries_then_halts() -> None:
    unsure = [GateNote("error-rate", "inconclusive", "HTTP 503")]
    first = rollout.gates_judged(GATED, _between(GATED), unsure, T0 + 41 * S)
    assert first.action is PhaseAction.WAIT and first.until == T0 + 71 * S
    assert first.phase.state is PhaseState.BETWEEN
    assert first.phase.batches.gate_attempts == 1
    assert first.phase.batches.waiting == "gate inconclusive (1/1): error-rate: HTTP 503"
    # judged again later: the switch stays closed until then
    again = decide(GATED, obs(33, open_=False), first.phase, T0 + 71 * S)
    assert again.action is PhaseAction.CHECK_GATES
    second = rollout.gates_judged(GATED, again.phase, unsure, T0 + 72 * S)
    assert second.action is PhaseAction.HALT and second.halt is HaltReason.GATE
    assert second.reason == (
        "pool a: gate inconclusive 2 times in a row (gateRetries 1): error-rate: HTTP 503"
    )


def test_a_recovered_gate_after_an_inconclusive_one_goes_on() -> None:
    unsure = [GateNote("error-rate", "inconclusive", "HTTP 503")]
    first = rollout.gates_judged(GATED, _between(GATED), unsure, T0 + 41 * S)
    ok = [GateNote("error-rate", "pass", "0.01")]
    passed = rollout.gates_judged(GATED, first.phase, ok, T0 + 71 * S)
    assert passed.action is PhaseAction.WAIT and passed.phase.batches.gate_attempts == 0
    opened = decide(GATED, obs(33, open_=False), passed.phase, T0 + 71 * S)
    assert opened.action is PhaseAction.OPEN_SWITCH


def test_a_stale_gate_pass_is_judged_again() -> None:
    passed = rollout.gates_judged(
        GATED, _between(GATED), [GateNote("error-rate", "pass", "0")], T0 + 41 * S
    )
    late = T0 + 41 * S + rollout.GATES_FRESH + S
    assert decide(GATED, obs(33, open_=False), passed.phase, late).action is PhaseAction.CHECK_GATES


def test_without_gates_a_boundary_leaves_the_switch_open() -> None:
    policy = replace(GATED, gates=())
    d = decide(policy, obs(33, open_=True), _opened(policy), T0 + 40 * S)
    assert d.action is PhaseAction.WAIT and d.phase.state is PhaseState.ROLLING
    assert d.phase.batches.seconds == (40,)


def test_the_budget_shrinks_the_pinned_batch_at_a_boundary() -> None:
    policy = replace(GATED, gates=(), batch_percentage=40, max_unavailable=Share(2))
    phase = _opened(policy)
    assert phase.batch_percentage == 40
    # a person cordons gpu-4 during the first batch: 1 node left in the budget
    d = decide(policy, obs(40, open_=True, nodes=5, down=("gpu-4",)), phase, T0 + 40 * S)
    assert d.action is PhaseAction.CLOSE_SWITCH and d.phase.state is PhaseState.BETWEEN
    assert "shrunk to 20%" in d.phase.batches.waiting and "gpu-4" in d.phase.batches.waiting
    # issue 28 item 7: it opens again once the pinned interval (10 s) since the boundary is over
    early = decide(policy, obs(40, open_=False, nodes=5, down=("gpu-4",)), d.phase, T0 + 41 * S)
    assert early.action is PhaseAction.WAIT and early.until == T0 + 50 * S
    reopened = decide(policy, obs(40, open_=False, nodes=5, down=("gpu-4",)), d.phase, T0 + 50 * S)
    assert reopened.action is PhaseAction.OPEN_SWITCH and reopened.batch_percentage == 20


def test_the_budget_used_up_waits_naming_the_node_then_goes_on() -> None:
    policy = replace(GATED, gates=(), batch_percentage=20, max_unavailable=Share(1))
    new = PhaseProgress("pool/a/hypervisor")
    d = decide(policy, obs(0, open_=False, nodes=5, down=("gpu-2",)), new, T0)
    assert d.action is PhaseAction.WAIT and "gpu-2" in d.reason
    assert d.phase.batches.waiting == d.reason
    back = decide(policy, obs(0, open_=False, nodes=5), d.phase, T0 + 10 * S)
    assert back.action is PhaseAction.OPEN_SWITCH and back.batch_percentage == 20


def test_a_window_that_no_longer_fits_the_next_batch_closes_at_the_boundary() -> None:
    policy = replace(GATED, gates=())
    opened = decide(
        policy, obs(0, open_=False), PhaseProgress("pool/a/hypervisor"), T0 + timedelta(minutes=30)
    ).phase
    # the first batch took 20 minutes: 10 minutes are left, the next would not fit
    at = T0 + timedelta(minutes=50)
    d = decide(policy, obs(33, open_=True), opened, at)
    assert d.action is PhaseAction.CLOSE_SWITCH and d.phase.state is PhaseState.BETWEEN
    assert d.phase.batches.waiting == (
        "next batch (~20m00s, measured) does not fit in the 10m00s left of the maintenance window"
    )
    wait = decide(policy, obs(33, open_=False), d.phase, at + S)
    assert wait.action is PhaseAction.WAIT and wait.until == T0 + timedelta(days=1)
    nxt = decide(policy, obs(33, open_=False), wait.phase, T0 + timedelta(days=1))
    assert nxt.action is PhaseAction.OPEN_SWITCH


def test_a_pass_before_the_retry_interval_does_not_judge_again() -> None:
    unsure = [GateNote("error-rate", "inconclusive", "HTTP 503")]
    first = rollout.gates_judged(GATED, _between(GATED), unsure, T0 + 41 * S)
    assert first.phase.batches.gates_retry_at == T0 + 71 * S
    # the poll comes back 4s later: not a second judgement (it would use up gateRetries
    # in polls instead of gateRetryInterval apart)
    early = decide(GATED, obs(33, open_=False), first.phase, T0 + 45 * S)
    assert early.action is PhaseAction.WAIT and early.until == T0 + 71 * S
    assert early.phase.batches.gate_attempts == 1
    due = decide(GATED, obs(33, open_=False), early.phase, T0 + 71 * S)
    assert due.action is PhaseAction.CHECK_GATES


def test_the_retry_time_is_kept_in_the_journal() -> None:
    record = BatchRecord(from_progress=33, gate_attempts=1, gates_retry_at=T0 + 71 * S)
    data = batch_record.to_data(record)
    assert data["gates_retry_at"] == "2026-06-10T02:01:11+00:00"
    assert batch_record.from_data(data) == record
    assert "gates_retry_at" not in batch_record.to_data(BatchRecord(from_progress=33))
    # a new batch starts without it
    assert record.finished(66, T0 + 80 * S).gates_retry_at is None


# -- the budget is a bound whatever batchInterval says (issue 28 item 7) ---------------------

BUDGET = replace(GATED, gates=(), batch_percentage=100, batch_interval_seconds=1,
                 max_unavailable=Share(1))  # fmt: skip


def test_a_budget_pins_a_batch_interval_the_controller_cannot_outrun() -> None:
    # Two nodes, Git asks for both at once every 1 s: the bot opens at 50% (one node) with
    # batchInterval 10 s, so the controller waits long enough for the bot to see the boundary.
    d = decide(BUDGET, obs(0, open_=False, nodes=2), PhaseProgress("pool/a/hypervisor"), T0)
    assert d.action is PhaseAction.OPEN_SWITCH
    assert (d.batch_percentage, d.batch_interval_seconds) == (50, 10)
    # while the batch runs the bot looks at least every 2 s, well within those 10 s
    rolling = decide(BUDGET, obs(0, open_=True, nodes=2), d.phase, T0 + S)
    assert rolling.action is PhaseAction.WAIT and rolling.until is not None
    assert rolling.until <= T0 + 3 * S
    # Git's interval if longer; nothing pinned without a budget or for worker/client phases
    slow = replace(BUDGET, batch_interval_seconds=60)
    assert rollout.decide_phase(policy=slow, component=Component.HYPERVISOR,
                                observed=obs(0, open_=False, nodes=2),
                                phase=PhaseProgress("pool/a/hypervisor"), now=T0,
                                window=WINDOW).batch_interval_seconds == 60  # fmt: skip
    free = replace(BUDGET, max_unavailable=None)
    assert (
        decide(free, obs(0, open_=False, nodes=2), PhaseProgress("s"), T0).batch_interval_seconds
        is None
    )
    worker = rollout.decide_phase(policy=BUDGET, component=Component.WORKER,
                                  observed=obs(0, open_=False, nodes=2), phase=PhaseProgress("s"),
                                  now=T0, window=WINDOW)  # fmt: skip
    assert worker.action is PhaseAction.OPEN_SWITCH and worker.batch_interval_seconds is None


def test_a_budget_closes_the_switch_at_every_boundary_and_judges_it_when_the_interval_is_over() -> (
    None
):
    opened = decide(BUDGET, obs(0, open_=False, nodes=2), PhaseProgress("pool/a/hypervisor"), T0)
    # batch 1 done, nothing out of service: the switch closes all the same (Git's interval back)
    d = decide(BUDGET, obs(50, open_=True, nodes=2), opened.phase, T0 + 4 * S)
    assert d.action is PhaseAction.CLOSE_SWITCH and d.phase.state is PhaseState.BETWEEN
    assert d.batch_interval_seconds == 1
    assert (
        d.phase.batches.waiting == "batch finished at 50%: the availability budget judges the next"
    )
    # the pinned interval is not over: the switch stays closed, whatever the budget says
    wait = decide(BUDGET, obs(50, open_=False, nodes=2), d.phase, T0 + 5 * S)
    assert wait.action is PhaseAction.WAIT and wait.until == T0 + 14 * S
    assert "batchInterval 10s after the batch at 50%" in wait.reason
    # over: the budget is judged now; the first node went out of service meanwhile: it waits
    down = decide(BUDGET, obs(50, open_=False, nodes=2, down=("gpu-1",)), wait.phase, T0 + 14 * S)
    assert down.action is PhaseAction.WAIT and "used up" in down.reason and "gpu-1" in down.reason
    # back: the batch opens, and the controller starts it at once (its interval is over)
    back = decide(BUDGET, obs(50, open_=False, nodes=2), down.phase, T0 + 20 * S)
    assert back.action is PhaseAction.OPEN_SWITCH
    assert (back.batch_percentage, back.batch_interval_seconds) == (50, 10)
    # done: the switch closes with Git's interval back (the pin is never drift)
    done = decide(
        BUDGET, replace(obs(100, open_=True, nodes=2), synced=True), back.phase, T0 + 25 * S
    )
    assert done.action is PhaseAction.CLOSE_SWITCH and done.batch_interval_seconds == 1


def test_a_budget_looks_every_two_seconds_whatever_batch_interval_git_asks() -> None:
    slow = replace(BUDGET, batch_percentage=20, batch_interval_seconds=60)
    assert rollout.rolling_look(slow, 0) == rollout.POLL
    assert rollout.rolling_look(slow, 0, budget=True) == rollout.MIN_LOOK


# -- maxDuration bounds every wait of the bot's own (issue 28 item 4) ------------------------

BOUNDED = PoolPolicy(
    "a", batch_percentage=34, stall_timeout_seconds=600, max_unavailable=Share(1),
    max_duration_seconds=300,
)  # fmt: skip


def test_a_budget_wait_between_batches_counts_and_halts_at_max_duration() -> None:
    """A node out of service for good kept the next batch closed for ever: the clock stopped
    with the switch. It runs on between batches now, and the halt names what it waited for."""
    between = _between(BOUNDED)
    waits = decide(BOUNDED, obs(33, open_=False, down=("n3",)), between, T0 + 60 * S)
    assert waits.action is PhaseAction.WAIT and "budget" in waits.phase.batches.waiting
    assert phase_clock.active_seconds(waits.phase, T0 + 60 * S) == 60
    late = decide(BOUNDED, obs(33, open_=False, down=("n3",)), waits.phase, T0 + 301 * S)
    assert late.action is PhaseAction.HALT and late.halt is HaltReason.MAX_DURATION
    assert late.reason.startswith("pool a: maxDuration 300s exceeded at 33% while waiting for ")
    assert "budget" in late.reason


def test_the_time_the_first_batch_waits_for_its_gates_counts() -> None:
    d = decide(GATED, obs(0, open_=False), PhaseProgress("pool/a/hypervisor"), T0)
    assert d.action is PhaseAction.CHECK_GATES and d.phase.opened_at == T0


def test_a_hold_and_a_closed_window_still_stop_the_clock_between_batches() -> None:
    between = _between(BOUNDED)
    held = rollout.decide_phase(
        policy=BOUNDED, component=Component.HYPERVISOR, observed=obs(33, open_=False),
        phase=between, now=T0 + 60 * S, window=WINDOW, held="paused by @alice",
    )  # fmt: skip
    assert held.phase.opened_at is None and held.phase.open_seconds == 60
    # (no maxDuration here: an hour on the clock would have halted first)
    closed = rollout.decide_phase(
        policy=replace(BOUNDED, max_duration_seconds=None), component=Component.HYPERVISOR,
        observed=obs(33, open_=False), phase=between, now=T0 + 3700 * S, window=WINDOW,
    )  # fmt: skip
    assert closed.action is PhaseAction.WAIT and closed.phase.opened_at is None
    assert closed.phase.open_seconds == 3700
    # Reopened: the clock goes on from where it stopped, not from nothing.
    again = decide(BOUNDED, obs(33, open_=False), held.phase, T0 + 120 * S)
    assert again.action is PhaseAction.OPEN_SWITCH
    assert phase_clock.active_seconds(again.phase, T0 + 130 * S) == 70


def test_every_wait_of_the_bots_own_says_since_until_and_which_limit_ends_it() -> None:
    between = _between(BOUNDED)
    waits = decide(BOUNDED, obs(33, open_=False, down=("n3",)), between, T0 + 60 * S).phase
    b = waits.batches
    assert (b.waiting_since, b.waiting_until, b.waiting_limit) == (
        T0 + 60 * S,
        T0 + 300 * S,  # 60 s counted of 300
        "maxDuration (300s)",
    )
    shown = phase_view.batch_notes(waits)
    assert any(
        n.startswith("next batch waits: availability budget")
        and "until 2026-06-10 02:05:00Z at the latest, ended by maxDuration (300s)" in n
        for n in shown
    ), shown
    # The same reason on the next look: nothing new to record.
    again = decide(BOUNDED, obs(33, open_=False, down=("n3",)), waits, T0 + 90 * S).phase
    assert again.batches == waits.batches


def test_an_inconclusive_gate_says_when_its_retries_run_out() -> None:
    check = decide(GATED, obs(33, open_=False), _between(GATED), T0 + 41 * S)
    notes = [GateNote("error-rate", "inconclusive", "Prometheus answered 503")]
    retry = rollout.gates_judged(GATED, check.phase, notes, T0 + 42 * S)
    b = retry.phase.batches
    # gateRetries 1, 30 s apart: one more judgement at +30 s; inconclusive then, it halts.
    assert b.waiting_until == T0 + 72 * S
    assert b.waiting_limit == "gateRetries (1): still inconclusive then, it halts"
