"""The pure Lease decision (core/replicas/lease.py): client-go's rules, and the wire format the real
kube-apiserver accepts (MicroTime: exactly six fraction digits)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gitopsbot.core.replicas.lease import (
    Action,
    LeaseSpec,
    decide,
    format_micro_time,
    is_expired,
    lease_body,
    parse_micro_time,
    record_of,
    released,
)

T0 = datetime(2026, 12, 3, 12, 0, 0, tzinfo=UTC)
moments = st.datetimes(
    min_value=datetime(2000, 1, 1),  # noqa: DTZ001 (hypothesis wants naive bounds)
    max_value=datetime(2100, 1, 1),  # noqa: DTZ001
    timezones=st.just(UTC),
)
holders = st.sampled_from(["", "a", "b", "bot-0-4f2c"])
specs = st.builds(
    LeaseSpec,
    holder=holders,
    duration_seconds=st.integers(1, 3600),
    acquire_time=st.none() | moments,
    renew_time=st.none() | moments,
    transitions=st.integers(0, 10_000),
)


def held_by(holder: str, renewed: datetime = T0, duration: int = 2, n: int = 4) -> LeaseSpec:
    return LeaseSpec(holder, duration, T0 - timedelta(hours=1), renewed, n)


def test_an_absent_lease_is_created_with_no_transitions() -> None:
    decision = decide(None, "a", T0, 15)
    assert decision.action is Action.ACQUIRE
    assert decision.spec == LeaseSpec("a", 15, T0, T0, 0)


def test_a_fresh_lease_of_another_is_waited_for_until_its_renew_time_plus_duration() -> None:
    current = held_by("b", renewed=T0, duration=2)
    at_expiry = T0 + timedelta(seconds=2)
    for now in (T0, T0 + timedelta(seconds=1), at_expiry):
        decision = decide(current, "a", now, 15)
        assert decision.action is Action.WAIT and decision.spec is None
        assert (decision.holder, decision.expires_at) == ("b", at_expiry)
    # Expired only strictly after renewTime + duration, as client-go.
    after = decide(current, "a", at_expiry + timedelta(microseconds=1), 15)
    assert after.action is Action.ACQUIRE
    assert after.spec == LeaseSpec("a", 15, after.spec.acquire_time, after.spec.renew_time, 5)


def test_takeover_sets_acquire_time_and_counts_a_transition() -> None:
    now = T0 + timedelta(seconds=60)
    decision = decide(held_by("b", n=7), "a", now, 15)
    assert decision.action is Action.ACQUIRE
    assert decision.spec == LeaseSpec("a", 15, now, now, 8)
    assert decision.holder == "b"


def test_our_own_lease_is_renewed_keeping_acquire_time_and_transitions() -> None:
    now = T0 + timedelta(seconds=1)
    current = held_by("a", n=3)
    decision = decide(current, "a", now, 15)
    assert decision.action is Action.RENEW
    assert decision.spec == LeaseSpec("a", 15, current.acquire_time, now, 3)


def test_a_released_lease_is_taken_at_once_whatever_its_times() -> None:
    free = released(held_by("b", n=2), T0)
    assert free == LeaseSpec("", 1, T0, T0, 2)
    decision = decide(free, "a", T0, 15, unchanged_for=0.0)
    assert decision.action is Action.ACQUIRE
    assert decision.spec is not None and decision.spec.transitions == 3


def test_a_lease_never_renewed_is_expired() -> None:
    never = LeaseSpec("b", 15, None, None, 0)
    assert is_expired(never, T0)
    assert decide(never, "a", T0, 15).action is Action.ACQUIRE


def test_the_clock_skew_guard_waits_a_whole_duration_of_our_own() -> None:
    """A replica whose clock runs far ahead sees every renewTime as stale; the guard makes it
    wait until it has itself seen the record unchanged for longer than the duration."""
    current = held_by("b", renewed=T0, duration=2)
    ahead = T0 + timedelta(hours=1)
    assert decide(current, "a", ahead, 15).action is Action.ACQUIRE  # unguarded
    for seen in (0.0, 1.0, 2.0):
        assert decide(current, "a", ahead, 15, unchanged_for=seen).action is Action.WAIT
    assert decide(current, "a", ahead, 15, unchanged_for=2.001).action is Action.ACQUIRE
    # And the guard never makes a fresh lease expire.
    assert decide(current, "a", T0, 15, unchanged_for=1e9).action is Action.WAIT


@given(current=specs, now=moments, unchanged_for=st.none() | st.floats(0, 1e6))
def test_a_live_lease_of_another_is_never_taken(
    current: LeaseSpec, now: datetime, unchanged_for: float | None
) -> None:
    decision = decide(current, "a", now, 15, unchanged_for=unchanged_for)
    live = (
        current.holder not in ("", "a")
        and current.renew_time is not None
        and now <= current.renew_time + timedelta(seconds=current.duration_seconds)
    )
    if live:
        assert decision.action is Action.WAIT
    if decision.action is Action.WAIT:
        assert decision.spec is None and decision.holder == current.holder != "a"
    else:
        written = decision.spec
        assert written is not None
        assert (written.holder, written.renew_time, written.duration_seconds) == ("a", now, 15)
        if decision.action is Action.RENEW:
            assert current.holder == "a"
            assert written.transitions == current.transitions
            assert written.acquire_time == (current.acquire_time or now)
        else:
            assert written.transitions == current.transitions + 1
            assert written.acquire_time == now


@given(moment=moments)
def test_micro_time_round_trips_in_the_servers_format(moment: datetime) -> None:
    text = format_micro_time(moment)
    assert len(text) == len("2026-12-03T12:00:00.000000Z") and text.endswith("Z")
    assert parse_micro_time(text) == moment


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2026-12-03T12:00:00Z", T0),
        ("2026-12-03T12:00:00.5Z", T0 + timedelta(microseconds=500_000)),
        ("2026-12-03T12:00:00.123456789Z", T0 + timedelta(microseconds=123_456)),
        ("2026-12-03T14:00:00.000001+02:00", T0 + timedelta(microseconds=1)),
    ],
)
def test_other_clients_times_are_read(text: str, expected: datetime) -> None:
    assert parse_micro_time(text) == expected


@pytest.mark.parametrize("text", ["yesterday", "2026-12-03 12:00:00Z", "2026-12-03T12:00:00"])
def test_a_time_that_is_not_rfc3339_is_refused(text: str) -> None:
    with pytest.raises(ValueError):
        parse_micro_time(text)


def test_naive_times_are_refused() -> None:
    with pytest.raises(ValueError):
        decide(None, "a", datetime(2026, 1, 1), 15)  # noqa: DTZ001
    with pytest.raises(ValueError):
        decide(None, "", T0, 15)


@given(spec=specs)
def test_the_body_reads_back_as_the_spec(spec: LeaseSpec) -> None:
    base = {
        "metadata": {"name": "x", "namespace": "ns", "resourceVersion": "9", "labels": {"l": "v"}}
    }
    body = lease_body("ns", "x", spec, base)
    record = record_of(body)
    assert record.spec == spec
    assert record.resource_version == "9" and body["metadata"]["labels"] == {"l": "v"}
    assert base["metadata"] == {
        "name": "x",
        "namespace": "ns",
        "resourceVersion": "9",
        "labels": {"l": "v"},
    }


def test_an_offset_time_is_written_as_utc() -> None:
    plus_two = timezone(timedelta(hours=2))
    assert format_micro_time(datetime(2026, 12, 3, 14, 0, tzinfo=plus_two)) == (
        "2026-12-03T12:00:00.000000Z"
    )
