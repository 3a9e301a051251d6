"""A ``/metrics`` scrape with 1,000 clusters' series (#29): what the per-cluster series cost.

``BotMetrics`` fed as a long-running bot feeds it for N clusters (a pass each, an operation
with its steps, three pools with windows, progress and node states of one component, drift
checked, Leases watched, the scheduler's queue watched), scraped over HTTP from the bot's own
metrics server (waitress, prometheus_client's WSGI app). Printed: the series count, the
body's size and the median scrape time, against baselines in the same run: the same
registry fed for one cluster (the fixed cost), and per family the share of the series.

    python benchmarks/metrics_bench.py [--clusters 1000] [--scrapes 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import urllib.request
from collections import Counter
from datetime import UTC, datetime, timedelta

from gitopsbot.adapters.clock import SystemClock
from gitopsbot.adapters.metrics import BotMetrics
from gitopsbot.adapters.metrics_server import MetricsServer
from gitopsbot.core.notices.happenings import Happening, HappeningKind
from gitopsbot.core.records.journal import OperationKind
from gitopsbot.core.records.node_states import NodeState
from gitopsbot.core.replicas.health import Verdict
from gitopsbot.ports.metrics import DispatchStats

POOLS = ("pool-a", "pool-b", "pool-c")
T0 = datetime(2026, 3, 2, tzinfo=UTC)
STEPS = ("backup", "crds", "helm-upgrade", "controller-ready", "pool-phase", "verify")


def fed(clusters: int) -> BotMetrics:
    m = BotMetrics(SystemClock())
    names = [f"c{i:04d}" for i in range(clusters)]
    for name in names:
        m.pass_finished(name, action="idle", detail="", error="", seconds=0.3)
        m.queued_merges(name, 0)
        m.pool_windows(name, dict.fromkeys(POOLS, True))
        # The operation ended (below): as ``bot.gauges`` does, only the states nodes are in.
        nodes = {(p, "hypervisor"): {NodeState.VERIFIED: 8} for p in POOLS}
        m.rollout_nodes(name, nodes, zeros=False)
        m.drift_items.labels(name).set(0)
        m.drift_checked.labels(name).set(time.time())
        for step in STEPS:
            m.happened(_event(HappeningKind.STEP_STARTED, name, step, 0))
            m.happened(_event(HappeningKind.STEP_SUCCEEDED, name, step, 30))
        for pool in POOLS:
            m.pool_progress.labels(name, pool, "hypervisor").set(1)
        m.happened(_event(HappeningKind.SUCCEEDED, name, "", 60))
    stats = DispatchStats(4, 4, 996, 12.0, 996, 0, 0, 10, 1000)
    m.watch_leases(lambda: names, lambda c: True, lambda: 3)
    m.watch_scheduler(lambda: stats)
    return m


def _event(kind: HappeningKind, cluster: str, step: str, seconds: float) -> Happening:
    return Happening(
        kind,
        cluster,
        op_id="op-1",
        op_kind=OperationKind.UPGRADE,
        desired_sha="0" * 40,
        step=step,
        step_kind=step,
        at=T0 + timedelta(seconds=seconds),
    )


def scrape(m: BotMetrics, times: int) -> tuple[float, int, Counter[str]]:
    ok = Verdict(True, "ok")
    with MetricsServer(m.registry, lambda: ok, lambda: ok) as server:
        seconds, body = [], b""
        for _ in range(times):
            t0 = time.perf_counter()
            with urllib.request.urlopen(f"{server.url}/metrics", timeout=60) as r:
                body = r.read()
            seconds.append(time.perf_counter() - t0)
    families: Counter[str] = Counter()
    for line in body.decode().splitlines():
        if line and not line.startswith("#"):
            families[line.split("{")[0].split(" ")[0]] += 1
    return statistics.median(seconds), len(body), families


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--clusters", type=int, default=1000)
    p.add_argument("--scrapes", type=int, default=5)
    args = p.parse_args()
    one_s, one_b, one_f = scrape(fed(1), args.scrapes)
    big_s, big_b, big_f = scrape(fed(args.clusters), args.scrapes)
    print(f"{'':14} {'series':>8} {'body KB':>8} {'scrape ms':>10}")
    print(f"{'1 cluster':14} {sum(one_f.values()):8d} {one_b / 1024:8.0f} {one_s * 1000:10.1f}")
    print(
        f"{f'{args.clusters} clusters':14} {sum(big_f.values()):8d} {big_b / 1024:8.0f} "
        f"{big_s * 1000:10.1f}"
    )
    print(f"ratio: {big_s / one_s:.1f}x the one-cluster scrape")
    print("series per family (the largest first):")
    for name, n in big_f.most_common(12):
        print(f"  {n:7d}  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
