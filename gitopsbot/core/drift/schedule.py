"""When each cluster's drift check runs: at its own offset within ``drift.interval``, so a
fleet's checks are spread over the interval instead of all at once (docs/drift.md, #29).

A cluster's offset is a stable hash of its name (the same on every replica and after every
restart), and its checks fall on the wall-clock instants ``offset + k × interval`` (seconds
since the epoch): a restart, a replica taking the cluster over, or a cluster added to the
fleet checks it at its own next instant, never all at once with the others. The first check
after the bot starts is not before ``not_before`` (the first passes go first).

Pure: names and times in, times out.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable, Mapping

# 2**64 buckets: the first 8 bytes of a SHA-256, far finer than any interval.
_SPAN = float(2**64)


def offset(cluster: str, interval: float) -> float:
    """Where in every ``interval`` (seconds) the cluster's check falls: [0, interval)."""
    digest = hashlib.sha256(cluster.encode()).digest()
    return int.from_bytes(digest[:8], "big") / _SPAN * interval


def next_check(cluster: str, interval: float, after: float) -> float:
    """The cluster's first check instant at or after ``after`` (seconds since the epoch)."""
    phase = offset(cluster, interval)
    turns = math.ceil((after - phase) / interval)
    return phase + turns * interval


def plan(
    clusters: Iterable[str],
    known: Mapping[str, float],
    *,
    interval: float,
    now: float,
    not_before: float,
) -> dict[str, float]:
    """Each cluster's next check: the one ``known`` for it, or (a cluster new to the
    schedule) its next instant not before ``max(now, not_before)``. Clusters no longer
    given are dropped."""
    start = max(now, not_before)
    return {c: known[c] if c in known else next_check(c, interval, start) for c in clusters}


def due(schedule: Mapping[str, float], now: float) -> list[str]:
    """The clusters whose check is due at ``now``, in name order."""
    return sorted(c for c, at in schedule.items() if at <= now)


def after_check(
    schedule: Mapping[str, float], checked: Iterable[str], interval: float, now: float
) -> dict[str, float]:
    """The schedule once ``checked`` ran at ``now``: each at its next instant after now."""
    out = dict(schedule)
    for c in checked:
        out[c] = next_check(c, interval, math.nextafter(now, math.inf))
    return out


def wake_in(schedule: Mapping[str, float], now: float, *, least: float, most: float) -> float:
    """How long to sleep until the next due check: at least ``least`` (checks due within it
    are run together), at most ``most`` (new clusters are noticed)."""
    soonest = min(schedule.values(), default=now + most)
    return min(max(soonest - now, least), most)
