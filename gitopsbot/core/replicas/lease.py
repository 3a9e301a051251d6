"""Who holds a Kubernetes Lease (coordination.k8s.io/v1), and what a replica writes next.

The rules are client-go's leader election (tools/leaderelection, ``tryAcquireOrRenew``), so a
bot replica and any Go controller reading the same Lease agree:

- a Lease with a holder is *expired* when ``renewTime + leaseDurationSeconds < now``; one
  without a holder (released) is free at once;
- our own Lease is renewed: ``renewTime`` moves, ``acquireTime`` and ``leaseTransitions``
  stay;
- a free or expired Lease is taken over: ``acquireTime = renewTime = now`` and
  ``leaseTransitions + 1`` (0 when the Lease is created);
- a Lease held by another and fresh is waited for.

client-go does not trust the holder's ``renewTime`` against its own clock: it counts the
duration from when it first saw the record unchanged. ``unchanged_for`` is that guard (a
replica whose clock runs ahead would otherwise take over a live Lease); with it a Lease is
expired only when both say so.

Pure: ``now`` and ``unchanged_for`` come from the caller. The wire format helpers
(``record_of``, ``lease_body``) live here so the adapter and the fake write the same objects.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from enum import Enum
from typing import Any

API_VERSION = "coordination.k8s.io/v1"
KIND = "Lease"

# metav1.MicroTime's wire format (RFC 3339, exactly six fraction digits, UTC as "Z").
_MICRO_TIME = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?(Z|[+-]\d{2}:\d{2})\Z"
)


@dataclass(frozen=True, slots=True)
class LeaseSpec:
    """The fields of ``spec`` leader election reads and writes. ``holder`` "" = nobody."""

    holder: str
    duration_seconds: int
    acquire_time: datetime | None
    renew_time: datetime | None
    transitions: int


@dataclass(frozen=True, slots=True)
class LeaseRecord:
    """A Lease as read: its spec, and the resourceVersion a replace must carry. ``raw`` is the
    whole object, so a replace keeps labels and fields we do not own."""

    namespace: str
    name: str
    spec: LeaseSpec
    resource_version: str
    raw: Mapping[str, Any] = field(compare=False, repr=False)


class Action(Enum):
    ACQUIRE = "acquire"
    RENEW = "renew"
    WAIT = "wait"


@dataclass(frozen=True, slots=True)
class Decision:
    """``spec`` is what to write (None for WAIT); ``holder`` who holds it as read;
    ``expires_at`` when a WAIT could end at the soonest, by the holder's ``renewTime``."""

    action: Action
    spec: LeaseSpec | None
    holder: str
    expires_at: datetime | None = None


def expires_at(spec: LeaseSpec) -> datetime | None:
    """When the holder's claim runs out by its own ``renewTime``; None when never renewed."""
    if spec.renew_time is None:
        return None
    return spec.renew_time + timedelta(seconds=spec.duration_seconds)


def is_expired(spec: LeaseSpec, now: datetime, unchanged_for: float | None = None) -> bool:
    """True when nobody may still count on the Lease (a holderless one always is).
    ``unchanged_for``: seconds this replica has seen the same record (None: not guarded)."""
    if not spec.holder:
        return True
    end = expires_at(spec)
    stale = end is None or end < _aware(now)
    if unchanged_for is None:
        return stale
    return stale and unchanged_for > spec.duration_seconds


