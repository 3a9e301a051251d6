"""Prometheus metrics: what the bot does, as Argo CD and Flux users expect to scrape it.

Built on the official client library (``prometheus_client``) in a registry of its own (no
process-global state: each ``BotMetrics`` is separate, so tests and a sandbox's several bots
never share counters). Every name starts with ``gitopsbot_``; counters end in ``_total``,
durations are seconds, times are UNIX seconds (``_timestamp_seconds``), ratios are 0..1; the
labels are bounded (cluster, pool, component, kinds, results, forge, method, endpoint class,
status code), never an operation id, a SHA or a URL. docs/metrics.md lists every metric.

``BotMetrics`` is fed by:

* the announcer (``ports.observers``): ``happened`` for operations, steps and pools, and
  ``pass_finished`` for passes;
* ``bot.gauges`` after each pass (``ports.metrics.FleetGauges``): windows open, merges queued,
  nodes per state of each pool phase (``core.records.node_states``);
* the forge's HTTP choke point (``ForgeHttp.observe``): requests and the rate limit left;
* the shard keeper, read at scrape time (``watch_leases``): Leases held, replicas seen;
* the scheduler's ready-queue, read at scrape time (``watch_scheduler``): fleet-wide figures
  only (queue depth, oldest wait, workers busy, runs delayed), no series per cluster.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Summary
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from gitopsbot.adapters.forge._http import ForgeCall
from gitopsbot.core.notices.happenings import Happening, HappeningKind
from gitopsbot.core.records.node_states import NodeState
from gitopsbot.ports.clock import Clock
from gitopsbot.ports.metrics import DispatchStats, FleetGauges
from gitopsbot.ports.observers import Listener, PassListener

# Steps last from a second (a skipped backup) to hours (a pool rolling in its window).
STEP_BUCKETS = (1, 5, 15, 30, 60, 120, 300, 600, 1200, 1800, 3600, 7200, 14400, 28800)
# A pass reads Git and the cluster, and at most one step (a helm upgrade: minutes).
PASS_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)

OUTCOMES = {
    HappeningKind.SUCCEEDED: "succeeded",
    HappeningKind.FAILED: "failed",
    HappeningKind.BLOCKED: "blocked",
    HappeningKind.SUPERSEDED: "superseded",
}
POOL_KINDS = (HappeningKind.POOL_PROGRESS, HappeningKind.POOL_PAUSED, HappeningKind.POOL_HALTED)
STEP_ENDS = (HappeningKind.STEP_SUCCEEDED, HappeningKind.STEP_FAILED, HappeningKind.STEP_SKIPPED)


class BotMetrics(FleetGauges, Listener, PassListener):
    def __init__(self, clock: Clock, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self._clock = clock
        r = self.registry
        self.operations = Counter(
            "gitopsbot_operations",
            "Operations ended, by outcome (succeeded, failed, blocked, superseded).",
            ["cluster", "kind", "result"],
            registry=r,
        )
        # Fleet-wide, by step kind only: 15 buckets x step kinds x 1,000 clusters made a
        # scrape take seconds (#29, benchmarks/metrics_bench.py); a cluster's own step times
        # are in its journal (`gitopsbot status`).
        self.steps = Histogram(
            "gitopsbot_step_duration_seconds",
            "How long operation steps ran, from started to succeeded or failed.",
            ["step_kind"],
            buckets=STEP_BUCKETS,
            registry=r,
        )
        self.pool_progress = Gauge(
            "gitopsbot_pool_rollout_progress_ratio",
            "The running or last rollout of a component on a pool, 0..1.",
            ["cluster", "pool", "component"],
            registry=r,
        )
        self.pool_halts = Counter(
            "gitopsbot_pool_halts",
            "Pool rollouts halted (deadline passed or stalled).",
            ["cluster", "pool", "component"],
            registry=r,
        )
        self.window_open = Gauge(
            "gitopsbot_pool_window_open",
            "1 while the pool's maintenance window is open (or it has none), else 0.",
            ["cluster", "pool"],
            registry=r,
        )
        self.queued = Gauge(
            "gitopsbot_queued_merges",
            "Merges waiting in the cluster's queue (for a window or the running operation).",
            ["cluster"],
            registry=r,
        )
        # Per cluster only a count and a sum (passes, and their mean time); the buckets are
        # fleet-wide (``pass_seconds_fleet``): 14 bucket series per cluster were 14,000 at
        # 1,000 clusters (#29, benchmarks/metrics_bench.py).
        self.pass_seconds = Summary(
            "gitopsbot_reconcile_duration_seconds",
            "How long reconcile passes took, failed ones included (count and sum).",
            ["cluster"],
            registry=r,
        )
        self.pass_seconds_fleet = Histogram(
            "gitopsbot_reconcile_fleet_duration_seconds",
            "How long reconcile passes of every cluster took, failed ones included.",
            buckets=PASS_BUCKETS,
            registry=r,
        )
        self.pass_failures = Counter(
            "gitopsbot_reconcile_failures",
            "Reconcile passes that ended with an error (Git, the cluster, the fleet files).",
            ["cluster"],
            registry=r,
        )
        self.last_success = Gauge(
            "gitopsbot_reconcile_last_success_timestamp_seconds",
            "When a pass of the cluster last ended without error, UNIX seconds.",
            ["cluster"],
            registry=r,
        )
        self.drift_items = Gauge(
            "gitopsbot_drift_items",
            "Differences between the cluster and Git at the last drift check (docs/drift.md); "
            "-1: the cluster could not be checked.",
            ["cluster"],
            registry=r,
        )
        self.drift_checked = Gauge(
            "gitopsbot_drift_last_check_timestamp_seconds",
            "When the cluster's drift was last checked, UNIX seconds.",
            ["cluster"],
            registry=r,
        )
        self.rollout_nodes_gauge = Gauge(
            "gitopsbot_rollout_nodes",
            "Nodes of a pool's running or last rollout of a component, by state (pending, "
            "in-batch, updated, verified, failed, held, cordoned; docs/progress.md).",
            ["cluster", "pool", "component", "state"],
            registry=r,
        )
        self.forge_requests = Counter(
            "gitopsbot_forge_requests",
            "Forge API requests by endpoint class and HTTP status code (0: no answer).",
            ["forge", "method", "endpoint", "code"],
            registry=r,
        )
        self.rate_remaining = Gauge(
            "gitopsbot_forge_rate_limit_remaining",
            "Requests left in the forge's rate-limit window, as its last answer said.",
            ["forge"],
            registry=r,
        )
        self.rate_reset = Gauge(
            "gitopsbot_forge_rate_limit_reset_timestamp_seconds",
            "When the forge's rate-limit window resets, UNIX seconds.",
            ["forge"],
            registry=r,
        )
        self._lock = threading.Lock()
        self._step_started: dict[tuple[str, str, str], float] = {}  # (cluster, op, step)
        self._pools: set[tuple[str, str, str]] = set()  # pool_progress series set
        self._windows: set[tuple[str, str]] = set()  # window_open series set
        self._node_phases: set[tuple[str, str, str]] = set()  # rollout_nodes (cluster, pool, comp)

    # -- ports.observers.Listener -------------------------------------------------------------

    def happened(self, happening: Happening) -> None:
        h, kind = happening, happening.kind
        if kind in OUTCOMES:
            self.operations.labels(h.cluster, h.op_kind.value, OUTCOMES[kind]).inc()
        if kind is HappeningKind.STARTED:
            self._forget_pools(h.cluster)  # a new operation: its pools start from nothing
        elif kind is HappeningKind.STEP_STARTED and h.at is not None:
            with self._lock:
                self._step_started[(h.cluster, h.op_id, h.step)] = h.at.timestamp()
        elif kind in STEP_ENDS:
            with self._lock:
                began = self._step_started.pop((h.cluster, h.op_id, h.step), None)
            if kind is not HappeningKind.STEP_SKIPPED and began is not None and h.at is not None:
                self.steps.labels(h.step_kind).observe(max(0.0, h.at.timestamp() - began))
        elif kind in POOL_KINDS and h.progress is not None:
            with self._lock:
                self._pools.add((h.cluster, h.pool, h.component))
            self.pool_progress.labels(h.cluster, h.pool, h.component).set(h.progress / 100)
            if kind is HappeningKind.POOL_HALTED:
                self.pool_halts.labels(h.cluster, h.pool, h.component).inc()
        if kind in (HappeningKind.SUCCEEDED, HappeningKind.FAILED):
            with self._lock:  # steps that never ended (a remediation took over)
                for key in [k for k in self._step_started if k[:2] == (h.cluster, h.op_id)]:
                    del self._step_started[key]

    def _forget_pools(self, cluster: str) -> None:
        with self._lock:
            gone = {labels for labels in self._pools if labels[0] == cluster}
            self._pools -= gone
        for labels in gone:
            self.pool_progress.remove(*labels)

    # -- ports.observers.PassListener ---------------------------------------------------------

    def pass_finished(
        self, cluster: str, *, action: str, detail: str, error: str, seconds: float
    ) -> None:
        self.pass_seconds.labels(cluster).observe(max(0.0, seconds))
        self.pass_seconds_fleet.observe(max(0.0, seconds))
        if error:
            self.pass_failures.labels(cluster).inc()
        else:
            self.last_success.labels(cluster).set(self._clock.now().timestamp())

    # -- ports.metrics.FleetGauges ------------------------------------------------------------

    def drift(self, cluster: str, items: int | None) -> None:
        """A drift check ended: ``items`` differences, None when it could not check."""
        self.drift_items.labels(cluster).set(-1 if items is None else items)
        self.drift_checked.labels(cluster).set(self._clock.now().timestamp())

    def pool_windows(self, cluster: str, open_by_pool: Mapping[str, bool]) -> None:
        with self._lock:
            gone = {w for w in self._windows if w[0] == cluster and w[1] not in open_by_pool}
            self._windows = (self._windows - gone) | {(cluster, p) for p in open_by_pool}
        for labels in gone:  # pools gone from the cluster's rollout
            self.window_open.remove(*labels)
        for pool, is_open in open_by_pool.items():
            self.window_open.labels(cluster, pool).set(1 if is_open else 0)

    def queued_merges(self, cluster: str, count: int) -> None:
        self.queued.labels(cluster).set(count)

    def rollout_nodes(
        self,
        cluster: str,
        by_phase: Mapping[tuple[str, str], Mapping[NodeState, int]],
        *,
        zeros: bool = True,
    ) -> None:
        given = {(cluster, pool, component) for pool, component in by_phase}
        with self._lock:
            gone = {k for k in self._node_phases if k[0] == cluster and k not in given}
            self._node_phases = (self._node_phases - gone) | given
        for labels in gone:
            for state in NodeState:
                self.rollout_nodes_gauge.remove(*labels, str(state))
        for (pool, component), found in by_phase.items():
            for state in NodeState:
                count = found.get(state, 0)
                if count or zeros:
                    self.rollout_nodes_gauge.labels(cluster, pool, component, str(state)).set(count)
                else:
                    with contextlib.suppress(KeyError):  # never set, or already gone
                        self.rollout_nodes_gauge.remove(cluster, pool, component, str(state))

    # -- the forge's HTTP choke point (``ForgeHttp.observe``) -------------------------------

    def forge_call(self, call: ForgeCall) -> None:
        self.forge_requests.labels(
            call.provider, call.method, call.endpoint, str(call.status)
        ).inc()
        if call.rate_remaining is not None:
            self.rate_remaining.labels(call.provider).set(call.rate_remaining)
        if call.rate_reset is not None:
            self.rate_reset.labels(call.provider).set(call.rate_reset)

    # -- leases, read at scrape time ----------------------------------------------------------

    def watch_leases(
        self,
        clusters: Callable[[], Iterable[str]],
        held: Callable[[str], bool],
        replicas: Callable[[], int],
    ) -> None:
        """``clusters``: the fleet's clusters this replica may share; ``held``: whether it
        holds one's Lease now; ``replicas``: live replicas it sees (itself included)."""
        self.registry.register(_Leases(clusters, held, replicas))

    # -- the scheduler, read at scrape time ---------------------------------------------------

    def watch_scheduler(self, stats: Callable[[], DispatchStats]) -> None:
        """``stats``: the scheduler's ready-queue now (``Scheduler.stats``: one lock, no I/O,
        so a scrape answers while every worker is busy)."""
        self.registry.register(_Dispatch(stats))

    def watch_release_watches(self, counts: Callable[[], tuple[int, int, int]]) -> None:
        """``counts``: the idle release watches now (``ReleaseWatches.counts``: healthy, not
        healthy, breaks so far)."""
        self.registry.register(_ReleaseWatches(counts))


