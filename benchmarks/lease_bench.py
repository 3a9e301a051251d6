"""Leases at fleet scale: N clusters shared by R replicas, shard Leases vs one Lease per cluster.

R real ``ShardKeeper``s (shard Leases, the default count and timing) share N clusters through
``KubeLeases`` against the sandbox API emulator over real HTTP (``--fake``: the in-memory
Leases). Time is moved by hand, one retry period per round, so the rates are per second of
Lease time, not of this machine; the requests are real. Measured per scheme, in steady state:
Lease writes/s and reads/s for the whole fleet, and the wall seconds one replica's step takes
while it holds every cluster (it must finish well within the renew deadline). Then one replica
is killed (it stops stepping, releases nothing) and the fail-over time is the Lease time until
the survivors hold everything it held, against the Lease duration (the ideal: nobody may take
over before it).

Baseline in the same run: the scheme before shards (``OldReplica``: a membership Lease and one
Lease per cluster, renewed every retry period of client-go's 2 s, the same plan), against the
same server.

    python benchmarks/lease_bench.py [--clusters 1000] [--replicas 3] [--fake]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from gitopsbot.adapters.leases import KubeLeases
from gitopsbot.bot.lease_keeper import LeaseKeeper, LeaseTiming
from gitopsbot.bot.shard_keeper import CLUSTER_LABELS, REPLICA_LABELS, ShardKeeper
from gitopsbot.core.replicas import sharding
from gitopsbot.core.replicas.lease import LeaseRecord, LeaseSpec, is_expired
from gitopsbot.ports.leases import Leases
from gitopsbot.sandbox.apiserver import ApiServer
from gitopsbot.testing import FakeLeases

NS = "default"
OLD_TIMING = LeaseTiming(duration_seconds=15, renew_deadline_seconds=10, retry_period_seconds=2)


class HandClock:
    def __init__(self) -> None:
        self.mono = 1000.0

    def now(self) -> datetime:
        return datetime(2026, 12, 3, 12, tzinfo=UTC) + timedelta(seconds=self.mono)

    def monotonic(self) -> float:
        return self.mono

    def sleep(self, seconds: float) -> None:
        self.mono += seconds


class Counting:
    """A Leases port that counts reads (get, list) and writes (create, replace)."""

    def __init__(self, inner: Leases) -> None:
        self.inner, self.reads, self.writes = inner, 0, 0

    def read(self, namespace: str, name: str) -> LeaseRecord | None:
        self.reads += 1
        return self.inner.read(namespace, name)

    def list(self, namespace: str, labels: Mapping[str, str]) -> list[LeaseRecord]:
        self.reads += 1
        return self.inner.list(namespace, labels)

    def create(
        self, namespace: str, name: str, spec: LeaseSpec, labels: Mapping[str, str] | None = None
    ) -> LeaseRecord:
        self.writes += 1
        return self.inner.create(namespace, name, spec, labels)

    def replace(self, current: LeaseRecord, spec: LeaseSpec) -> LeaseRecord:
        self.writes += 1
        return self.inner.replace(current, spec)


class OldReplica:
    """The keeper before shards, its step as it was: membership, two lists, renew every held
    cluster Lease, plan over clusters, release, take."""

    def __init__(self, leases: Leases, identity: str, clock: HandClock, clusters: Sequence[str]):
        self.identity, self.leases, self.clock = identity, leases, clock
        self.seen: dict[str, tuple[str, float]] = {}
        self.clusters = sorted(clusters)
        t = OLD_TIMING
        self.membership = LeaseKeeper(
            leases, NS, sharding.replica_lease(identity), identity, clock, t, REPLICA_LABELS
        )
        self.keepers = {
            c: LeaseKeeper(
                leases, NS, sharding.cluster_lease(c), identity, clock, t, CLUSTER_LABELS
            )
            for c in self.clusters
        }

    @property
    def holding(self) -> frozenset[str]:
        return frozenset(c for c, k in self.keepers.items() if k.held)

    def unchanged(self, record: LeaseRecord) -> float:
        """Seconds this replica has seen a membership Lease unchanged (client-go's rule)."""
        at = self.clock.monotonic()
        version, since = self.seen.get(record.name, ("", at))
        if version != record.resource_version:
            since = at
        self.seen[record.name] = (record.resource_version, since)
        return at - since

    def step(self) -> None:
        m = self.membership
        m.renew() if m.held else m.try_acquire()
        now = self.clock.now()
        members = {self.identity} | {
            r.spec.holder
            for r in self.leases.list(NS, REPLICA_LABELS)
            if not is_expired(r.spec, now, self.unchanged(r))
        }
        records = {r.name: r for r in self.leases.list(NS, CLUSTER_LABELS)}
        for k in self.keepers.values():
            k.renew()
        free = [
            c
            for c, k in self.keepers.items()
            if (r := records.get(k.name)) is None or is_expired(r.spec, now, k.observe(r))
        ]
        held = [c for c, k in self.keepers.items() if k.held]
        plan = sharding.plan(self.clusters, members, self.identity, held, free)
        for c in plan.release:
            self.keepers[c].release()
        for c in plan.take:
            self.keepers[c].try_acquire()


def rates(
    port: Counting, replicas: Sequence[Any], clock: HandClock, period: float, rounds: int
) -> tuple[float, float]:
    """Writes/s and reads/s over ``rounds`` retry periods of Lease time."""
    w, r = port.writes, port.reads
    for _ in range(rounds):
        for rep in replicas:
            rep.step()
        clock.sleep(period)
    seconds = rounds * period
    return (port.writes - w) / seconds, (port.reads - r) / seconds


def settle(replicas: Sequence[Any], clock: HandClock, period: float, clusters: int) -> None:
    """Rounds until every cluster is held and nothing moved for three rounds."""
    last: list[frozenset[str]] = []
    still = 0
    for _ in range(40):
        for rep in replicas:
            rep.step()
        clock.sleep(period)
        now = [rep.holding for rep in replicas]
        still = still + 1 if now == last and sum(map(len, now)) == clusters else 0
        if still == 3:
            return
        last = now
    raise SystemExit("the replicas did not settle")


def one_holding_all(make: Any, clusters: list[str], period: float) -> float:
    """Wall seconds of one step of a replica holding every cluster (after it took them)."""
    clock = HandClock()
    rep = make("solo", clock, clusters)
    settle([rep], clock, period, len(clusters))
    t0 = time.perf_counter()
    rep.step()
    return time.perf_counter() - t0


def failover(replicas: list[Any], clock: HandClock, period: float) -> float:
    """Lease seconds from the last renew of ``replicas[0]`` (killed: it steps no more, releases
    nothing) until the survivors hold all it held."""
    dead = replicas[0]
    orphans = dead.holding
    killed = clock.mono - period  # its last step, one period ago
    survivors = replicas[1:]
    while clock.mono - killed < 10 * 15:
        for rep in survivors:
            rep.step()
        if orphans <= frozenset().union(*(r.holding for r in survivors)):
            return clock.mono - killed
        clock.sleep(period)
    raise SystemExit("no fail-over")


def scheme(name: str, port_of: Any, make: Any, clusters: list[str], n: int, period: float) -> Any:
    port = port_of()
    clock = HandClock()
    reps = [make(f"{name}-{i}", clock, clusters, port) for i in range(n)]
    settle(reps, clock, period, len(clusters))
    writes, reads = rates(port, reps, clock, period, 3)
    over = failover(reps, clock, period)
    return writes, reads, over


def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--clusters", type=int, default=1000)
    p.add_argument("--replicas", type=int, default=3)
    p.add_argument("--fake", action="store_true", help="the in-memory Leases, not the emulator")
    args = p.parse_args(argv)
    clusters = [f"gpu-{i:04d}" for i in range(args.clusters)]
    new_timing = LeaseTiming()
    server = None
    adapters: list[KubeLeases] = []
    if args.fake:

        def port_of() -> Counting:
            return Counting(FakeLeases())
    else:
        server = ApiServer()
        server.start()
        kubeconfig = server.write_kubeconfig(Path(tempfile.mkdtemp()) / "kubeconfig")

        def port_of() -> Counting:  # a fresh namespace's worth: a new server each time
            adapter = KubeLeases.from_kubeconfig(kubeconfig)
            adapters.append(adapter)
            return Counting(_Fresh(adapter, len(adapters)))

    def make_new(name: str, clock: HandClock, names: list[str], port: Any = None) -> ShardKeeper:
        port = port if port is not None else port_of()
        return ShardKeeper(
            port, namespace=NS, identity=name, clock=clock, clusters=names, timing=new_timing
        )

    def make_old(name: str, clock: HandClock, names: list[str], port: Any = None) -> OldReplica:
        return OldReplica(port if port is not None else port_of(), name, clock, names)

    try:
        where = "in-memory Leases" if args.fake else "API emulator over HTTP"
        print(f"{args.clusters} clusters, {args.replicas} replicas, {where}")
        new_p, old_p = new_timing.retry_period_seconds, OLD_TIMING.retry_period_seconds
        nw, nr, nf = scheme("new", port_of, make_new, clusters, args.replicas, new_p)
        ow, orr, of = scheme("old", port_of, make_old, clusters, args.replicas, old_p)
        n_step = one_holding_all(make_new, clusters, new_p)
        o_step = one_holding_all(make_old, clusters, old_p)
        dur = new_timing.duration_seconds
        print(f"{'':32}{'shards':>12}{'per-cluster':>14}{'old/new':>10}")
        print(f"{'Lease writes/s (all replicas)':32}{nw:12.2f}{ow:14.2f}{ow / nw:10.1f}")
        print(f"{'Lease reads/s (all replicas)':32}{nr:12.2f}{orr:14.2f}{orr / nr:10.1f}")
        ratio = o_step / n_step
        print(f"{'one step holding all (wall s)':32}{n_step:12.3f}{o_step:14.3f}{ratio:10.1f}")
        print(f"{'fail-over (Lease s)':32}{nf:12.1f}{of:14.1f}")
        print(f"fail-over / duration ({dur} s, the ideal): shards {nf / dur:.2f}, "
              f"per-cluster {of / dur:.2f}")  # fmt: skip
        print(f"target <= 5 writes/s for {args.replicas} replicas: shards {nw:.2f} "
              f"({'met' if nw <= 5 else 'NOT met'})")  # fmt: skip
    finally:
        for adapter in adapters:
            adapter.close()
        if server is not None:
            server.stop()


class _Fresh:
    """Leases under a name prefix per scheme run, so the runs on one server do not meet."""

    def __init__(self, inner: KubeLeases, run: int) -> None:
        self.inner, self.run = inner, run
        self.label = {"gitopsbot.io/bench-run": str(run)}

    def read(self, namespace: str, name: str) -> LeaseRecord | None:
        found = self.inner.read(namespace, f"r{self.run}-{name}")
        return _unprefixed(found, self.run) if found is not None else None

    def list(self, namespace: str, labels: Mapping[str, str]) -> list[LeaseRecord]:
        return [
            _unprefixed(r, self.run) for r in self.inner.list(namespace, {**labels, **self.label})
        ]

    def create(
        self, namespace: str, name: str, spec: LeaseSpec, labels: Mapping[str, str] | None = None
    ) -> LeaseRecord:
        made = self.inner.create(
            namespace, f"r{self.run}-{name}", spec, {**(labels or {}), **self.label}
        )
        return _unprefixed(made, self.run)

    def replace(self, current: LeaseRecord, spec: LeaseSpec) -> LeaseRecord:
        real = LeaseRecord(
            current.namespace, f"r{self.run}-{current.name}", current.spec,
            current.resource_version, current.raw,
        )  # fmt: skip
        return _unprefixed(self.inner.replace(real, spec), self.run)


def _unprefixed(record: LeaseRecord, run: int) -> LeaseRecord:
    name = record.name.removeprefix(f"r{run}-")
    return LeaseRecord(record.namespace, name, record.spec, record.resource_version, record.raw)


if __name__ == "__main__":
    main()