def decide(
    current: LeaseSpec | None,
    identity: str,
    now: datetime,
    duration_seconds: int,
    *,
    unchanged_for: float | None = None,
) -> Decision:
    """What replica ``identity`` does with the Lease read as ``current`` (None: absent)."""
    if not identity:
        raise ValueError("a lease identity must not be empty")
    if duration_seconds <= 0:
        raise ValueError("a lease duration must be positive")
    now = _aware(now)
    if current is None:
        return Decision(Action.ACQUIRE, LeaseSpec(identity, duration_seconds, now, now, 0), "")
    if current.holder == identity:
        acquired = current.acquire_time or now
        spec = LeaseSpec(identity, duration_seconds, acquired, now, current.transitions)
        return Decision(Action.RENEW, spec, identity)
    if not is_expired(current, now, unchanged_for):
        return Decision(Action.WAIT, None, current.holder, expires_at(current))
    spec = LeaseSpec(identity, duration_seconds, now, now, current.transitions + 1)
    return Decision(Action.ACQUIRE, spec, current.holder)


def released(current: LeaseSpec, now: datetime) -> LeaseSpec:
    """What a holder writes when it stops cleanly (client-go's ``release``): no holder, so the
    next replica takes over at once instead of after the duration."""
    now = _aware(now)
    return LeaseSpec("", 1, now, now, current.transitions)


# -- the wire format -------------------------------------------------------------------------


def format_micro_time(moment: datetime) -> str:
    return _aware(moment).astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_micro_time(text: str) -> datetime:
    """RFC 3339 as the API server and other clients write it; nanoseconds are cut to
    microseconds (Python's resolution). ValueError when it is not a timestamp."""
    match = _MICRO_TIME.match(text)
    if match is None:
        raise ValueError(f"{text!r} is not an RFC 3339 time")
    year, month, day, hour, minute, second, fraction, zone = match.groups()
    micros = int((fraction or "0")[:6].ljust(6, "0"))
    moment = datetime(
        int(year), int(month), int(day), int(hour), int(minute), int(second), micros, tzinfo=UTC
    )
    if zone != "Z":
        sign = 1 if zone[0] == "+" else -1
        moment -= sign * timedelta(hours=int(zone[1:3]), minutes=int(zone[4:6]))
    return moment


def record_of(obj: Mapping[str, Any]) -> LeaseRecord:
    """The Lease object as the API returns it. ValueError for a malformed time or number."""
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}

    def time_of(key: str) -> datetime | None:
        value = spec.get(key)
        return parse_micro_time(str(value)) if value else None

    try:
        lease = LeaseSpec(
            holder=str(spec.get("holderIdentity") or ""),
            duration_seconds=int(spec.get("leaseDurationSeconds") or 0),
            acquire_time=time_of("acquireTime"),
            renew_time=time_of("renewTime"),
            transitions=int(spec.get("leaseTransitions") or 0),
        )
    except (TypeError, ValueError) as e:
        raise ValueError(f"Lease {meta.get('namespace')}/{meta.get('name')}: {e}") from None
    return LeaseRecord(
        namespace=str(meta.get("namespace") or ""),
        name=str(meta.get("name") or ""),
        spec=lease,
        resource_version=str(meta.get("resourceVersion") or ""),
        raw=obj,
    )


def lease_body(
    namespace: str, name: str, spec: LeaseSpec, base: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The object to create (``base`` None) or to replace ``base`` with: ``base``'s metadata,
    resourceVersion included (the optimistic-concurrency guard), and its other spec fields
    are kept."""
    body: dict[str, Any] = copy.deepcopy(dict(base)) if base is not None else {}
    body["apiVersion"] = API_VERSION
    body["kind"] = KIND
    meta = body.setdefault("metadata", {})
    meta["namespace"] = namespace
    meta["name"] = name
    wire = body.setdefault("spec", {})
    wire["holderIdentity"] = spec.holder
    wire["leaseDurationSeconds"] = spec.duration_seconds
    wire["leaseTransitions"] = spec.transitions
    for key, moment in (("acquireTime", spec.acquire_time), ("renewTime", spec.renew_time)):
        if moment is None:
            wire.pop(key, None)
        else:
            wire[key] = format_micro_time(moment)
    return body


def _aware(moment: datetime) -> datetime:
    if moment.tzinfo is None:
        raise ValueError("lease times must be timezone-aware")
    return moment
