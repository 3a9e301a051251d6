"""Two bot processes sharing one Lease, on the emulator and on the real kube-apiserver
(issue #16 part 5(d)): A acquires and B waits; while A renews B keeps waiting; once A is
killed (SIGKILL, no release) B takes over, never before the duration has run out since A's
last renew, and leaseTransitions counts it; a clean stop (SIGTERM) releases the Lease; two
processes racing for one Lease leave exactly one holder.

The children are ``lease_child`` (LeaseKeeper over KubeLeases, duration 2 s, renew deadline
1.5 s, retry period 0.25 s). Time assertions compare times of one host clock (the children's
and the server's stamps) and are tolerant only in the safe direction: B may take over late,
never early.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from gitopsbot.adapters.clock import SystemClock
from gitopsbot.adapters.leases import KubeLeases
from gitopsbot.bot.lease_keeper import LeaseKeeper
from gitopsbot.core.replicas.lease import LeaseRecord
from tests.leases.conftest import Target, lease_name
from tests.leases.lease_child import TIMING

ROOT = Path(__file__).resolve().parents[2]
BOOT = "from tests.leases.lease_child import main; main()"
DURATION = timedelta(seconds=TIMING.duration_seconds)
ROUNDS = 5
START_TIMEOUT = 60.0  # a child imports the kubernetes client: seconds on a busy machine

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]


class Child:
    """One ``lease_child`` process and the JSON lines it printed, read as they come."""

    def __init__(self, target: Target, name: str, identity: str, *args: str) -> None:
        argv = [sys.executable, "-c", BOOT, str(target.kubeconfig), target.namespace, name]
        self.identity = identity
        self.proc = subprocess.Popen(
            [*argv, identity, *args],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        self.lines: list[dict[str, Any]] = []
        self._changed = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            with self._changed:
                self.lines.append(json.loads(raw))
                self._changed.notify_all()
        with self._changed:
            self._changed.notify_all()

    def events(self, event: str) -> list[dict[str, Any]]:
        with self._changed:
            return [line for line in self.lines if line["event"] == event]

    def wait_for(self, event: str, timeout: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                found = [line for line in self.lines if line["event"] == event]
                if found:
                    return found[0]
                left = deadline - time.monotonic()
                if left <= 0 or (self.proc.poll() is not None and not self._reader.is_alive()):
                    raise AssertionError(f"{self.identity}: no {event!r}: {self.report()}")
                self._changed.wait(min(left, 0.5))

    def wait_for_nth(self, event: str, index: int, timeout: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                found = [line for line in self.lines if line["event"] == event]
                if len(found) > index:
                    return found[index]
                left = deadline - time.monotonic()
                if left <= 0 or (self.proc.poll() is not None and not self._reader.is_alive()):
                    raise AssertionError(f"{self.identity}: no {event!r} #{index}: {self.report()}")
                self._changed.wait(min(left, 0.5))

    def finish(self, timeout: float = 30.0) -> int:
        code = self.proc.wait(timeout)
        self._reader.join(timeout)
        return code

    def report(self) -> str:
        err = self.proc.stderr.read() if self.proc.poll() is not None and self.proc.stderr else ""
        return f"lines={self.lines[-5:]} exit={self.proc.poll()} stderr={err[-2000:]}"

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(30)


@pytest.fixture
def children() -> Iterator[list[Child]]:
    started: list[Child] = []
    yield started
    for child in started:
        child.kill()


@pytest.fixture
def reader(target: Target) -> Iterator[KubeLeases]:
    """The test's own look at the Lease, with the same rights as the children."""
    leases = KubeLeases.from_kubeconfig(target.kubeconfig)
    yield leases
    leases.close()


def read(leases: KubeLeases, target: Target, name: str) -> LeaseRecord:
    record = leases.read(target.namespace, name)
    assert record is not None
    return record