class _ReleaseWatches(Collector):
    def __init__(self, counts: Callable[[], tuple[int, int, int]]) -> None:
        self._counts = counts

    def describe(self) -> Iterable[Metric]:
        return []

    def collect(self) -> Iterable[Metric]:
        healthy, broken, breaks = self._counts()
        watches = GaugeMetricFamily(
            "gitopsbot_release_watches",
            "Idle clusters' release watches: healthy (a change would be heard at once) or "
            "broken (retried with a backoff; the cluster's release is looked at every minute "
            'meanwhile). docs/executor.md "The idle check".',
            labels=["state"],
        )
        watches.add_metric(["healthy"], healthy)
        watches.add_metric(["broken"], broken)
        yield watches
        yield CounterMetricFamily(
            "gitopsbot_release_watch_breaks",
            "Healthy release watches that failed (each wakes its cluster, whose next idle look "
            "is then a minute away, not ten).",
            value=breaks,
        )


class _Dispatch(Collector):
    def __init__(self, stats: Callable[[], DispatchStats]) -> None:
        self._stats = stats

    def describe(self) -> Iterable[Metric]:
        return []  # read only at collect: no scheduler call at registration

    def collect(self) -> Iterable[Metric]:
        s = self._stats()
        yield GaugeMetricFamily(
            "gitopsbot_scheduler_workers", "Workers running passes side by side.", s.workers
        )
        yield GaugeMetricFamily(
            "gitopsbot_scheduler_workers_busy", "Workers running a pass now.", s.busy
        )
        yield GaugeMetricFamily(
            "gitopsbot_scheduler_queue_depth",
            "Clusters due and waiting for a free worker.",
            s.queued,
        )
        yield GaugeMetricFamily(
            "gitopsbot_scheduler_oldest_wait_seconds",
            "How long the cluster waiting longest for a worker has waited (0: none waits).",
            s.oldest_wait_seconds,
        )
        delayed = CounterMetricFamily(
            "gitopsbot_scheduler_runs_delayed",
            "Runs due while they could not start, run later (coalesced, never dropped). "
            "reason: workers-busy (every worker was busy), pass-running (a tick during the "
            "cluster's own pass, run right after it).",
            labels=["reason"],
        )
        delayed.add_metric(["workers-busy"], s.delayed_workers_busy)
        delayed.add_metric(["pass-running"], s.delayed_pass_running)
        yield delayed
        yield CounterMetricFamily(
            "gitopsbot_scheduler_runs_coalesced",
            "Due requests (ticks, nudges) merged into a run already waiting or following.",
            value=s.coalesced,
        )
        passes = CounterMetricFamily(
            "gitopsbot_scheduler_passes",
            "Passes started, by what made them due: urgent (a nudge or a repeat at once, "
            "ahead of the queue) or periodic (a tick).",
            labels=["due"],
        )
        passes.add_metric(["urgent"], s.passes_urgent)
        passes.add_metric(["periodic"], s.passes_periodic)
        yield passes
        yield GaugeMetricFamily(
            "gitopsbot_scheduler_clusters_resting",
            "Clusters at rest: nothing active, queued or held, no periodic pass before their "
            "next idle look (at most 10 minutes); a push touching one or its release changing "
            "wakes it (docs/decisions.md#resting-clusters).",
            s.resting,
        )


class _Leases(Collector):
    def __init__(
        self,
        clusters: Callable[[], Iterable[str]],
        held: Callable[[str], bool],
        replicas: Callable[[], int],
    ) -> None:
        self._clusters = clusters
        self._held = held
        self._replicas = replicas

    def describe(self) -> Iterable[Metric]:
        return list(self._families())

    def collect(self) -> Iterable[Metric]:
        return list(self._families(True))

    def _families(self, values: bool = False) -> Iterator[Metric]:
        held = GaugeMetricFamily(
            "gitopsbot_cluster_lease_held",
            "1 while this replica holds the cluster's Lease, else 0.",
            labels=["cluster"],
        )
        seen = GaugeMetricFamily(
            "gitopsbot_replicas_seen", "Live replicas sharing the fleet, this one included."
        )
        if values:
            for cluster in sorted(self._clusters()):
                held.add_metric([cluster], 1 if self._held(cluster) else 0)
            seen.add_metric([], self._replicas())
        yield held
        yield seen
