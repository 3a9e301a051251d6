"""Pause in Git (docs/pause.md): ``paused:`` read with located errors; a held pool's switch
closes at the next batch boundary and reopens on resume; paused time never counts toward
maxDuration; a pause or resume commit reaches the running operation without queueing an
operation of its own; the hold's who/why is recorded on the state branch."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from gitopsbot.core.fleet.model import Component, PoolPolicy, RolloutPolicy
from gitopsbot.core.operations import pause
from gitopsbot.core.records import journal as journal_mod
from gitopsbot.core.records.journal import OperationStatus, PhaseProgress, PhaseState, StepState
from gitopsbot.core.rollouts import rollout
from gitopsbot.core.rollouts.rollout import PhaseAction, PoolObservation
from gitopsbot.errors import FleetError
from gitopsbot.fleetrepo import load_fleet
from tests.executor.conftest import Env, fleet_files, rollout_yaml
from tests.executor.test_reconciler_upgrade import drive
from tests.fleet.fleet_testing import MemoryTree

T0 = datetime(2026, 6, 10, 2, 0, tzinfo=UTC)
M = timedelta(minutes=1)
POOL = PoolPolicy("a", batch_percentage=25, max_duration_seconds=600, stall_timeout_seconds=300)


def _obs(progress: int = 0, *, open_: bool = False) -> PoolObservation:
    return PoolObservation(progress, False, open_, nodes=4)


def _decide(observed, phase, now, held=""):
    return rollout.decide_phase(
        policy=POOL,
        component=Component.HYPERVISOR,
        observed=observed,
        phase=phase,
        now=now,
        window=None,
        held=held,
    )


def _rolling(opened: datetime, progress: int = 25) -> PhaseProgress:
    return PhaseProgress(
        "pool/a/hypervisor",
        PhaseState.ROLLING,
        started_at=opened,
        opened_at=opened,
        progress=progress,
        last_progress_at=opened,
    )


# -- reading ---------------------------------------------------------------------------------


def test_paused_fields_are_read() -> None:
    text = rollout_yaml().replace("order: [a, b]\n", "order: [a, b]\npaused: true\n")
    text = text.replace("  b:\n", "  b:\n    paused: true\n")
    files = fleet_files("1.0.0", "hv:1")
    files["clusters/lab/rollout.yaml"] = text
    fleet = load_fleet(MemoryTree(files))
    policy = fleet.clusters["lab"].rollout
    assert policy.paused
    assert {p.name: p.paused for p in policy.pools} == {"a": False, "b": True}


def test_bad_paused_is_located() -> None:
    files = fleet_files("1.0.0", "hv:1")
    files["clusters/lab/rollout.yaml"] = rollout_yaml().replace(
        "  b:\n", "  b:\n    paused: yes please\n"
    )
    with pytest.raises(FleetError) as info:
        load_fleet(MemoryTree(files))
    text = str(info.value)
    assert "clusters/lab/rollout.yaml:13:13: pools.b.paused:" in text
    assert "expected true or false" in text


# -- the decision (pure) ---------------------------------------------------------------------


def test_held_closes_the_open_switch_and_records_who() -> None:
    d = _decide(_obs(25, open_=True), _rolling(T0), T0 + 2 * M, held="paused in Git (x)")
    assert d.action is PhaseAction.CLOSE_SWITCH
    assert d.phase.state is PhaseState.PAUSED and d.phase.paused_by == "paused in Git (x)"
    assert d.phase.opened_at is None and d.phase.open_seconds == 120
    assert d.until == T0 + 2 * M + rollout.POLL


def test_held_pending_phase_does_not_open() -> None:
    d = _decide(_obs(), PhaseProgress("pool/a/hypervisor"), T0, held="why")
    assert d.action is PhaseAction.WAIT
    assert d.phase.state is PhaseState.PENDING and d.phase.paused_by == "why"


def test_batch_in_flight_still_tracked_while_held() -> None:
    closed = _decide(_obs(25, open_=True), _rolling(T0), T0 + M, held="why").phase
    d = _decide(_obs(50), closed, T0 + 2 * M, held="why")
    assert d.action is PhaseAction.WAIT and d.phase.progress == 50


def test_killed_after_closing_before_recording_stops_the_clock_on_the_next_pass() -> None:
    # The journal still says ROLLING with the switch open since T0; the cluster shows it
    # closed (the bot closed it and died): held, the open interval ends now, recorded PAUSED.
    d = _decide(_obs(25), _rolling(T0), T0 + 3 * M, held="why")
    assert d.action is PhaseAction.WAIT
    assert d.phase.state is PhaseState.PAUSED and d.phase.paused_by == "why"
    assert d.phase.opened_at is None and d.phase.open_seconds == 180


def test_resume_reopens_and_clears_the_hold() -> None:
    closed = _decide(_obs(25, open_=True), _rolling(T0), T0 + M, held="why").phase
    d = _decide(_obs(25), closed, T0 + 30 * M)
    assert d.action is PhaseAction.OPEN_SWITCH and d.phase.paused_by == ""
    assert d.phase.state is PhaseState.ROLLING


def test_paused_time_does_not_count_toward_max_duration() -> None:
    # 4 minutes open, an hour held (maxDuration is 10 minutes), then resumed: no halt.
    closed = _decide(_obs(25, open_=True), _rolling(T0), T0 + 4 * M, held="why").phase
    held = _decide(_obs(25), closed, T0 + 65 * M, held="why")
    assert held.action is PhaseAction.WAIT
    resumed = _decide(_obs(25), held.phase, T0 + 66 * M)
    assert resumed.action is PhaseAction.OPEN_SWITCH
    still = _decide(_obs(25, open_=True), resumed.phase, T0 + 70 * M)
    assert still.action is PhaseAction.WAIT  # 8 minutes open
    late = _decide(_obs(25, open_=True), resumed.phase, T0 + 72 * M)
    assert late.action is PhaseAction.HALT and "maxDuration" in late.reason


def test_canary_batch_finished_while_held_is_verified_not_rerun() -> None:
    policy = PoolPolicy("a", batch_percentage=50, canary_batch_percentage=25)
    canary = PhaseProgress("pool/a/hypervisor", PhaseState.CANARY, opened_at=T0, started_at=T0)
    d = rollout.decide_phase(
        policy=policy,
        component=Component.HYPERVISOR,
        observed=_obs(25, open_=True),
        phase=canary,
        now=T0 + M,
        window=None,
        held="why",
    )
    assert d.action is PhaseAction.CLOSE_SWITCH and d.phase.state is PhaseState.CANARY_VERIFY


def test_holds_from_policy_and_pause_only() -> None:
    base = RolloutPolicy(pools=(PoolPolicy("a"), PoolPolicy("b")))
    pool_b = RolloutPolicy(pools=(PoolPolicy("a"), PoolPolicy("b", paused=True)))
    holds = pause.from_policy(pool_b, "rollout.yaml at abc")
    assert holds.reason("b") and not holds.reason("a")
    everything = pause.from_policy(RolloutPolicy(pools=base.pools, paused=True), "w")
    assert everything.reason("a") and everything.reason("z")
    assert pause.pause_only(base, pool_b) and pause.pause_only(pool_b, base)
    assert not pause.pause_only(base, base)
    other = RolloutPolicy(pools=(PoolPolicy("a"), PoolPolicy("b", paused=True, nodes=3)))
    assert not pause.pause_only(base, other)


def test_merged_holds_say_each_reason_once() -> None:
    a = pause.Holds(cluster="c", pools={"b": "x"})
    both = pause.merged(a, a, pause.Holds(pools={"b": "y"}))
    assert both.cluster == "c" and both.pools == {"b": "x; y"}


def test_paused_by_round_trips_in_the_journal() -> None:
    j = journal_mod.Journal("op", journal_mod.OperationKind.UPGRADE, "lab", "s" * 40, T0)
    j = journal_mod.replace(j, phases=(PhaseProgress("pool/a/hypervisor", paused_by="x y"),))
    assert journal_mod.loads(journal_mod.dumps(j)) == j
    plain = journal_mod.replace(j, phases=(PhaseProgress("pool/a/hypervisor"),))
    assert "paused_by" not in journal_mod.dumps(plain)


# -- through the reconciler ------------------------------------------------------------------


def _files(*, paused: str = "") -> dict[str, str]:
    """hv:2 with pool b in batches of 25% (four batches) and a 10-minute maxDuration;
    ``paused``: the pool held in Git."""
    files = fleet_files("1.0.0", "hv:2", max_duration="10m")
    text = files["clusters/lab/rollout.yaml"]
    head, b = text.split("  b:\n")
    b = b.replace("batchPercentage: 50", "batchPercentage: 25")
    text = f"{head}  b:\n{b}"
    if paused:
        text = text.replace(f"  {paused}:\n", f"  {paused}:\n    paused: true\n")
    files["clusters/lab/rollout.yaml"] = text
    return files


def test_pause_and_resume_in_git_during_a_batched_rollout(env: Env) -> None:
    env.world.nodes["b"] = 4
    rec = env.reconciler()
    rec.reconcile("lab")
    env.merge_pr(5, "lab: hv:2", _files())
    for _ in range(60):  # until the bot saw b's first batch, its switch open
        rec.reconcile("lab")
        j = rec.store.current("lab")
        if j.phase("pool/b/hypervisor").progress == 25 and env.world.switch("b"):
            break
        env.world.tick()
        env.clock.t += M
    else:
        raise AssertionError(rec.store.current("lab"))
    op = j.op_id

    # A person pauses pool b in Git: the running operation closes b's switch; no new
    # operation is queued for the pause commit.
    pause_sha = env.human.commit("pause b", _files(paused="b"))
    rec.reconcile("lab")
    j = rec.store.current("lab")
    assert j.op_id == op and rec.store.queued("lab") is None
    assert not env.world.switch("b")
    phase = j.phase("pool/b/hypervisor")
    assert phase.state is PhaseState.PAUSED
    assert phase.paused_by == (
        f"paused in Git (clusters/lab/rollout.yaml at {pause_sha[:12]}, pool b)"
    )
    assert rec.store.seen("lab") == pause_sha

    # Held for an hour, far past maxDuration (10m): nothing moves, nothing halts.
    for _ in range(6):
        env.clock.t += 10 * M
        rec.reconcile("lab")
        env.world.tick()
    j = rec.store.current("lab")
    assert j.status is OperationStatus.RUNNING, j.failure
    assert j.phase("pool/b/hypervisor").progress == 25 and not env.world.switch("b")

    # Resumed in Git: the switch opens again and the rollout finishes.
    env.human.commit("resume b", _files())
    rec.reconcile("lab")
    assert env.world.switch("b")
    assert rec.store.current("lab").phase("pool/b/hypervisor").paused_by == ""
    done = drive(env, rec)
    assert done.op_id == op and done.status is OperationStatus.SUCCEEDED, done.failure
    assert env.world.images() == {"hv:2"} and not env.world.switch("b")


def test_cluster_pause_holds_a_pool_not_yet_started(env: Env) -> None:
    rec = env.reconciler()
    rec.reconcile("lab")
    files = fleet_files("1.0.0", "hv:2")
    files["clusters/lab/rollout.yaml"] = "paused: true\n" + files["clusters/lab/rollout.yaml"]
    env.merge_pr(6, "lab: hv:2, paused", files)
    for _ in range(20):
        rec.reconcile("lab")
        env.world.tick()
        env.clock.t += M
    j = rec.store.current("lab")
    assert j.status is OperationStatus.RUNNING
    assert j.step("pool/a/hypervisor").state is StepState.PENDING
    assert "paused in Git" in j.phase("pool/a/hypervisor").paused_by
    assert not env.world.switch("a") and env.world.images() == {"hv:1"}
    env.human.commit("resume", fleet_files("1.0.0", "hv:2"))
    assert drive(env, rec).status is OperationStatus.SUCCEEDED
