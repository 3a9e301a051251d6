"""A bot replica reduced to its Lease, for test_lease_processes.py:

    python -c "from tests.leases.lease_child import main; main()" \
        KUBECONFIG NAMESPACE NAME IDENTITY hold
    python -c "..." KUBECONFIG NAMESPACE - IDENTITY race

``hold``: try to acquire every retry period until it holds the Lease, then renew every retry
period; on SIGTERM it releases the Lease and exits 0; when it loses the Lease it exits 3.
``race``: print ``ready``, then for each Lease name read from stdin try once to acquire it
(the test sends a name to two racers, microseconds apart); exit at the end of stdin.

Each outcome is one JSON line on stdout: event, held, holder, reason, and ``at`` (the wall
clock, epoch seconds, read just before the attempt).
"""

from __future__ import annotations

import json
import signal
import sys
import time
from typing import Any

from gitopsbot.adapters.clock import SystemClock
from gitopsbot.adapters.leases import KubeLeases
from gitopsbot.bot.lease_keeper import LeaseKeeper, LeaseState, LeaseTiming

TIMING = LeaseTiming(duration_seconds=2, renew_deadline_seconds=1.5, retry_period_seconds=0.25)


def say(event: str, state: LeaseState | None = None, at: float = 0.0, **extra: Any) -> None:
    line: dict[str, Any] = {"event": event, "at": at, **extra}
    if state is not None:
        line.update(held=state.held, holder=state.holder, reason=state.reason)
    sys.stdout.write(json.dumps(line) + "\n")
    sys.stdout.flush()


def main() -> None:
    kubeconfig, namespace, name, identity, mode = sys.argv[1:]
    clock = SystemClock()
    leases = KubeLeases.from_kubeconfig(kubeconfig, request_timeout_seconds=1.0)
    if mode == "race":
        say("ready", at=time.time())
        for line in sys.stdin:
            racing = LeaseKeeper(leases, namespace, line.strip(), identity, clock, TIMING)
            at = time.time()
            say("race", racing.try_acquire(), at, lease=line.strip())
        return
    keeper = LeaseKeeper(leases, namespace, name, identity, clock, TIMING)
    stopping: list[int] = []
    signal.signal(signal.SIGTERM, lambda signum, _frame: stopping.append(signum))
    say("started", at=time.time())
    while not stopping:
        at = time.time()
        state = keeper.renew() if keeper.held else keeper.try_acquire()
        if state.lost:
            say("lost", state, at)
            sys.exit(3)
        if state.held:
            say("acquired" if state.reason == "acquired" else "renewed", state, at)
        else:
            say("waiting", state, at)
        clock.sleep(TIMING.retry_period_seconds)
    say("released" if keeper.release() else "not-released", at=time.time())
