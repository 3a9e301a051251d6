"""The rollout state machine as a pure function (facts §3.2): progress semantics, the switch,
resume, the interval, pauses, and the division-by-zero stall of batchPercentage 0."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from gitopsbot.sandbox.simulator.hashing import object_hash
from gitopsbot.sandbox.simulator.rollout import (
    Component,
    Inventory,
    Policy,
    decide,
    format_time,
    parse_go_duration,
)

H = Component.HYPERVISOR
NOW = datetime(2026, 3, 1, tzinfo=UTC)
ON = Policy(True, timedelta(seconds=1), 20)
IN_PROGRESS = "tensor-fusion.ai/hypervisor-update-in-progress"
LAST_TIME = "tensor-fusion.ai/hypervisor-batch-update-last-time"


def test_fnv1a_64_known_vectors() -> None:
    # Published FNV-1a 64 test vectors.
    assert object_hash("") == "cbf29ce484222325"
    assert object_hash("a") == "af63dc4c8601ec8c"
    assert object_hash("foobar") == "85944171f73967e8"


def test_first_sight_records_hash_without_rollout() -> None:
    d = decide(
        H,
        status={},
        annotations={},
        new_hash="h1",
        policy=ON,
        inventory=Inventory(3, 0, False, ("a", "b", "c")),
        now=NOW,
    )
    assert d.status == {"hash": "h1"} and not d.update and not d.annotations


def test_switch_off_records_new_hash_and_waits() -> None:
    off = Policy(False, timedelta(seconds=1), 20)
    status = {"hypervisor": "h1", "hypervisorUpdateProgress": 100, "hypervisorConfigSynced": True}
    d = decide(
        H,
        status=status,
        annotations={},
        new_hash="h2",
        policy=off,
        inventory=Inventory(3, 0, False, ("a", "b", "c")),
        now=NOW,
    )
    assert d.status == {"hash": "h2"}  # progress 0 and synced false: absent (omitempty)
    assert not d.update


def test_three_nodes_at_twenty_percent_one_per_batch_then_noop_batches() -> None:
    # The example from facts §3.2: one node per batch at 0, 20, 40, then no-ops to 100.
    status = {"hypervisor": "h1", "hypervisorUpdateProgress": 100, "hypervisorConfigSynced": True}
    d = decide(
        H,
        status=status,
        annotations={},
        new_hash="h2",
        policy=ON,
        inventory=Inventory(3, 0, False, ("a", "b", "c")),
        now=NOW,
    )
    assert d.update == ("a",) and d.annotations[IN_PROGRESS] == "h2"
    status = {"hypervisor": "h2"}
    ann = {IN_PROGRESS: "h2", LAST_TIME: ""}
    progress_seen = []
    updated = 1
    now = NOW
    for _ in range(10):
        d = decide(
            H,
            status=status,
            annotations=ann,
            new_hash="h2",
            policy=ON,
            inventory=Inventory(3, updated, False, ("b", "c")[: 3 - updated]),
            now=now,
        )
        if d.update:
            updated += len(d.update)
            continue
        assert d.status is not None
        progress_seen.append(d.status.get("progress", 0))
        status = {"hypervisor": "h2", "hypervisorUpdateProgress": d.status.get("progress", 0)}
        if d.status.get("synced"):
            assert d.annotations == {IN_PROGRESS: None, LAST_TIME: None}
            break
        ann = {IN_PROGRESS: "h2", LAST_TIME: d.annotations[LAST_TIME]}
        # Before the interval: nothing.
        early = decide(
            H,
            status=status,
            annotations=ann,
            new_hash="h2",
            policy=ON,
            inventory=Inventory(3, updated, False),
            now=now,
        )
        assert early.status is None and early.wake_at == now + timedelta(seconds=1)
        now += timedelta(seconds=1)
    assert progress_seen == [20, 40, 60, 80, 100]


def test_recheck_pauses_and_writes_only_annotations() -> None:
    status = {"hypervisor": "h1", "hypervisorUpdateProgress": 100, "hypervisorConfigSynced": True}
    d = decide(
        H,
        status=status,
        annotations={},
        new_hash="h2",
        policy=ON,
        inventory=Inventory(5, 0, True, ("a",)),
        now=NOW,
    )
    assert d.status is None and not d.update and d.annotations[IN_PROGRESS] == "h2"


def test_resume_when_switch_turned_on_after_the_change() -> None:
    d = decide(
        H,
        status={"hypervisor": "h2"},
        annotations={},
        new_hash="h2",
        policy=ON,
        inventory=Inventory(5, 0, False, ("a", "b", "c", "d", "e")),
        now=NOW,
    )
    assert d.update == ("a",) and d.annotations[IN_PROGRESS] == "h2"


def test_batch_percentage_zero_stalls() -> None:
    zero = Policy(True, timedelta(seconds=1), 0)
    d = decide(
        H,
        status={"hypervisor": "h1"},
        annotations={},
        new_hash="h2",
        policy=zero,
        inventory=Inventory(5, 0, False, ("a",)),
        now=NOW,
    )
    assert not d.update and "stalled" in d.note


def test_policy_defaults_and_bounds() -> None:
    assert Policy.of({}, H) == Policy(False, timedelta(seconds=1), 100)
    spec = {
        "nodeManagerConfig": {
            "nodePoolRollingUpdatePolicy": {
                "autoUpdateWorker": True,
                "batchPercentage": 150,
                "batchInterval": "bogus",
            }
        }
    }
    assert Policy.of(spec, Component.WORKER) == Policy(True, timedelta(seconds=1), 100)
    assert Policy.of(spec, H).auto_update is False


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("1s", 1.0),
        ("250ms", 0.25),
        ("1m30s", 90.0),
        ("2h", 7200.0),
        ("", 1.0),
        ("x", 1.0),
        ("5", 1.0),
    ],
)
def test_go_durations(text: str, seconds: float) -> None:
    assert parse_go_duration(text).total_seconds() == pytest.approx(seconds)


def test_time_format_round_trips_with_fractions() -> None:
    from gitopsbot.sandbox.simulator.rollout import parse_time

    t = NOW + timedelta(microseconds=123456)
    assert parse_time(format_time(t)) == t
