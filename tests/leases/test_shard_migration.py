"""Shard Leases at fleet scale and across a rolling update (#29 item 4), over the fake port
with a hand-driven clock.

``OldReplica`` is the keeper of versions before shards, reduced to what matters here: a
membership Lease without the shard count, one Lease per cluster, the same plan. Every period
the tests check the one guarantee that matters: no cluster held by two replicas, whatever the
mix of versions and shard counts.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from gitopsbot.bot.lease_keeper import LeaseKeeper, LeaseTiming
from gitopsbot.bot.shard_keeper import CLUSTER_LABELS, REPLICA_LABELS, ShardKeeper
from gitopsbot.core.replicas import sharding
from gitopsbot.core.replicas.lease import LeaseRecord, is_expired
from gitopsbot.testing import FakeLeases
from tests.leases.test_lease_keeper import Clock

NS = "gitopsbot"
TIMING = LeaseTiming(duration_seconds=15, renew_deadline_seconds=10, retry_period_seconds=4)


class Replica(Protocol):
    identity: str

    def step(self) -> None: ...

    @property
    def holding(self) -> frozenset[str]: ...


class OldReplica:
    """A replica of the version before shards: one Lease per cluster (``gitopsbot-cluster-``)."""

    def __init__(self, leases: FakeLeases, identity: str, clock: Clock, clusters: Sequence[str]):
        self.identity, self._leases, self.clock = identity, leases, clock
        self.seen: dict[str, tuple[str, float]] = {}
        self.clusters = sorted(clusters)
        self.membership = LeaseKeeper(
            leases, NS, sharding.replica_lease(identity), identity, clock, TIMING, REPLICA_LABELS
        )
        self.keepers = {
            c: LeaseKeeper(
                leases, NS, sharding.cluster_lease(c), identity, clock, TIMING, CLUSTER_LABELS
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
            for r in self._leases.list(NS, REPLICA_LABELS)
            if not is_expired(r.spec, now, self.unchanged(r))
        }
        records = {r.name: r for r in self._leases.list(NS, CLUSTER_LABELS)}
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

    def stop(self) -> None:
        for k in self.keepers.values():
            k.release()
        self.membership.release()


def new(
    leases: FakeLeases, name: str, clock: Clock, clusters: Sequence[str], shards: int = 12
) -> ShardKeeper:
    return ShardKeeper(
        leases,
        namespace=NS,
        identity=name,
        clock=clock,
        clusters=clusters,
        timing=TIMING,
        shards=shards,
    )


def period(clock: Clock, replicas: Sequence[Replica]) -> None:
    for r in replicas:
        r.step()
        assert_exclusive(replicas)  # also between one replica's step and the next's
    clock.sleep(TIMING.retry_period_seconds)


def assert_exclusive(replicas: Sequence[Replica]) -> None:
    seen: dict[str, str] = {}
    for r in replicas:
        for c in r.holding:
            assert c not in seen, f"{c} held by {seen[c]} and {r.identity}"
            seen[c] = r.identity


def writes(leases: FakeLeases) -> int:
    return sum(1 for op, _ in leases.calls if op in ("create", "replace"))


def test_a_thousand_clusters_over_three_replicas_cost_one_write_per_shard_and_member() -> None:
    clusters = [f"c-{i:04d}" for i in range(1000)]
    leases, clock = FakeLeases(), Clock()
    rs = [new(leases, n, clock, clusters) for n in ("a", "b", "c")]
    for _ in range(5):
        period(clock, rs)
    assert sorted(len(r.held_shards) for r in rs) == [4, 4, 4]
    assert set().union(*(r.holding for r in rs)) == set(clusters)
    before = writes(leases)
    for _ in range(10):
        period(clock, rs)
    # Steady state: 3 memberships + 12 shards per period, not one per cluster (was 1,003).
    per_period = (writes(leases) - before) / 10
    assert per_period == 3 + 12
    assert per_period / TIMING.retry_period_seconds <= 5  # Lease writes/s for 3 replicas
    assert not any(name.startswith(f"{NS}/gitopsbot-cluster-") for _, name in leases.calls)


def test_an_old_replica_s_live_cluster_lease_holds_the_cluster_back_until_released() -> None:
    clusters = [f"gpu-{i:02d}" for i in range(12)]
    leases, clock = FakeLeases(), Clock()
    old = OldReplica(leases, "old", clock, clusters)
    period(clock, [old])
    assert old.holding == set(clusters)
    fresh = new(leases, "new", clock, clusters)
    for _ in range(5):
        period(clock, [old, fresh])
    # Both count each other as members: the old one gave up what it assigns to the new one;
    # the new one acts only on clusters whose per-cluster Lease it holds itself.
    assert old.holding and fresh.holding
    assert old.holding | fresh.holding == set(clusters)
    for c in fresh.holding:
        assert leases.read(NS, sharding.cluster_lease(c)).spec.holder == "new"  # type: ignore[union-attr]
    # The old one stops (a rolling update): the new one takes everything, then drops the
    # per-cluster Leases once no replica of the old scheme is live.
    old.stop()
    for _ in range(3):
        period(clock, [fresh])
    assert fresh.holding == set(clusters)
    held = [r for r in leases.list(NS, CLUSTER_LABELS) if r.spec.holder]
    assert held == []


def test_an_old_replica_killed_holds_its_clusters_back_until_its_leases_expire() -> None:
    clusters = [f"gpu-{i:02d}" for i in range(12)]
    leases, clock = FakeLeases(), Clock()
    old = OldReplica(leases, "old", clock, clusters)
    period(clock, [old])
    # Killed: no release. Its membership and cluster Leases run out after the duration.
    killed_at = clock.mono
    fresh = new(leases, "new", clock, clusters)
    took_at = None
    for _ in range(10):
        period(clock, [fresh])
        if fresh.holding == set(clusters) and took_at is None:
            took_at = clock.mono
        assert not fresh.holding or clock.mono - killed_at > TIMING.duration_seconds
    assert took_at is not None


def test_a_rolling_update_from_old_to_new_never_lets_two_replicas_hold_a_cluster() -> None:
    clusters = [f"gpu-{i:02d}" for i in range(30)]
    leases, clock = FakeLeases(), Clock()
    olds = [OldReplica(leases, f"old-{i}", clock, clusters) for i in range(3)]
    running: list[Replica] = list(olds)
    for _ in range(3):
        period(clock, running)
    assert set().union(*(r.holding for r in running)) == set(clusters)
    for i, old in enumerate(olds):  # surge one new replica, then stop one old one
        running.append(new(leases, f"new-{i}", clock, clusters))
        for _ in range(3):
            period(clock, running)
        old.stop()
        running.remove(old)
        for _ in range(3):
            period(clock, running)
    for _ in range(3):
        period(clock, running)
    assert set().union(*(r.holding for r in running)) == set(clusters)
    assert not [r for r in leases.list(NS, CLUSTER_LABELS) if r.spec.holder]


def test_replicas_with_different_shard_counts_never_hold_the_same_cluster() -> None:
    clusters = [f"gpu-{i:02d}" for i in range(40)]
    leases, clock = FakeLeases(), Clock()
    running: list[Replica] = [new(leases, n, clock, clusters, shards=12) for n in ("a", "b")]
    for _ in range(3):
        period(clock, running)
    # A new shard count rolled out: a replica with 8 joins, then the twelves stop.
    running.append(new(leases, "c", clock, clusters, shards=8))
    for _ in range(5):
        period(clock, running)
    assert set().union(*(r.holding for r in running)) <= set(clusters)
    for r in list(running[:2]):
        assert isinstance(r, ShardKeeper)
        r.stop()
        running.remove(r)
        for _ in range(3):
            period(clock, running)
    assert running[0].holding == set(clusters)


def test_a_live_cluster_lease_of_another_holds_the_cluster_back_even_without_its_member() -> None:
    """The rule as such: an unexpired ``gitopsbot-cluster-<name>`` held by someone else holds
    the cluster back, whether or not its holder's membership Lease is seen."""
    clusters = [f"gpu-{i:02d}" for i in range(12)]
    leases, clock = FakeLeases(), Clock()
    left = LeaseKeeper(
        leases, NS, sharding.cluster_lease("gpu-03"), "old", clock, TIMING, CLUSTER_LABELS
    )
    assert left.try_acquire().held
    fresh = new(leases, "new", clock, clusters)
    for _ in range(3):
        left.renew()
        period(clock, [fresh])
        assert fresh.holding == set(clusters) - {"gpu-03"}
    left.release()
    period(clock, [fresh])
    assert fresh.holding == set(clusters)


