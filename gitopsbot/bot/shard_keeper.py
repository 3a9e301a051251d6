"""Replicas sharing the fleet: one Lease per cluster, spread evenly over the live replicas.

Each replica keeps a membership Lease (``gitopsbot-replica-<identity>``, label
``gitopsbot.io/role=replica``) and one Lease per cluster it works on
(``gitopsbot-cluster-<name>``, label ``gitopsbot.io/role=cluster``). Once per retry period
``step``:

1. renews (or takes) its membership Lease;
2. lists the membership Leases and the cluster Leases (two ``list`` requests); a member is
   live while its Lease is not expired as this replica observed it (``core.lease``);
3. asks ``core.sharding.plan`` which clusters to take and which to give up;
4. gives up surplus clusters only at a step boundary: the cluster stops starting passes at
   once (``held`` is False) and its Lease is released once no pass is in flight;
5. renews the cluster Leases it holds and tries to take the free ones assigned to it.

The scheduler runs a cluster's job only while ``held`` (``on_change`` hands it the set), and
the reconciler checks ``held`` again before it executes a step (the guard ``may_act``): a
replica whose renews fail stops acting at its renew deadline, before another may take over.
``stop`` releases every Lease so a rolling update moves clusters at once.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager

from gitopsbot.bot.lease_keeper import LeaseKeeper, LeaseTiming
from gitopsbot.bot.pass_base import PassResult
from gitopsbot.core import sharding
from gitopsbot.core.lease import LeaseRecord, is_expired
from gitopsbot.errors import KubeError
from gitopsbot.ports.clock import Clock
from gitopsbot.ports.leases import Leases

log = logging.getLogger(__name__)

REPLICA_LABELS = {sharding.ROLE_LABEL: sharding.ROLE_REPLICA}
CLUSTER_LABELS = {sharding.ROLE_LABEL: sharding.ROLE_CLUSTER}


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
        on_change: Callable[[frozenset[str]], None] | None = None,
        on_lost: Callable[[str], None] | None = None,
    ) -> None:
        self._leases = leases
        self.namespace = namespace
        self.identity = identity
        self._clock = clock
        self.timing = timing = timing if timing is not None else LeaseTiming()
        self.on_change = on_change
        # Told when a cluster's Lease is lost (not released): stop what still runs for it
        # (the helm child of a step in flight) before another replica may take over.
        self.on_lost = on_lost
        self._membership = LeaseKeeper(
            leases,
            namespace,
            sharding.replica_lease(identity),
            identity,
            clock,
            timing,
            labels=REPLICA_LABELS,
        )
        self._keepers: dict[str, LeaseKeeper] = {}
        self._locks: dict[str, threading.Lock] = {}  # held while a pass of the cluster runs
        self._wanted: set[str] = set()  # the fleet's clusters this replica may share
        self._draining: set[str] = set()  # to release once no pass is in flight
        self._seen: dict[str, tuple[str, float]] = {}  # member lease → (version, since)
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

    # -- what the scheduler and the reconciler ask ----------------------------------------

    def held(self, cluster: str) -> bool:
        """May this replica act on ``cluster`` now (its Lease held, and not being given up)."""
        keeper = self._keepers.get(cluster)
        with self._guard:
            draining = cluster in self._draining
        return keeper is not None and not draining and keeper.held

    @property
    def holding(self) -> frozenset[str]:
        return frozenset(c for c in self._keepers if self.held(c))

    @contextmanager
    def acting(self, cluster: str) -> Iterator[bool]:
        """Around a pass: yields whether the pass may run; the Lease is not released while
        the block runs (the step boundary)."""
        lock = self._locks.get(cluster)
        if lock is None:
            yield False
            return
        with lock:
            yield self.held(cluster)

    def guarded(self, reconcile: Callable[[str], PassResult]) -> Callable[[str], PassResult]:
        """``reconcile`` run only while the cluster's Lease is held, never during a release."""

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
            for name in wanted - set(self._keepers):
                self._keepers[name] = LeaseKeeper(
                    self._leases,
                    self.namespace,
                    sharding.cluster_lease(name),
                    self.identity,
                    self._clock,
                    self.timing,
                    labels=CLUSTER_LABELS,
                )
                self._locks[name] = threading.Lock()
            for name in set(self._keepers) - wanted:
                self._draining.add(name)  # released at the next step, then forgotten

    # -- one period -----------------------------------------------------------------------

    def step(self) -> None:
        """One retry period: membership, members, plan, release, renew, take."""
        self._keep_membership()
        try:
            members = self._live_members()
            leases = {r.name: r for r in self._leases.list(self.namespace, CLUSTER_LABELS)}
        except KubeError as e:
            if str(e) != self._list_said:
                log.warning("leases: cannot list (renewing what is held): %s", e)
            self._list_said = str(e)
            members, leases = None, None
        else:
            self._list_said = ""
        with self._guard:
            clusters = sorted(self._wanted)
        self._renew_held()
        if members is not None and leases is not None:
            self.members = members
            free = set()
            now = self._clock.now()
            for cluster in clusters:
                keeper = self._keepers[cluster]
                record = leases.get(keeper.name)
                unchanged = keeper.observe(record)
                if record is None or is_expired(record.spec, now, unchanged):
                    free.add(cluster)
            held = [c for c in clusters if self._keepers[c].held]
            plan = sharding.plan(clusters, members, self.identity, held, free)
            with self._guard:
                self._draining |= set(plan.release)
            for cluster in plan.take:
                self._keepers[cluster].try_acquire()
        self._release_drained()
        self._announce()

    def _keep_membership(self) -> None:
        keeper = self._membership
        state = keeper.renew() if keeper.held else keeper.try_acquire()
        said = "" if state.held else state.reason
        if said and said != self._membership_said:  # once per reason, not every period
            log.warning("leases: membership %s not held: %s", keeper.name, said)
        self._membership_said = said

    def _live_members(self) -> frozenset[str]:
        now = self._clock.now()
        at = self._clock.monotonic()
        live = {self.identity}
        records: list[LeaseRecord] = self._leases.list(self.namespace, REPLICA_LABELS)
        for record in records:
            version, since = self._seen.get(record.name, ("", at))
            if version != record.resource_version:
                since = at
            self._seen[record.name] = (record.resource_version, since)
            if not is_expired(record.spec, now, at - since):
                live.add(record.spec.holder)
        return frozenset(live)

    def _renew_held(self) -> None:
        for cluster, keeper in list(self._keepers.items()):
            # Also a keeper whose deadline passed since: renew() reports that as lost.
            state = keeper.renew()
            if state.lost:
                log.warning("%s: lease lost (%s): this replica stops acting", cluster, state.reason)
                if self.on_lost is not None:
                    self.on_lost(cluster)

    def _release_drained(self) -> None:
        with self._guard:
            draining = sorted(self._draining)
        for cluster in draining:
            keeper = self._keepers.get(cluster)
            lock = self._locks.get(cluster)
            if keeper is None or lock is None:
                continue
            if not lock.acquire(blocking=False):
                continue  # a pass is in flight: released at its step boundary, next period
            try:
                if keeper.held:
                    keeper.release()
                    log.info("%s: lease released for another replica", cluster)
            finally:
                lock.release()
            with self._guard:
                self._draining.discard(cluster)
                if cluster not in self._wanted:  # gone from the fleet
                    self._keepers.pop(cluster, None)
                    self._locks.pop(cluster, None)

    def _announce(self) -> None:
        now = self.holding
        if now != self._announced:
            self._announced = now
            log.info(
                "leases: %s holds %d cluster(s): %s",
                self.identity,
                len(now),
                ", ".join(sorted(now)),
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
        """Stop the loop and release every Lease (after the passes stopped); the count released."""
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
        for cluster, keeper in list(self._keepers.items()):
            # A pass still running keeps its Lease until it returns (or the deadline ends it).
            lock = self._locks[cluster]
            got = lock.acquire(timeout=self.timing.renew_deadline_seconds)
            try:
                released += keeper.release()
            finally:
                if got:
                    lock.release()
        self._membership.release()
        log.info("leases: %s released %d cluster lease(s)", self.identity, released)
        return released
