"""core.node_states: each node's state through a hypervisor rollout, and its journal form."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from gitopsbot.core.records import node_states as ns
from gitopsbot.core.records.node_states import NodeRecord, NodeSnapshot, NodeState

T0 = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)


def at(minutes: int) -> datetime:
    return T0 + timedelta(minutes=minutes)


def snap(
    name: str,
    *,
    updated: bool = False,
    ready: bool = True,
    cordoned: bool = False,
    moving: bool = False,
) -> NodeSnapshot:
    return NodeSnapshot(name, updated, ready, cordoned, moving)


def by_name(records: tuple[NodeRecord, ...]) -> dict[str, NodeRecord]:
    return {r.name: r for r in records}


def test_a_node_goes_pending_in_batch_updated_verified() -> None:
    r = ns.advance((), [snap("b"), snap("a")], batch=0, gate_hold="", now=at(0))
    assert [(x.name, x.state, x.batch) for x in r] == [
        ("a", NodeState.PENDING, 0),
        ("b", NodeState.PENDING, 0),
    ]
    r = ns.advance(
        r, [snap("a", moving=True, ready=False), snap("b")], batch=1, gate_hold="", now=at(1)
    )
    a = by_name(r)["a"]
    assert (a.state, a.batch, a.since) == (NodeState.IN_BATCH, 1, at(1))
    assert by_name(r)["b"].since == at(0)  # unchanged: keeps its since
    # Still replacing at the next look: the same record.
    again = ns.advance(r, [snap("a", moving=True), snap("b")], batch=1, gate_hold="", now=at(2))
    assert by_name(again)["a"] == NodeRecord("a", NodeState.IN_BATCH, 1, at(1))
    r = ns.advance(again, [snap("a", updated=True), snap("b")], batch=2, gate_hold="", now=at(3))
    a = by_name(r)["a"]
    assert (a.state, a.batch, a.since) == (NodeState.UPDATED, 1, at(3))  # batch 1 took it
    r = ns.verified(r, ns.names_in(r, NodeState.UPDATED), at(4))
    assert by_name(r)["a"] == NodeRecord("a", NodeState.VERIFIED, 1, at(4))
    assert by_name(r)["b"].state is NodeState.PENDING
    # Verified stays verified while it runs the target and is Ready.
    r = ns.advance(r, [snap("a", updated=True), snap("b")], batch=2, gate_hold="", now=at(5))
    assert by_name(r)["a"] == NodeRecord("a", NodeState.VERIFIED, 1, at(4))


def test_a_node_seen_updated_first_gets_the_running_batch() -> None:
    r = ns.advance((), [snap("a", updated=True)], batch=3, gate_hold="", now=at(0))
    assert r == (NodeRecord("a", NodeState.UPDATED, 3, at(0)),)


def test_before_the_first_batch_no_batch_takes_a_node() -> None:
    moving = [snap("a", moving=True, ready=False), snap("b", updated=True, ready=False)]
    r = ns.advance((), moving, batch=0, gate_hold="", now=at(0))
    assert [(x.state, x.batch, x.detail) for x in r] == [
        (NodeState.PENDING, 0, "hypervisor not Running/Ready"),
        (NodeState.PENDING, 0, "not Ready"),
    ]
    r = ns.advance(r, moving, batch=1, gate_hold="", now=at(1))
    assert [(x.state, x.batch) for x in r] == [(NodeState.IN_BATCH, 1)] * 2


def test_a_cordoned_node_is_never_counted_done() -> None:
    r = ns.advance((), [snap("a", updated=True, cordoned=True)], batch=1, gate_hold="", now=at(0))
    assert r[0].state is NodeState.CORDONED
    r = ns.verified(r, ["a"], at(1))
    assert r[0].state is NodeState.CORDONED
    c = ns.counts(r)
    assert c[NodeState.UPDATED] == c[NodeState.VERIFIED] == 0
    assert c[NodeState.CORDONED] == 1
    # Uncordoned: it counts again.
    r = ns.advance(r, [snap("a", updated=True)], batch=1, gate_hold="", now=at(2))
    assert (r[0].state, r[0].batch) == (NodeState.UPDATED, 1)


def test_a_gate_holds_the_nodes_not_taken() -> None:
    first = [snap("a", updated=True), snap("b", moving=True), snap("c")]
    r = ns.advance((), first, batch=1, gate_hold="", now=at(0))
    held = "window closed (opens 02:00 UTC)"
    r = ns.advance(r, first, batch=1, gate_hold=held, now=at(1))
    got = {x.name: (x.state, x.detail) for x in r}
    assert got == {
        "a": (NodeState.UPDATED, ""),
        "b": (NodeState.IN_BATCH, ""),  # a replacement under way is not held
        "c": (NodeState.HELD, held),
    }
    # Released: pending again.
    r = ns.advance(r, first, batch=1, gate_hold="", now=at(2))
    assert by_name(r)["c"] == NodeRecord("c", NodeState.PENDING, 0, at(2))


def test_failed_stays_until_a_check_passes() -> None:
    r = ns.advance((), [snap("a", updated=True), snap("b")], batch=1, gate_hold="", now=at(0))
    r = ns.failed(r, ["a"], "hypervisor pod\nCrashLoopBackOff", at(1))
    assert by_name(r)["a"] == NodeRecord(
        "a", NodeState.FAILED, 1, at(1), "hypervisor pod CrashLoopBackOff"
    )
    r = ns.advance(r, [snap("a", updated=True), snap("b")], batch=1, gate_hold="", now=at(2))
    assert by_name(r)["a"].state is NodeState.FAILED
    r = ns.verified(r, ["a"], at(3))
    assert by_name(r)["a"] == NodeRecord("a", NodeState.VERIFIED, 1, at(3))


def test_a_node_gone_from_the_pool_is_dropped_and_duplicates_count_once() -> None:
    r = ns.advance((), [snap("a"), snap("b")], batch=0, gate_hold="", now=at(0))
    r = ns.advance(r, [snap("b"), snap("b")], batch=0, gate_hold="", now=at(1))
    assert [x.name for x in r] == ["b"]


def test_summary_and_counts() -> None:
    records = (
        NodeRecord("n1", NodeState.VERIFIED, 1, T0),
        NodeRecord("n2", NodeState.VERIFIED, 1, T0),
        NodeRecord("n3", NodeState.VERIFIED, 2, T0),
        NodeRecord("n4", NodeState.IN_BATCH, 3, T0),
        NodeRecord("n5", NodeState.IN_BATCH, 3, T0),
        NodeRecord("n6", NodeState.PENDING, 0, T0),
        NodeRecord("n7", NodeState.PENDING, 0, T0),
        NodeRecord("n8", NodeState.PENDING, 0, T0),
    )
    assert ns.summary(records) == "8 nodes: 3 verified, 2 in batch 3, 3 pending"
    assert ns.summary(records[:1]) == "1 node: 1 verified"
    assert ns.summary(()) == ""
    assert list(ns.counts(records)) == list(ns.ORDER)
    assert set(ns.ORDER) == set(NodeState)
    assert sum(ns.counts(records).values()) == 8


def test_a_restart_reads_back_what_was_written() -> None:
    records = (
        NodeRecord("a", NodeState.VERIFIED, 1, at(3)),
        NodeRecord("b", NodeState.HELD, 0, at(4), "paused by @alice: disk alarm"),
        NodeRecord("c", NodeState.FAILED, 2, at(5), "not Ready"),
    )
    data = ns.to_data(records)
    assert data[1] == {
        "name": "b",
        "state": "held",
        "batch": 0,
        "since": "2026-12-04T12:04:00+00:00",
        "detail": "paused by @alice: disk alarm",
    }
    assert "detail" not in data[0]
    assert ns.from_data(data) == records
    # Resumed after the restart: batch 1's node keeps its batch and state.
    again = ns.advance(
        ns.from_data(data),
        [snap("a", updated=True), snap("b"), snap("c", updated=True)],
        batch=2,
        gate_hold="",
        now=at(9),
    )
    assert by_name(again)["a"] == records[0]


@pytest.mark.parametrize("data", [None, {}, "nodes", 3, [None], [[]]])
def test_old_or_missing_data_is_no_record(data: Any) -> None:
    assert ns.from_data(data) == ()


def test_malformed_entries_are_skipped() -> None:
    good = {"name": "ok", "state": "updated", "batch": 2, "since": "2026-12-04T12:00:00+00:00"}
    data = [
        good,
        {**good, "name": ""},
        {**good, "name": 7},
        {**good, "name": "x1", "state": "exploded"},
        {**good, "name": "x2", "batch": -1},
        {**good, "name": "x3", "batch": "2"},
        {**good, "name": "x4", "batch": True},
        {**good, "name": "x5", "since": "yesterday"},
        {**good, "name": "x6", "since": None},
        {**good, "name": "ok", "state": "failed"},  # a duplicate: the first counts
        {**good, "name": "naive", "since": T0.replace(tzinfo=None), "detail": 5},
    ]
    got = ns.from_data(data)
    assert [r.name for r in got] == ["naive", "ok"]
    assert got[0].since == T0 and got[0].detail == ""
    assert got[1].state is NodeState.UPDATED


def test_a_halt_fails_only_the_nodes_a_batch_took_and_no_check_verified() -> None:
    # issue 28 item 8: a gate failing at 0% (before the first batch) blames no node; the
    # nodes of the batch the failed check judged (in batch, or back but not verified: the
    # GPU canary's node) are failed
    why = "pool shared: gate error-rate failed"
    before = (
        NodeRecord("a", NodeState.IN_BATCH, 2, at(1)),  # taken by batch 2, not back
        NodeRecord("b", NodeState.UPDATED, 2, at(1)),  # back, judged by the failed check
        NodeRecord("c", NodeState.PENDING, 0, at(0)),
        NodeRecord("d", NodeState.CORDONED, 0, at(0), "cordoned (spec.unschedulable)"),
        NodeRecord("e", NodeState.HELD, 0, at(0), "gates before the batch at 50%"),
        NodeRecord("f", NodeState.VERIFIED, 1, at(1)),  # verified after batch 1
    )
    r = by_name(ns.halted(before, why, at(2)))
    assert r["a"] == NodeRecord("a", NodeState.FAILED, 2, at(2), why)
    assert r["b"] == NodeRecord("b", NodeState.FAILED, 2, at(2), why)
    assert [r[n] for n in "cdef"] == list(before[2:])


def test_a_gate_failing_before_the_first_batch_leaves_every_node_as_it_was() -> None:
    # Before the first batch no batch took a node, even one the controller already replaced
    # on its own (facts §3.4) or one restarting: the halt at 0% marks none failed.
    snaps = [snap("a"), snap("b", updated=True), snap("c", moving=True, ready=False)]
    r = ns.advance((), snaps, batch=0, gate_hold="", now=at(0))
    r = ns.halted(r, "pool shared: gate error-rate failed: 0.93", at(1))
    assert [(x.name, x.state, x.batch) for x in r] == [
        ("a", NodeState.PENDING, 0),
        ("b", NodeState.UPDATED, 0),
        ("c", NodeState.PENDING, 0),
    ]
    assert ns.counts(r)[NodeState.FAILED] == 0
    assert "failed" not in ns.summary(r)