def test_takeover_after_a_kill_only_once_the_duration_ran_out(
    target: Target, reader: KubeLeases, children: list[Child]
) -> None:
    name = lease_name()
    a = Child(target, name, "replica-a", "hold")
    children.append(a)
    a.wait_for("acquired", START_TIMEOUT)
    first = read(reader, target, name)
    assert (first.spec.holder, first.spec.transitions) == ("replica-a", 0)

    b = Child(target, name, "replica-b", "hold")
    children.append(b)
    assert b.wait_for("waiting", START_TIMEOUT)["holder"] == "replica-a"
    # Two whole durations while A renews: B must keep waiting all along.
    time.sleep(2 * TIMING.duration_seconds + 0.5)
    assert b.events("acquired") == [], b.report()
    assert len(a.events("renewed")) >= 8 and a.events("lost") == [], a.report()
    renewing = read(reader, target, name)
    assert renewing.spec.holder == "replica-a" and renewing.spec.transitions == 0
    assert renewing.spec.acquire_time == first.spec.acquire_time
    assert renewing.spec.renew_time is not None and first.spec.renew_time is not None
    assert renewing.spec.renew_time - first.spec.renew_time > DURATION

    a.kill()  # SIGKILL: no release, the Lease must run out
    killed_at = time.time()
    last = read(reader, target, name)  # A is dead: this is its last renew
    assert last.spec.holder == "replica-a" and last.spec.renew_time is not None
    expiry = last.spec.renew_time + DURATION

    taken = b.wait_for("acquired", TIMING.duration_seconds + 15)
    after = read(reader, target, name)
    assert after.spec.holder == "replica-b"
    assert after.spec.transitions == 1
    assert after.spec.acquire_time is not None
    # Never before expiry: by the server's stamps and by B's own clock.
    assert after.spec.acquire_time > expiry
    assert taken["at"] > expiry.timestamp()
    # And not much after: the duration, B's own watch of it (client-go's observedTime), two
    # retry periods and slack for a loaded machine.
    assert after.spec.acquire_time - last.spec.renew_time < DURATION + timedelta(seconds=5)
    waited = taken["at"] - killed_at
    print(f"\n{target.server}: B took over {waited:.2f}s after the kill (duration 2 s)")

    # A clean stop releases the Lease: nobody holds it, the transition count stays.
    b.proc.send_signal(signal.SIGTERM)
    assert b.finish() == 0, b.report()
    assert b.events("released"), b.report()
    released = read(reader, target, name)
    assert released.spec.holder == "" and released.spec.transitions == 1


@pytest.mark.parametrize("start", ["absent", "released"])
def test_racing_acquires_leave_exactly_one_holder(
    target: Target, reader: KubeLeases, children: list[Child], start: str
) -> None:
    """``absent``: both create (one gets AlreadyExists); ``released``: both replace the
    same resourceVersion (one gets a Conflict, or sees the winner's write)."""
    racers = [Child(target, "-", f"racer-{i}", "race") for i in (1, 2)]
    children.extend(racers)
    for racer in racers:
        racer.wait_for("ready", START_TIMEOUT)
    outcomes: dict[str, int] = {}
    for round_ in range(ROUNDS):
        name = lease_name()
        if start == "released":  # held by a third replica, then released
            first = LeaseKeeper(
                reader, target.namespace, name, "first-holder", SystemClock(), TIMING
            )
            assert first.try_acquire().held and first.release()
        before = reader.read(target.namespace, name)
        for racer in racers:  # one line each, microseconds apart
            assert racer.proc.stdin is not None
            racer.proc.stdin.write(name + "\n")
            racer.proc.stdin.flush()
        results = [r.wait_for_nth("race", round_, START_TIMEOUT) for r in racers]
        winners = [r for r in results if r["held"]]
        assert len(winners) == 1, results
        stored = read(reader, target, name)
        assert stored.spec.holder == winners[0]["holder"]
        expected = 0 if before is None else before.spec.transitions + 1
        assert stored.spec.transitions == expected
        loser = next(r for r in results if not r["held"])
        assert loser["holder"] in ("", winners[0]["holder"]), loser
        kind = "conflict" if "another replica wrote" in loser["reason"] else "saw the winner"
        outcomes[kind] = outcomes.get(kind, 0) + 1
        # Both started within milliseconds of each other: a real race.
        assert abs(results[0]["at"] - results[1]["at"]) < 0.1, results
    for racer in racers:
        assert racer.proc.stdin is not None
        racer.proc.stdin.close()
        assert racer.finish() == 0, racer.report()
    print(f"\n{target.server} {start}: losers {outcomes}")
