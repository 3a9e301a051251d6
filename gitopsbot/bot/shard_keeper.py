"""Replicas sharing the fleet: a fixed number of shard Leases, spread evenly over the replicas.

Each replica keeps a membership Lease (``gitopsbot-replica-<identity>``, labels
``gitopsbot.io/role=replica`` and ``gitopsbot.io/shards=<count>``) and the shard Leases
assigned to it (``gitopsbot-shard-<count>-<index>``, label ``gitopsbot.io/role=shard``). A
cluster belongs to shard ``core.replicas.sharding.shard_of(name, count)``; a replica acts on it only
while it holds that shard. Lease writes per retry period: one per replica plus one per shard,
whatever the fleet's size (docs/leases.md#how-many-writes). Once per retry period ``step``:

1. renews (or takes) its membership Lease;
2. lists the membership, shard and per-cluster Leases (three ``list`` requests); a member is
   live while its Lease is not expired as this replica observed it (``core.replicas.lease``);
3. renews the shard Leases it holds;
4. asks ``core.replicas.sharding.plan`` which shards to take and which to give up, among the live
   members of its own shard count;
5. gives up surplus shards only at a step boundary: their clusters stop starting passes at
   once (``held`` is False) and the Lease is released once no pass of any of them is in
   flight; takes the free shards assigned to it.

Migration (docs/leases.md#migration): an unexpired per-cluster Lease
(``gitopsbot-cluster-<name>``, versions before shards) held by another replica holds that
cluster back. While a live member of another scheme is seen (an old version, or another shard
count: its membership Lease lacks our count), the replica also holds the per-cluster Lease of
every cluster it acts on, the one object both schemes honour, and takes one only while no
shard Lease of another count covering the cluster is held by someone else. It lists the
members again after taking a shard, so a replica of another scheme that appeared meanwhile is
seen before the shard's clusters are acted on.

The scheduler runs a cluster's job only while ``held`` (``on_change`` hands it the set), and
the reconciler checks ``held`` again before it executes a step (the guard ``may_act``): a
replica whose renews fail stops acting at its renew deadline, before another may take over.
``stop`` releases every Lease so a rolling update moves clusters at once.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import ExitStack, contextmanager
from datetime import datetime

from gitopsbot.bot.lease_keeper import LeaseKeeper, LeaseTiming
from gitopsbot.bot.pass_base import PassResult
from gitopsbot.core.replicas import sharding
from gitopsbot.core.replicas.lease import LeaseRecord, is_expired
from gitopsbot.errors import KubeError
from gitopsbot.ports.clock import Clock
from gitopsbot.ports.leases import Leases

log = logging.getLogger(__name__)

REPLICA_LABELS = {sharding.ROLE_LABEL: sharding.ROLE_REPLICA}
CLUSTER_LABELS = {sharding.ROLE_LABEL: sharding.ROLE_CLUSTER}
SHARD_LABELS = {sharding.ROLE_LABEL: sharding.ROLE_SHARD}


class ShardKeeper:
    def __init__(
        self,
        leases: Leases,
        *,
        namespace: str,
        identity: str,
        clock: Clock,
        clusters: Iterable[str],
        timing: LeaseTiming | None = None,
        shards: int = sharding.DEFAULT_SHARDS,
        on_change: Callable[[frozenset[str]], None] | None = None,
        on_lost: Callable[[str], None] | None = None,
    ) -> None:
        self._leases = leases
        self.namespace = namespace
        self.identity = identity
        self._clock = clock
        self.timing = timing = timing if timing is not None else LeaseTiming()
        self.shards = count = sharding.check_shards(shards)
        self.on_change = on_change
        # Told when a cluster's Lease (its shard's) is lost (not released): stop what still
        # runs for it (the helm child of a step in flight) before another may take over.
        self.on_lost = on_lost
        self._membership = self._keeper(
            sharding.replica_lease(identity),
            {**REPLICA_LABELS, sharding.SHARDS_LABEL: str(count)},
        )
        self._shard_keepers = {
            i: self._keeper(sharding.shard_lease(count, i), sharding.shard_labels(count, i))
            for i in range(count)
        }
        self._shard_by_lease = {k.name: i for i, k in self._shard_keepers.items()}
        # Per-cluster Leases, held only while a replica of another scheme is live.
        self._cluster_keepers: dict[str, LeaseKeeper] = {}
        self._locks: dict[str, threading.Lock] = {}  # held while a pass of the cluster runs
        self._shard_of: dict[str, int] = {}
        self._wanted: set[str] = set()  # the fleet's clusters this replica may share
        self._draining: set[int] = set()  # shards to release once no pass is in flight
        self._held_back: frozenset[str] = frozenset()  # another's per-cluster Lease is live
        self._compat = False  # a live member of another scheme: per-cluster Leases too
        self._seen: dict[str, tuple[str, float]] = {}  # lease → (version, since), observed
        self._guard = threading.Lock()
        self._announced: frozenset[str] = frozenset()
        self._membership_said = ""  # the last warning of each kind, said once
        self._list_said = ""
        self.members: frozenset[str] = frozenset({identity})
        self._stop = threading.Event()
        # Held by the loop for a whole step: ``stop`` releases only once the step in flight
        # is over, so no renew or take of that step lands after the release.
        self._stepping = threading.Lock()
        self._thread: threading.Thread | None = None
        self.set_clusters(clusters)

    def _keeper(self, name: str, labels: dict[str, str]) -> LeaseKeeper:
        return LeaseKeeper(
            self._leases, self.namespace, name, self.identity, self._clock, self.timing, labels
        )

    # -- what the scheduler and the reconciler ask ----------------------------------------

    def held(self, cluster: str) -> bool:
        """May this replica act on ``cluster`` now: its shard's Lease held and not being given
        up, no other replica's per-cluster Lease live, and while migrating its own held."""
        with self._guard:
            shard = self._shard_of.get(cluster)
            if (
                shard is None
                or cluster not in self._wanted
                or shard in self._draining
                or cluster in self._held_back
            ):
                return False
            own = self._cluster_keepers.get(cluster) if self._compat else None
            compat = self._compat
        if not self._shard_keepers[shard].held:
            return False
        return not compat or (own is not None and own.held)

    @property
    def holding(self) -> frozenset[str]:
        with self._guard:
            wanted = sorted(self._wanted)
        return frozenset(c for c in wanted if self.held(c))

    @property
    def held_shards(self) -> frozenset[int]:
        return frozenset(i for i, k in self._shard_keepers.items() if k.held)

    @contextmanager
    def acting(self, cluster: str) -> Iterator[bool]:
        """Around a pass: yields whether the pass may run; the shard's Lease is not released
        while the block runs (the step boundary)."""
        lock = self._locks.get(cluster)
        if lock is None:
            yield False
            return
        with lock:
            yield self.held(cluster)

    def guarded(self, reconcile: Callable[[str], PassResult]) -> Callable[[str], PassResult]:
        """``reconcile`` run only while the cluster is held, never during a release."""

        def run(cluster: str) -> PassResult:
            with self.acting(cluster) as may:
                if not may:
                    return PassResult(cluster, "not-held", "another replica holds its Lease")
                return reconcile(cluster)

        return run

    def set_clusters(self, names: Iterable[str]) -> None:
        wanted = set(names)
        with self._guard:
            self._wanted = wanted
            for name in wanted - set(self._locks):
                self._locks[name] = threading.Lock()
                self._shard_of[name] = sharding.shard_of(name, self.shards)
            # A cluster gone from the fleet stops at once (``held`` asks ``_wanted``); its lock
            # stays until its per-cluster Lease, if any, is released at a step boundary.

    # -- one period -----------------------------------------------------------------------

    def step(self) -> None:
        """One retry period: membership, lists, renew, plan, release, take."""
        self._keep_membership()
        try:
            members, foreign = self._live_members()
            shard_records = self._leases.list(self.namespace, SHARD_LABELS)
            cluster_records = self._leases.list(self.namespace, CLUSTER_LABELS)
        except KubeError as e:
            if str(e) != self._list_said:
                log.warning("leases: cannot list (renewing what is held): %s", e)
            self._list_said = str(e)
            self._renew_held()
            self._release_drained()
            self._announce()
            return
        self._list_said = ""
        self._renew_held()
        self.members = members
        now = self._clock.now()
        at = self._clock.monotonic()
        own_records: dict[int, LeaseRecord] = {}
        foreign_shards: list[tuple[int, int]] = []  # live shard Leases of another count
        for record in shard_records:
            index = self._shard_by_lease.get(record.name)
            if index is not None:
                own_records[index] = record
                continue
            key = sharding.shard_key(_labels(record))
            if key is not None and self._live_other(record, now, at):
                foreign_shards.append(key)
        others = {r.name: r for r in cluster_records if self._live_other(r, now, at)}
        with self._guard:
            clusters = sorted(self._wanted)
            self._held_back = frozenset(c for c in clusters if sharding.cluster_lease(c) in others)
        free = set()
        for index, keeper in self._shard_keepers.items():
            mine = own_records.get(index)
            unchanged = keeper.observe(mine)
            if mine is None or is_expired(mine.spec, now, unchanged):
                free.add(keeper.name)
        held = [k.name for k in self._shard_keepers.values() if k.held]
        plan = sharding.plan(list(self._shard_by_lease), members, self.identity, held, free)
        with self._guard:
            self._draining |= {self._shard_by_lease[name] for name in plan.release}
        took = [self._shard_keepers[self._shard_by_lease[n]].try_acquire() for n in plan.take]
        if any(state.held for state in took):
            # Seen after the take: a replica of another scheme that joined since the first
            # list (and may take per-cluster Leases of these clusters) is counted now.
            try:
                _, foreign = self._live_members()
            except KubeError:
                foreign = True  # unknown: the careful way, per-cluster Leases as well
        self._keep_cluster_leases(clusters, foreign, others, foreign_shards)
        self._release_drained()
        self._announce()

    def _live_other(self, record: LeaseRecord, now: datetime, at: float) -> bool:
        """Held by another replica and not expired as this one observed it."""
        version, since = self._seen.get(record.name, ("", at))
        if version != record.resource_version:
            since = at
        self._seen[record.name] = (record.resource_version, since)
        holder = record.spec.holder
        return (
            bool(holder)
            and holder != self.identity
            and not is_expired(record.spec, now, at - since)
        )

    def _keep_membership(self) -> None:
        keeper = self._membership
        state = keeper.renew() if keeper.held else keeper.try_acquire()
        said = "" if state.held else state.reason
        if said and said != self._membership_said:  # once per reason, not every period
            log.warning("leases: membership %s not held: %s", keeper.name, said)
        self._membership_said = said

    def _live_members(self) -> tuple[frozenset[str], bool]:
        """The live members of this shard count (this replica always), and whether a live
        member of another scheme (another count, or a version before shards) is seen."""
        now = self._clock.now()
        at = self._clock.monotonic()
        live = {self.identity}
        foreign = False
        records: list[LeaseRecord] = self._leases.list(self.namespace, REPLICA_LABELS)
        mine = str(self.shards)
        for record in records:
            version, since = self._seen.get(record.name, ("", at))
            if version != record.resource_version:
                since = at
            self._seen[record.name] = (record.resource_version, since)
            if is_expired(record.spec, now, at - since) or record.spec.holder == self.identity:
                continue
            if _labels(record).get(sharding.SHARDS_LABEL) == mine:
                live.add(record.spec.holder)
            else:
                foreign = True
        return frozenset(live), foreign

    def _keep_cluster_leases(
        self,
        clusters: list[str],
        foreign: bool,
        others: dict[str, LeaseRecord],
        foreign_shards: list[tuple[int, int]],
    ) -> None:
        """While a replica of another scheme is live, hold the per-cluster Lease of each
        cluster of the shards held (taken only when no one else's Lease, per-cluster or a
        shard of another count, guards it); otherwise give them up at a step boundary."""
        if foreign:
            with self._guard:
                draining = set(self._draining)
            for cluster in clusters:
                shard = self._shard_of[cluster]
                if shard in draining or not self._shard_keepers[shard].held:
                    continue
                keeper = self._cluster_keepers.get(cluster)
                if keeper is not None and keeper.held:
                    continue
                name = sharding.cluster_lease(cluster)
                if name in others or any(sharding.covers(k, cluster) for k in foreign_shards):
                    continue
                if keeper is None:
                    keeper = self._keeper(name, dict(CLUSTER_LABELS))
                    self._cluster_keepers[cluster] = keeper
                keeper.try_acquire()
        if foreign and not self._compat:
            log.info("leases: a replica of another scheme is live: per-cluster Leases too")
        elif not foreign and self._compat:
            log.info(
                "leases: every live replica holds shards of %d: shard Leases alone", self.shards
            )
        with self._guard:
            self._compat = foreign  # after the takes: ``held`` asks for them from now on

    def _renew_held(self) -> None:
        for index, keeper in self._shard_keepers.items():
            # Also a keeper whose deadline passed since: renew() reports that as lost.
            state = keeper.renew()
            if state.lost:
                log.warning(
                    "%s: lease lost (%s): this replica stops acting", keeper.name, state.reason
                )
                with self._guard:
                    lost = [c for c in sorted(self._wanted) if self._shard_of[c] == index]
                for cluster in lost:
                    self._tell_lost(cluster)
        for cluster, keeper in list(self._cluster_keepers.items()):
            if keeper.renew().lost:
                self._tell_lost(cluster)

    def _tell_lost(self, cluster: str) -> None:
        if self.on_lost is not None:
            self.on_lost(cluster)

    def _release_drained(self) -> None:
        with self._guard:
            draining = sorted(self._draining)
            wanted = set(self._wanted)
            compat = self._compat
        for index in draining:
            with ExitStack() as stack:
                if not self._lock_shard(index, stack, blocking=False):
                    continue  # a pass is in flight: released at its step boundary, later
                if self._shard_keepers[index].held:
                    self._shard_keepers[index].release()
                    log.info("%s: released for another replica", self._shard_keepers[index].name)
                for cluster in self._clusters_of(index):
                    self._release_cluster_lease(cluster)
            with self._guard:
                self._draining.discard(index)
        # Per-cluster Leases no longer needed: migration over, the cluster left the fleet, or
        # its shard was lost (another holder of the shard must be able to take them).
        for cluster in sorted(self._cluster_keepers):
            shard = self._shard_of.get(cluster)
            keep = compat and cluster in wanted and shard is not None
            if keep and self._shard_keepers[shard].held:  # type: ignore[index]
                continue
            lock = self._locks.get(cluster)
            if lock is None or not lock.acquire(blocking=False):
                continue
            try:
                self._release_cluster_lease(cluster)
            finally:
                lock.release()
        with self._guard:
            for cluster in set(self._locks) - self._wanted - set(self._cluster_keepers):
                self._locks.pop(cluster, None)
                self._shard_of.pop(cluster, None)

    def _release_cluster_lease(self, cluster: str) -> int:
        keeper = self._cluster_keepers.pop(cluster, None)
        return int(keeper.release()) if keeper is not None else 0

    def _clusters_of(self, index: int) -> list[str]:
        with self._guard:
            return sorted(c for c, s in self._shard_of.items() if s == index)

    def _lock_shard(self, index: int, stack: ExitStack, *, blocking: bool) -> bool:
        """Take the lock of every cluster of shard ``index`` (in name order), so no pass of
        them is in flight; False (none kept) when one is busy and ``blocking`` is False."""
        for cluster in self._clusters_of(index):
            lock = self._locks.get(cluster)
            if lock is None:
                continue
            if blocking:
                got = lock.acquire(timeout=self.timing.renew_deadline_seconds)
            else:
                got = lock.acquire(blocking=False)
            if not got:
                if not blocking:
                    stack.close()
                    return False
                continue  # past the deadline the pass no longer counts on the Lease anyway
            stack.callback(lock.release)
        return True

    def _announce(self) -> None:
        now = self.holding
        if now != self._announced:
            self._announced = now
            log.info(
                "leases: %s holds %d cluster(s) in %d shard(s)",
                self.identity,
                len(now),
                len(self.held_shards),
            )
            if self.on_change is not None:
                self.on_change(now)

    # -- the loop -------------------------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="gitopsbot-leases", daemon=True)
        self._thread.start()

    @property
    def running(self) -> bool:
        """The renewing loop runs (``/readyz``: leases held or being waited for)."""
        return self._thread is not None and self._thread.is_alive() and not self._stop.is_set()

    def _loop(self) -> None:
        while not self._stop.is_set():
            began = self._clock.monotonic()
            with self._stepping:
                if self._stop.is_set():
                    break
                try:
                    self.step()
                except Exception:  # a bug must not stop the renewals silently: log, go on
                    log.exception("leases: step failed")
            spent = self._clock.monotonic() - began
            self._stop.wait(max(0.0, self.timing.retry_period_seconds - spent))

    def stop(self) -> int:
        """Stop the loop and release every Lease (after the passes stopped); the count of
        shard Leases released."""
        self._stop.set()
        # A step in flight (slow API calls on a loaded machine) could otherwise take or renew
        # a Lease after it was released here: wait for it, as long as its calls may take.
        stepping = self._stepping.acquire(timeout=self.timing.duration_seconds)
        if not stepping:
            log.warning("leases: a step is still running; releasing anyway")
        try:
            return self._release_all()
        finally:
            if stepping:
                self._stepping.release()
            if self._thread is not None:
                self._thread.join(timeout=self.timing.renew_deadline_seconds)

    def _release_all(self) -> int:
        released = 0
        for index, keeper in self._shard_keepers.items():
            # A pass still running keeps the Lease until it returns (or the deadline ends it).
            with ExitStack() as stack:
                if keeper.held:
                    self._lock_shard(index, stack, blocking=True)
                released += keeper.release()  # no request unless it was held
                for cluster in self._clusters_of(index):
                    self._release_cluster_lease(cluster)
        for cluster in list(self._cluster_keepers):
            self._release_cluster_lease(cluster)
        self._membership.release()
        log.info("leases: %s released %d shard lease(s)", self.identity, released)
        return released


def _labels(record: LeaseRecord) -> dict[str, str]:
    meta = record.raw.get("metadata") or {}
    labels = meta.get("labels") or {}
    return {str(k): str(v) for k, v in labels.items()} if isinstance(labels, dict) else {}
