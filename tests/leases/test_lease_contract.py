"""The Leases port's contract, against the fake, the emulator and the real kube-apiserver:
what is written is read back to the microsecond, and of two replicas racing on one Lease
exactly one write wins while the other gets KubeConflict."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from gitopsbot.core.replicas.lease import LeaseSpec, released
from gitopsbot.errors import KubeConflict, KubeInvalid, KubeNotFound
from tests.leases.conftest import lease_name

T0 = datetime(2026, 12, 3, 11, 52, 7, 123456, tzinfo=UTC)


def spec(holder: str, at: datetime = T0, transitions: int = 0, duration: int = 2) -> LeaseSpec:
    return LeaseSpec(holder, duration, at, at, transitions)


def test_an_absent_lease_reads_as_none(leases: Any) -> None:
    port, ns, _ = leases
    assert port.read(ns, lease_name()) is None


def test_what_is_created_is_read_back_exactly(leases: Any) -> None:
    port, ns, _ = leases
    name = lease_name()
    created = port.create(ns, name, spec("a"))
    read = port.read(ns, name)
    assert read is not None
    assert (read.namespace, read.name) == (ns, name)
    # Microseconds survive: the expiry arithmetic of the other replicas depends on them.
    assert read.spec == created.spec == spec("a")
    assert read.resource_version == created.resource_version != ""


def test_a_second_create_conflicts(leases: Any) -> None:
    port, ns, _ = leases
    name = lease_name()
    port.create(ns, name, spec("a"))
    with pytest.raises(KubeConflict):
        port.create(ns, name, spec("b"))
    read = port.read(ns, name)
    assert read is not None and read.spec.holder == "a"


def test_replace_writes_the_spec_and_moves_the_resource_version(leases: Any) -> None:
    port, ns, _ = leases
    name = lease_name()
    first = port.create(ns, name, spec("a"))
    later = T0 + timedelta(seconds=1, microseconds=1)
    renewed = LeaseSpec("a", 2, T0, later, 0)
    written = port.replace(first, renewed)
    assert written.spec == renewed
    assert written.resource_version != first.resource_version
    read = port.read(ns, name)
    assert read is not None and read.spec == renewed
    assert read.resource_version == written.resource_version


def test_of_two_replaces_from_one_read_exactly_one_wins(leases: Any) -> None:
    port, ns, _ = leases
    name = lease_name()
    port.create(ns, name, spec("a"))
    seen_by_b, seen_by_c = port.read(ns, name), port.read(ns, name)
    assert seen_by_b is not None and seen_by_c is not None
    port.replace(seen_by_b, spec("b", T0 + timedelta(seconds=5), transitions=1))
    with pytest.raises(KubeConflict):
        port.replace(seen_by_c, spec("c", T0 + timedelta(seconds=5), transitions=1))
    read = port.read(ns, name)
    assert read is not None and read.spec.holder == "b" and read.spec.transitions == 1
    # The loser re-reads and its write then goes through.
    port.replace(read, spec("c", T0 + timedelta(seconds=9), transitions=2))
    again = port.read(ns, name)
    assert again is not None and again.spec.holder == "c"


def test_a_released_lease_has_no_holder(leases: Any) -> None:
    port, ns, _ = leases
    name = lease_name()
    held = port.create(ns, name, spec("a", transitions=3))
    port.replace(held, released(held.spec, T0 + timedelta(seconds=1)))
    read = port.read(ns, name)
    assert read is not None
    assert read.spec.holder == ""
    assert read.spec.transitions == 3


def test_replace_of_a_deleted_lease_conflicts(leases: Any, request: pytest.FixtureRequest) -> None:
    """The uid read is a precondition of the write (the real server answers 409, not 404):
    a Lease deleted, or deleted and created again, is never overwritten blindly."""
    port, ns, delete = leases
    if "emulator" in request.node.callspec.id:
        request.applymarker(
            pytest.mark.xfail(
                strict=True,
                raises=KubeNotFound,
                reason="the emulator answers 404 (docs/sandbox.md)",
            )
        )
    name = lease_name()
    held = port.create(ns, name, spec("a"))
    delete(name)
    with pytest.raises(KubeConflict):
        port.replace(held, spec("a", T0 + timedelta(seconds=1)))
    assert port.read(ns, name) is None


def test_replace_keeps_what_others_wrote(leases: Any) -> None:
    """Labels and annotations another tool set survive the bot's renews."""
    port, ns, _ = leases
    name = lease_name()
    port.create(ns, name, spec("a"))
    read = port.read(ns, name)
    assert read is not None
    meta = {**read.raw["metadata"], "labels": {"team": "gpu"}, "annotations": {"by": "hand"}}
    raw = {**read.raw, "metadata": meta}
    with_extras = replace(read, raw=raw)
    port.replace(with_extras, spec("a"))
    renewed = port.read(ns, name)
    assert renewed is not None
    port.replace(renewed, spec("a", T0 + timedelta(seconds=1)))
    final = port.read(ns, name)
    assert final is not None and final.spec == spec("a", T0 + timedelta(seconds=1))
    assert final.raw["metadata"].get("labels") == {"team": "gpu"}
    assert final.raw["metadata"].get("annotations") == {"by": "hand"}


def test_a_replace_without_a_resource_version_is_refused(
    leases: Any, request: pytest.FixtureRequest
) -> None:
    """The guard cannot be forgotten: the real server refuses an unconditional update of a
    Lease (422 "must be specified for an update"), the fake sees a stale version."""
    port, ns, _ = leases
    if "emulator" in request.node.callspec.id:
        request.applymarker(
            pytest.mark.xfail(
                strict=True, reason="the emulator takes unconditional updates (docs/sandbox.md)"
            )
        )
    name = lease_name()
    held = port.create(ns, name, spec("a"))
    unguarded = replace(held, resource_version="")
    with pytest.raises((KubeInvalid, KubeConflict)):
        port.replace(unguarded, spec("b", T0 + timedelta(seconds=1)))
    read = port.read(ns, name)
    assert read is not None and read.spec.holder == "a"


def test_a_non_positive_duration_is_invalid(leases: Any, request: pytest.FixtureRequest) -> None:
    port, ns, _ = leases
    if "emulator" in request.node.callspec.id:
        request.applymarker(
            pytest.mark.xfail(
                strict=True, reason="the emulator does not validate Leases (docs/sandbox.md)"
            )
        )
    with pytest.raises(KubeInvalid):
        port.create(ns, lease_name(), spec("a", duration=0))
