"""The Events port's contract, against the fake, the emulator and the real kube-apiserver:
an Event is posted into ``default`` about the cluster-scoped object (its uid read from the
server), says what it was told, and the same Event again counts up its series."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from gitopsbot.core.notices import kube_events as ke
from gitopsbot.core.notices.kube_events import EventSpec, ObjectRef
from gitopsbot.errors import KubeNotFound
from tests.events.conftest import INSTANCE, Target

T0 = datetime(2026, 12, 3, 11, 52, 7, 123456, tzinfo=UTC)
STARTED = EventSpec("StepStarted", "Normal", "Upgrade", "upgrade op-1: step helm-upgrade started")
FAILED = EventSpec("StepFailed", "Warning", "Upgrade", "upgrade op-1: step helm-upgrade failed")


def test_an_event_regards_the_cluster_scoped_object_from_default(target: Target) -> None:
    target.events.emit(target.tfc, STARTED, at=T0)
    [event] = target.events.recorded(target.tfc)
    assert event.namespace == "default"  # as client-go puts a cluster-scoped object's Events
    assert event.regarding == ObjectRef(
        target.tfc.api_version, "TensorFusionCluster", target.tfc.name, "",
        target.uids["TensorFusionCluster"],
    )  # fmt: skip
    assert event.spec == STARTED
    assert (event.controller, event.instance) == (ke.REPORTING_CONTROLLER, INSTANCE)
    assert event.count == 1
    assert event.event_time.startswith("2026-12-03T11:52:07.123456")


def test_events_keep_their_order_and_their_object(target: Target) -> None:
    target.events.emit(target.tfc, STARTED, at=T0)
    target.events.emit(target.pool, STARTED, at=T0)
    # Same time: the name keeps the order they were posted in.
    target.events.emit(target.tfc, FAILED, at=T0)
    assert [e.spec.reason for e in target.events.recorded(target.tfc)] == [
        "StepStarted",
        "StepFailed",
    ]
    [pool] = target.events.recorded(target.pool)
    assert pool.regarding.kind == "GPUPool" and pool.regarding.uid == target.uids["GPUPool"]


def test_the_same_event_again_counts_up_its_series(target: Target) -> None:
    target.events.emit(target.tfc, FAILED, at=T0)
    target.events.emit(target.tfc, FAILED, at=T0 + timedelta(seconds=5))
    target.events.emit(target.tfc, FAILED, at=T0 + timedelta(seconds=9))
    [event] = target.events.recorded(target.tfc)
    assert event.count == 3
    # Another note is another Event.
    other = EventSpec("StepFailed", "Warning", "Upgrade", "upgrade op-2: step crds failed")
    target.events.emit(target.tfc, other, at=T0 + timedelta(seconds=10))
    assert [e.count for e in target.events.recorded(target.tfc)] == [3, 1]


def test_a_note_cut_to_the_limit_is_accepted(target: Target) -> None:
    note = ke.note_of("helm upgrade failed: " + "é" * 2000)
    assert len(note.encode()) <= ke.NOTE_LIMIT and note.endswith("…")
    target.events.emit(target.tfc, EventSpec("Failed", "Warning", "Upgrade", note), at=T0)
    [event] = target.events.recorded(target.tfc)
    assert event.spec.note == note


def test_an_absent_object_is_not_found(target: Target) -> None:
    absent = ObjectRef(target.tfc.api_version, "TensorFusionCluster", target.tfc.name + "-gone")
    with pytest.raises(KubeNotFound):
        target.events.emit(absent, STARTED, at=T0)
