"""ShardKeeper over the fake port with a hand-driven clock: replicas share twelve shards
(twelve clusters hashed to them), spread evenly, fail over when one stops renewing, give
shards up to a newcomer only at a step boundary, release everything on stop."""

from __future__ import annotations

import threading
from typing import Any

from gitopsbot.bot.lease_keeper import LeaseTiming
from gitopsbot.bot.pass_base import PassResult
from gitopsbot.bot.shard_keeper import CLUSTER_LABELS, ShardKeeper
from gitopsbot.core.replicas.sharding import DEFAULT_SHARDS, shard_lease, shard_of
from gitopsbot.testing import FakeLeases
from tests.leases.test_lease_keeper import Clock

NS = "gitopsbot"
TIMING = LeaseTiming(duration_seconds=15, renew_deadline_seconds=10, retry_period_seconds=2)
CLUSTERS = [f"gpu-{i:02d}" for i in range(12)]


def lease_of(cluster: str) -> str:
    """The Lease guarding ``cluster``: its shard's."""
    return shard_lease(DEFAULT_SHARDS, shard_of(cluster, DEFAULT_SHARDS))


def replica(leases: FakeLeases, name: str, clock: Clock, **kw: Any) -> ShardKeeper:
    return ShardKeeper(
        leases, namespace=NS, identity=name, clock=clock, clusters=CLUSTERS, timing=TIMING, **kw
    )


def periods(clock: Clock, replicas: list[ShardKeeper], n: int) -> None:
    for _ in range(n):
        for r in replicas:
            r.step()
        clock.sleep(TIMING.retry_period_seconds)


def assert_disjoint(replicas: list[ShardKeeper]) -> None:
    seen: set[str] = set()
    for r in replicas:
        assert not (r.holding & seen), f"{r.identity} shares {r.holding & seen}"
        seen |= r.holding


def test_three_replicas_hold_four_clusters_each_and_never_the_same() -> None:
    leases, clock = FakeLeases(), Clock()
    rs = [replica(leases, n, clock) for n in ("a", "b", "c")]
    for _ in range(20):
        periods(clock, rs, 1)
        assert_disjoint(rs)
    assert sorted(len(r.held_shards) for r in rs) == [4, 4, 4]
    assert set().union(*(r.holding for r in rs)) == set(CLUSTERS)
    assert all(r.members == {"a", "b", "c"} for r in rs)
    # Stable: more periods move nothing.
    before = [r.holding for r in rs]
    periods(clock, rs, 10)
    assert [r.holding for r in rs] == before
    holders = {leases.read(NS, lease_of(c)).spec.holder for c in CLUSTERS}  # type: ignore[union-attr]
    assert holders == {"a", "b", "c"}


def test_a_replica_that_stops_renewing_loses_its_clusters_to_the_survivors_in_one_duration() -> (
    None
):
    leases, clock = FakeLeases(), Clock()
    rs = [replica(leases, n, clock) for n in ("a", "b", "c")]
    periods(clock, rs, 15)
    dead = rs.pop(0)
    orphans = dead.holding
    assert len(dead.held_shards) == 4
    died_at = clock.mono
    taken_at = None
    for _ in range(30):
        periods(clock, rs, 1)
        assert_disjoint(rs)
        if orphans <= rs[0].holding | rs[1].holding and taken_at is None:
            taken_at = clock.mono
    assert taken_at is not None
    # Not before the duration (the dead one might still be acting: its deadline is shorter).
    assert TIMING.duration_seconds <= taken_at - died_at <= TIMING.duration_seconds + 4 * 2 + 2
    assert sorted(len(r.held_shards) for r in rs) == [6, 6]
    assert rs[0].holding | rs[1].holding == set(CLUSTERS)
    # The dead replica itself stopped counting on them at its renew deadline.
    assert not dead.holding


def test_a_newcomer_gets_its_share_and_a_busy_cluster_moves_only_after_its_pass() -> None:
    leases, clock = FakeLeases(), Clock()
    a, b = replica(leases, "a", clock), replica(leases, "b", clock)
    periods(clock, [a, b], 10)
    assert sorted(len(r.held_shards) for r in (a, b)) == [6, 6]
    c = replica(leases, "c", clock)
    # What c will be assigned; hold one of those passes in flight on its current holder.
    from gitopsbot.core.replicas.sharding import assign

    shards = [shard_lease(DEFAULT_SHARDS, i) for i in range(DEFAULT_SHARDS)]
    to_c = {k for k, v in assign(shards, ["a", "b", "c"]).items() if v == "c"}
    target = sorted(x for x in CLUSTERS if lease_of(x) in to_c)
    busy = target[0]
    owner = a if busy in a.holding else b
    in_pass, finish = threading.Event(), threading.Event()
    guarded_seen: list[bool] = []

    def reconcile(cluster: str) -> PassResult:
        in_pass.set()
        finish.wait(5)
        guarded_seen.append(owner.held(cluster))  # what the reconciler's guard would see
        return PassResult(cluster, "running")

    t = threading.Thread(target=owner.guarded(reconcile), args=(busy,))
    t.start()
    assert in_pass.wait(5)
    periods(clock, [a, b, c], 3)
    busy_shard = owner._shard_keepers[shard_of(busy, DEFAULT_SHARDS)]
    assert busy_shard.held  # not released mid-pass
    assert not owner.held(busy)  # ... but no new step may start there
    assert busy not in c.holding
    finish.set()
    t.join(5)
    assert guarded_seen == [False]
    periods(clock, [a, b, c], 3)
    assert sorted(c.holding) == target
    assert sorted(len(r.held_shards) for r in (a, b, c)) == [4, 4, 4]
    assert_disjoint([a, b, c])


