"""core.workload_wait: the wait decision for each until/onTimeout, the timeout edge, and
what counts as an active GPU session or an opt-out pod."""

from __future__ import annotations

from typing import Any

import pytest

from gitopsbot.core.rollouts.workload_wait import (
    OPT_OUT_ANNOTATION,
    OnTimeout,
    Until,
    WorkloadSnapshot,
    WorkloadWait,
    decide_wait,
    is_active_session,
    snapshot_of,
)

BUSY = WorkloadSnapshot(
    workloads=("ml/train",),
    sessions=("connection ml/c1 (workload train, worker w1)",),
    opt_outs=("pod ml/app-1",),
)
IDLE = WorkloadSnapshot(workloads=("ml/train",))


def wait(until: Until = "no-active-session", on_timeout: OnTimeout = "skip-window") -> WorkloadWait:
    return WorkloadWait("team=ml", "ml", until, 600, on_timeout)


@pytest.mark.parametrize("until", ["no-active-session", "opt-out-gone"])
@pytest.mark.parametrize("on_timeout", ["proceed", "skip-window", "halt"])
def test_nothing_blocking_proceeds_at_once_and_after_the_timeout(
    until: Until, on_timeout: OnTimeout
) -> None:
    for waited in (0, 599, 600, 10_000):
        got = decide_wait(wait(until, on_timeout), IDLE, waited)
        assert got.action == "proceed" and got.blockers == ()


@pytest.mark.parametrize("until", ["no-active-session", "opt-out-gone"])
@pytest.mark.parametrize("on_timeout", ["proceed", "skip-window", "halt"])
def test_blocked_waits_until_the_timeout_then_follows_on_timeout(
    until: Until, on_timeout: OnTimeout
) -> None:
    w = wait(until, on_timeout)
    blockers = BUSY.sessions if until == "no-active-session" else BUSY.opt_outs
    before = decide_wait(w, BUSY, 599.9)
    assert before.action == "wait" and before.blockers == blockers
    assert "waited 599s of 600s" in before.reason
    # The edge: at exactly the timeout the wait has expired.
    for waited in (600, 601):
        after = decide_wait(w, BUSY, waited)
        assert after.action == on_timeout and after.blockers == blockers
        assert f"onTimeout: {on_timeout}" in after.reason


def test_each_until_looks_only_at_its_own_blockers() -> None:
    only_sessions = WorkloadSnapshot(sessions=("connection ml/c1",))
    only_opt_outs = WorkloadSnapshot(opt_outs=("pod ml/app-1",))
    assert decide_wait(wait("opt-out-gone"), only_sessions, 0).action == "proceed"
    assert decide_wait(wait("no-active-session"), only_opt_outs, 0).action == "proceed"


def test_zero_timeout_checks_once() -> None:
    w = WorkloadWait("", None, "no-active-session", 0, "halt")
    assert decide_wait(w, BUSY, 0).action == "halt"
    assert decide_wait(w, IDLE, 0).action == "proceed"
    assert "all namespaces" in decide_wait(w, IDLE, 0).reason


def meta(name: str, ns: str = "ml", **extra: Any) -> dict[str, Any]:
    return {"name": name, "namespace": ns, **extra}


def connection(name: str, workload: str, phase: str, worker: str = "") -> dict[str, Any]:
    return {
        "kind": "TensorFusionConnection",
        "metadata": meta(name, labels={"tensor-fusion.ai/workload": workload}),
        "spec": {"workloadName": workload, "clientPod": name},
        "status": {"phase": phase, "workerName": worker},
    }


def app_pod(
    name: str, workload: str, *, local: bool = False, phase: str = "Running", **ann: str
) -> Any:
    labels = {
        "tensor-fusion.ai/enabled": "true",
        "tensor-fusion.ai/component": "worker" if local else "client",
    }
    annotations = dict(ann)
    if local:
        labels["tensor-fusion.ai/workload"] = workload
    else:
        annotations["tensor-fusion.ai/selected-workload"] = workload
    return {
        "kind": "Pod",
        "metadata": meta(name, labels=labels, annotations=annotations),
        "status": {"phase": phase},
    }


def test_an_active_session_is_a_running_connection() -> None:
    # WorkerPhase: Running once the selected worker pod runs; Pending before; Failed after.
    assert is_active_session(connection("c", "w", "Running", "w-1"))
    assert not is_active_session(connection("c", "w", "Pending"))
    assert not is_active_session(connection("c", "w", "Failed"))
    assert not is_active_session({"metadata": meta("c")})


def test_snapshot_names_workloads_from_pods_and_keeps_other_workloads_out() -> None:
    w = wait()
    pods = [app_pod("app-1", "train"), app_pod("local-1", "infer", local=True)]
    connections = [
        connection("app-1", "train", "Running", "app-1"),
        connection("other", "someone-elses", "Running", "other"),  # not named
        connection("app-2", "train", "Pending"),  # not active
        {
            **connection("x", "train", "Running", "x"),
            "metadata": meta("x", "other-ns", labels={"tensor-fusion.ai/workload": "train"}),
        },
    ]
    got = snapshot_of(w, pods=pods, workloads=[], connections=connections)
    assert got.workloads == ("ml/infer", "ml/train")
    assert got.sessions == (
        "connection ml/app-1 (workload train, worker app-1)",
        "local-GPU pod ml/local-1 (workload infer)",
    )
    assert got.opt_outs == ()


def test_opt_out_pods_block_until_gone() -> None:
    w = wait("opt-out-gone")
    pods = [
        app_pod("a", "train", **{OPT_OUT_ANNOTATION: "true"}),
        app_pod("b", "train", **{OPT_OUT_ANNOTATION: ""}),  # present: opts out
        app_pod("c", "train", **{OPT_OUT_ANNOTATION: "false"}),  # explicitly not
        app_pod("d", "train", phase="Succeeded", **{OPT_OUT_ANNOTATION: "true"}),  # gone
        app_pod("e", "train"),
    ]
    got = snapshot_of(w, pods=pods, workloads=[], connections=[])
    assert got.opt_outs == ("pod ml/a", "pod ml/b")
    assert decide_wait(w, got, 0).action == "wait"
    custom = WorkloadWait("", None, "opt-out-gone", 60, "proceed", "example.com/keep")
    assert snapshot_of(custom, pods=pods, workloads=[], connections=[]).opt_outs == ()