class _Interleaved(FakeLeases):
    """Runs ``between`` once, inside the next list of cluster Leases: another replica's whole
    step lands between this replica's lists and its takes."""

    def __init__(self) -> None:
        super().__init__()
        self.between: list[Replica] = []

    def list(self, namespace: str, labels: object) -> list:  # type: ignore[override]
        out = super().list(namespace, labels)  # type: ignore[arg-type]
        if labels == CLUSTER_LABELS and self.between:
            other = self.between.pop()
            other.step()
        return out


def test_a_replica_of_another_scheme_that_joins_mid_step_is_seen_before_the_shard_is_used() -> None:
    clusters = [f"gpu-{i:02d}" for i in range(12)]
    leases, clock = _Interleaved(), Clock()
    a = new(leases, "a", clock, clusters, shards=12)
    b = new(leases, "b", clock, clusters, shards=8)
    leases.between.append(b)  # b's first step runs after a listed, before a takes
    a.step()
    assert_exclusive([a, b])
    assert b.holding  # b saw no shard held yet: it took per-cluster Leases and acts
    for _ in range(5):
        period(clock, [a, b])
    assert a.holding | b.holding == set(clusters)


def test_per_cluster_leases_of_a_shard_lost_are_given_up_for_its_next_holder() -> None:
    """While migrating, a replica whose shard Lease was lost (its renews failed past the
    deadline) releases the per-cluster Leases of that shard's clusters at its next step, so
    the shard's next holder is not held back by them."""
    from gitopsbot.errors import KubeServerError

    clusters = [f"gpu-{i:02d}" for i in range(12)]
    leases, clock = FakeLeases(), Clock()
    old = OldReplica(leases, "old", clock, [])  # of another scheme, holding no cluster
    a = new(leases, "a", clock, clusters, shards=3)
    for _ in range(2):
        period(clock, [old, a])
    assert a.holding == set(clusters)
    shard0 = a._shard_keepers[0]
    leases.fail("replace", KubeServerError("down"), times=3)  # a's renews of one period fail
    shard0._valid_until = clock.mono - 1  # ... and shard 0's deadline has passed
    a.step()
    lost = {c for c in clusters if sharding.shard_of(c, 3) == 0}
    assert not a.holding & lost
    holders = {c: leases.read(NS, sharding.cluster_lease(c)).spec.holder for c in lost}  # type: ignore[union-attr]
    assert set(holders.values()) == {""}, holders