def test_a_pass_runs_only_while_held_and_stop_releases_everything() -> None:
    leases, clock = FakeLeases(), Clock()
    changes: list[frozenset[str]] = []
    a = replica(leases, "a", clock, on_change=changes.append)
    ran: list[str] = []

    def idle(cluster: str) -> PassResult:
        ran.append(cluster)
        return PassResult(cluster, "idle")

    run = a.guarded(idle)
    assert run("gpu-00").action == "not-held"
    periods(clock, [a], 2)
    assert a.holding == set(CLUSTERS) and changes[-1] == set(CLUSTERS)
    assert run("gpu-00").action == "idle" and ran == ["gpu-00"]
    assert a.stop() == 12
    assert not a.holding
    for c in CLUSTERS:
        spec = leases.read(NS, lease_of(c)).spec  # type: ignore[union-attr]
        assert spec.holder == ""
    # Released: another replica takes them at its first period, not after the duration.
    b = replica(leases, "b", clock)
    periods(clock, [b], 1)
    assert b.holding == set(CLUSTERS)


def test_renews_that_keep_failing_stop_the_replica_before_the_duration() -> None:
    from gitopsbot.errors import KubeServerError

    leases, clock = FakeLeases(), Clock()
    a = replica(leases, "a", clock)
    periods(clock, [a], 2)
    assert len(a.holding) == 12
    last_renew = clock.mono - TIMING.retry_period_seconds
    leases.fail("read", KubeServerError("down"), times=10_000)
    leases.fail("list", KubeServerError("down"), times=10_000)
    while a.holding:
        periods(clock, [a], 1)
    assert clock.mono - last_renew <= TIMING.renew_deadline_seconds + TIMING.retry_period_seconds
    assert clock.mono - last_renew < TIMING.duration_seconds


def test_the_identity_is_the_pod_name_or_the_host_name_plus_a_random_suffix(
    monkeypatch: Any,
) -> None:
    from gitopsbot.app import replica_identity

    monkeypatch.setenv("POD_NAME", "gitopsbot-7d9f-x2")
    first, second = replica_identity(), replica_identity()
    assert first.startswith("gitopsbot-7d9f-x2-") and first != second
    assert replica_identity("bot-a").startswith("bot-a-")
    monkeypatch.delenv("POD_NAME")
    import platform

    assert replica_identity().startswith(f"{platform.node() or 'gitopsbot'}-")


def test_run_refuses_leases_with_once_and_a_deadline_not_below_the_duration(
    capsys: Any,
) -> None:
    from gitopsbot.cli import main

    base = ["run", "--fleet-url", "file:///nowhere", "--leases-namespace", "ops"]
    assert main([*base, "--once"]) == 2  # bad options (docs/commands.md#exit-statuses)
    assert "--once works alone" in capsys.readouterr().err
    assert main([*base, "--lease-duration", "10", "--lease-renew-deadline", "10"]) == 2
    assert "renew deadline must be shorter" in capsys.readouterr().err


class _SlowList(FakeLeases):
    """FakeLeases whose cluster ``list`` blocks, once armed, until let go: a step in flight
    on a loaded machine."""

    def __init__(self) -> None:
        super().__init__()
        self.armed, self.inside, self.go = False, threading.Event(), threading.Event()

    def list(self, namespace: str, labels: Any) -> Any:
        if self.armed and labels == CLUSTER_LABELS:
            self.inside.set()
            self.go.wait(10)
        return super().list(namespace, labels)


def test_stop_waits_for_the_step_in_flight_so_nothing_is_taken_after_the_release() -> None:
    """A step still running when ``stop`` is called (its list slow) would take the Leases
    ``stop`` had just released: the step ends first, then everything is released."""
    leases, clock = _SlowList(), Clock()
    timing = LeaseTiming(duration_seconds=15, renew_deadline_seconds=0.5, retry_period_seconds=0.1)
    a = ShardKeeper(
        leases, namespace=NS, identity="a", clock=clock, clusters=CLUSTERS, timing=timing
    )
    for _ in range(2):
        a.step()
    assert a.holding == set(CLUSTERS)
    leases.armed = True
    a.start()
    assert leases.inside.wait(5), "the loop's step did not list"
    stopped: list[int] = []
    stopper = threading.Thread(target=lambda: stopped.append(a.stop()))
    stopper.start()
    stopper.join(1.0)  # past the renew deadline: stop no longer waits for the thread alone
    leases.go.set()
    stopper.join(10)
    assert stopped == [12]
    assert a._thread is not None
    a._thread.join(5)  # the loop is over: nothing it does lands after this
    assert not a._thread.is_alive()
    holders = [leases.read(NS, lease_of(c)).spec.holder for c in CLUSTERS]  # type: ignore[union-attr]
    assert holders == [""] * 12, holders


def test_run_refuses_a_shard_count_out_of_bounds(capsys: Any) -> None:
    from gitopsbot.cli import main

    base = ["run", "--fleet-url", "file:///nowhere", "--leases-namespace", "ops"]
    for bad in ("0", "65"):
        assert main([*base, "--lease-shards", bad]) == 2
        assert "shard count must be between 1 and 64" in capsys.readouterr().err


def test_a_replica_holds_only_its_shards_and_renews_them_not_its_clusters() -> None:
    leases, clock = FakeLeases(), Clock()
    a = ShardKeeper(
        leases, namespace=NS, identity="a", clock=clock, clusters=CLUSTERS, timing=TIMING, shards=3
    )
    periods(clock, [a], 2)
    assert a.holding == set(CLUSTERS) and a.held_shards == {0, 1, 2}
    names = {r.name for r in leases.list(NS, {})}
    assert names == {"gitopsbot-replica-a", *(f"gitopsbot-shard-3-{i}" for i in range(3))}
