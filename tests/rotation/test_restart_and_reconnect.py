"""R20's batched hypervisor restart and R18's reconnect check, decided from snapshots
(core.hypervisor_restart, core.agent_reconnect)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from gitopsbot.core.rollouts.agent_reconnect import AgentPod, Judgement, Verdict, judge
from gitopsbot.core.rollouts.hypervisor_restart import Action, Decision, HypervisorPod, decide

T0 = datetime(2026, 12, 4, 2, 0, tzinfo=UTC)


def pods(n: int, *, created: datetime, ready: bool = True) -> list[HypervisorPod]:
    return [HypervisorPod(f"hypervisor-n{i}", f"n{i}", created, ready) for i in range(n)]


def look(ps: list[HypervisorPod], now: datetime, **kw: object) -> Decision:
    args: dict[str, object] = {
        "pool": "inference",
        "vector_on": True,
        "started_at": T0,
        "now": now,
        "batch_percentage": 25,
        "batch_interval_seconds": 60,
        "window_open": True,
        "window_opens_at": None,
        "max_duration_seconds": 3600,
        "expected": len(ps),
    }
    args.update(kw)
    return decide(ps, **args)  # type: ignore[arg-type]


def test_vector_off_is_skipped() -> None:
    d = look(pods(4, created=T0 - timedelta(days=1)), T0, vector_on=False)
    assert d.action is Action.SKIP and "vector sidecar off" in d.reason


def test_batches_walk_the_pool_oldest_name_first_and_never_delete_a_new_pod() -> None:
    old = T0 - timedelta(days=1)
    fleet = pods(8, created=old)
    now = T0 + timedelta(seconds=2)
    deleted: list[str] = []
    for _ in range(10):
        d = look(fleet, now)
        if d.action is Action.DONE:
            break
        if d.action is Action.WAIT:
            now = d.until or now + timedelta(seconds=5)
            continue
        assert d.action is Action.DELETE
        assert len(d.delete) == 2  # ceil(25% of 8)
        deleted += d.delete
        # The controller recreates them, ready, a moment later.
        fleet = [
            HypervisorPod(p.name, p.node, now + timedelta(seconds=1), True)
            if p.name in d.delete
            else p
            for p in fleet
        ]
        now += timedelta(seconds=1)
    assert sorted(deleted) == sorted(p.name for p in pods(8, created=old))
    assert len(set(deleted)) == len(deleted)  # nobody twice


def test_a_batch_in_flight_waits_then_the_interval_then_the_window() -> None:
    old = T0 - timedelta(days=1)
    fleet = pods(4, created=old)
    fleet[0] = HypervisorPod("hypervisor-n0", "n0", T0 + timedelta(seconds=5), ready=False)
    now = T0 + timedelta(seconds=10)
    assert look(fleet, now).action is Action.WAIT
    missing = fleet[1:]  # deleted, not recreated yet
    d = look(missing, now, expected=4)
    assert d.action is Action.WAIT and "not recreated" in d.reason
    fleet[0] = HypervisorPod("hypervisor-n0", "n0", T0 + timedelta(seconds=5), ready=True)
    d = look(fleet, now)
    assert d.action is Action.WAIT and d.until == T0 + timedelta(seconds=65)
    opens = T0 + timedelta(hours=20)
    d = look(fleet, T0 + timedelta(seconds=70), window_open=False, window_opens_at=opens)
    assert d.action is Action.WAIT and d.until == opens
    assert look(fleet, T0 + timedelta(seconds=70)).action is Action.DELETE


def test_max_duration_fails_naming_what_is_left() -> None:
    d = look(pods(3, created=T0 - timedelta(days=1)), T0 + timedelta(hours=2))
    assert d.action is Action.FAIL
    assert "maxDuration" in d.reason and "3 pod(s)" in d.reason


def test_the_first_second_waits_so_whole_second_timestamps_cannot_lie() -> None:
    d = look(pods(2, created=T0 - timedelta(days=1)), T0 + timedelta(milliseconds=300))
    assert d.action is Action.WAIT and d.until == T0 + timedelta(seconds=1)


def test_all_new_and_ready_is_done() -> None:
    d = look(pods(3, created=T0 + timedelta(seconds=3)), T0 + timedelta(minutes=5))
    assert d.action is Action.DONE


# -- R18 -----------------------------------------------------------------------------------

CONNECTED = "2026-12-04T02:00:03Z INFO connected to TensorFusion console as agent a-1\n"
REFUSED = "2026-12-04T02:00:03Z ERROR enroll rejected by TensorFusion console: 401 unauthorized\n"


def j(*ps: AgentPod, after: int = 5, timeout: int = 600) -> Judgement:
    return judge(ps, started_at=T0, now=T0 + timedelta(seconds=after), timeout_seconds=timeout)


def test_connected_in_every_pod_passes() -> None:
    got = j(AgentPod("c-1", True, CONNECTED), AgentPod("c-2", True, CONNECTED))
    assert got.verdict is Verdict.CONNECTED


def test_a_refusal_fails_at_once_without_quoting_the_log() -> None:
    log = REFUSED.replace("unauthorized", "unauthorized token=s3cr3t-canary")
    got = j(AgentPod("c-1", True, log), AgentPod("c-2", True, CONNECTED))
    assert got.verdict is Verdict.FAILED
    assert "c-1" in got.detail and "s3cr3t-canary" not in got.detail


@pytest.mark.parametrize(
    "line",
    ["agent disconnected from console", "console not connected, retrying", "starting agent"],
)
def test_no_connection_waits_then_fails_after_the_timeout(line: str) -> None:
    pod = AgentPod("c-1", True, f"2026-12-04T02:00:03Z INFO {line}\n")
    assert j(pod).verdict is Verdict.WAIT
    late = j(pod, after=601)
    assert late.verdict is Verdict.FAILED and "within 600s" in late.detail


def test_no_agent_container_fails_after_the_timeout_saying_why() -> None:
    assert j().verdict is Verdict.WAIT
    late = j(after=700)
    assert "agentId" in late.detail


def test_a_pod_going_away_does_not_count_and_an_unready_one_is_not_done() -> None:
    going = AgentPod("old", False, "", deleting=True)
    assert j(going, AgentPod("c-1", True, CONNECTED)).verdict is Verdict.CONNECTED
    assert j(AgentPod("c-1", False, CONNECTED)).verdict is Verdict.WAIT
