"""Is the bot alive, is it ready: the answers of ``/healthz`` and ``/readyz`` (docs/metrics.md).

Pure: the caller (``bot.health``) gathers what it saw, in seconds of one monotonic clock,
and these functions say yes or no with a one-line reason a person can act on.

* **Alive** (``/healthz``, the liveness probe: a failing one restarts the pod): the loop
  was started and is not stopping, and its heartbeat job ran recently. Passes that fail
  (Git down, a cluster unreachable) do not make the bot dead: restarting would not help.
* **Ready** (``/readyz``, the readiness probe): alive, the shard keeper runs when replicas
  share the fleet, and the fleet repository answered: a pass ended without error since the
  start, and the latest such pass ended less than ``stale_seconds`` ago (a pass still in
  flight after a good one counts as recent: a long helm upgrade does not make the bot
  unready). A replica holding no cluster Lease runs no pass: it is ready while it waits.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Seen:
    """What the bot saw, ``now`` and the times in seconds of one monotonic clock."""

    now: float
    started: bool  # the scheduler was started and is not stopping
    heartbeat: float | None  # the last heartbeat; None: never
    heartbeat_seconds: float  # how often it beats
    passes_good: int = 0  # passes ended without error since the start
    last_good: float | None = None  # when the latest of them ended
    last_failed: bool = False  # the latest pass to end failed
    busy: bool = False  # a pass is in flight
    sharded: bool = False  # replicas share the fleet through Leases
    leases_running: bool = False  # the shard keeper's loop runs
    holding: int = 0  # cluster Leases held by this replica
    stale_seconds: float = 90.0  # a good pass older than this: the fleet is not answering


@dataclass(frozen=True, slots=True)
class Verdict:
    ok: bool
    reason: str


def heartbeat_limit(heartbeat_seconds: float) -> float:
    """How old the last heartbeat may be: three missed beats, and never under 15 s."""
    return max(3 * heartbeat_seconds, 15.0)


def alive(seen: Seen) -> Verdict:
    if not seen.started:
        return Verdict(False, "the reconcile loop is not running (not started, or stopping)")
    if seen.heartbeat is None:
        return Verdict(False, "the reconcile loop has not ticked yet")
    age = seen.now - seen.heartbeat
    limit = heartbeat_limit(seen.heartbeat_seconds)
    if age > limit:
        return Verdict(False, f"the reconcile loop last ticked {age:.0f}s ago (limit {limit:.0f}s)")
    return Verdict(True, "ok")


def ready(seen: Seen) -> Verdict:
    live = alive(seen)
    if not live.ok:
        return live
    if seen.sharded:
        if not seen.leases_running:
            return Verdict(False, "the lease keeper is not running")
        if seen.holding == 0:
            return Verdict(True, "ok: waiting for cluster leases")
    if seen.passes_good == 0 or seen.last_good is None:
        why = "the last pass failed" if seen.last_failed else "no pass has finished yet"
        return Verdict(False, f"the fleet repository has not answered: {why}")
    age = seen.now - seen.last_good
    if age > seen.stale_seconds and not (seen.busy and not seen.last_failed):
        return Verdict(
            False,
            f"no pass ended without error for {age:.0f}s (limit {seen.stale_seconds:.0f}s)",
        )
    return Verdict(True, "ok")
