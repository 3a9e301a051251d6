"""A workload wait's reason names its blockers (the first three; the rest are counted), so the
journal's waiting line and ``status`` say what holds the batch."""

from __future__ import annotations

from gitopsbot.core.rollouts.workload_wait import WorkloadSnapshot, WorkloadWait, decide_wait

WAIT = WorkloadWait("team=ml", "ml", "no-active-session", 60, "halt")


def test_the_reason_names_the_blockers() -> None:
    one = WorkloadSnapshot(sessions=("connection ml/a (workload t, worker w)",))
    got = decide_wait(WAIT, one, 3)
    assert got.action == "wait"
    assert got.reason == (
        "1 active GPU session (selector 'team=ml' in namespace ml: "
        "connection ml/a (workload t, worker w)); waited 3s of 60s"
    )


def test_many_blockers_are_counted_after_three() -> None:
    many = WorkloadSnapshot(sessions=("a", "b", "c", "d", "e"))
    got = decide_wait(WAIT, many, 60)
    assert got.action == "halt" and got.blockers == ("a", "b", "c", "d", "e")
    assert "(selector 'team=ml' in namespace ml: a, b, c and 2 more)" in got.reason
