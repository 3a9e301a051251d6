"""The scheduler at fleet scale: first round and nudge latency with 1,000 clusters (#29).

1,000 fake clusters whose passes take a few milliseconds (a sleep: the GIL is free, as in a
pass waiting for Git or the API server), one of them blocking ``--block`` seconds, a poll
interval of ``--poll`` seconds, ``--workers`` workers. A nudger wakes one cluster every 20 ms
while the first round runs (the fleet's biggest backlog: every cluster due at once), as a
webhook would. Measured, per arrangement:

* first round: seconds from start until every cluster has had its first pass (the blocking
  one's counts when it starts);
* nudge → pass start: p50, p95 and max over the nudges;
* the ideal first round: passes / workers × pass time.

Arrangements in the same run: the bot's dispatcher (``bot.scheduler``: a fair ready-queue,
nudges ahead of periodic ticks) and, as the baseline, the scheduler before #29 item 5 (one
apscheduler job per cluster on the worker pool), loaded from Git history (``--baseline``).

    python benchmarks/scheduler_bench.py [--clusters 1000] [--pass-ms 5] [--workers 4]
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from types import ModuleType

from gitopsbot.adapters.clock import SystemClock
from gitopsbot.bot.reconciler import PassResult
from gitopsbot.bot.scheduler import Scheduler

BASELINE = "c441904"  # the commit before the ready-queue: one apscheduler job per cluster
ROOT = Path(__file__).resolve().parent.parent


def old_scheduler(commit: str) -> ModuleType:
    source = subprocess.run(
        ["git", "show", f"{commit}:gitopsbot/bot/scheduler.py"],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    path = Path(tempfile.mkdtemp()) / "old_scheduler.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("old_scheduler", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Fleet:
    def __init__(self, size: int, pass_s: float, block_s: float) -> None:
        self.names = [f"c{i:04d}" for i in range(size)]
        self.slow = self.names[0]
        self.pass_s, self.block_s = pass_s, block_s
        self.lock = threading.Lock()
        self.starts: dict[str, list[float]] = {}
        self.first_round = threading.Event()
        self.release = threading.Event()

    def reconcile(self, cluster: str) -> PassResult:
        t = time.perf_counter()
        with self.lock:
            self.starts.setdefault(cluster, []).append(t)
            if len(self.starts) == len(self.names):
                self.first_round.set()
        if cluster == self.slow:
            self.release.wait(self.block_s)
        else:
            time.sleep(self.pass_s)
        return PassResult(cluster, "idle")


def measure(make: type, args: argparse.Namespace) -> tuple[float, list[float]]:
    fleet = Fleet(args.clusters, args.pass_ms / 1000, args.block)
    s = make(
        reconcile=fleet.reconcile,
        clock=SystemClock(),
        interval_seconds=args.poll,
        jitter_seconds=max(1, args.poll // 10),
        workers=args.workers,
    )
    s.set_clusters(fleet.names)
    nudges: list[tuple[str, float]] = []
    t0 = time.perf_counter()
    s.start()
    n = 0
    while not fleet.first_round.wait(0.02):
        n += 1
        name = fleet.names[1 + (n * 37) % (len(fleet.names) - 1)]  # spread over the fleet
        nudges.append((name, time.perf_counter()))
        s.nudge(name)
    first_round = time.perf_counter() - t0
    threading.Event().wait(1.0)  # the last nudges' passes
    fleet.release.set()
    s.shutdown(wait=True, timeout=60)
    waits = []
    with fleet.lock:
        for name, at in nudges:
            later = [t for t in fleet.starts.get(name, []) if t >= at]
            if later:
                waits.append(later[0] - at)
    return first_round, waits


def summary(waits: list[float]) -> tuple[float, float, float]:
    if not waits:
        return (float("nan"),) * 3
    ordered = sorted(waits)
    p95 = ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))]
    return statistics.median(ordered), p95, ordered[-1]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--clusters", type=int, default=1000)
    p.add_argument("--pass-ms", type=float, default=5.0)
    p.add_argument("--block", type=float, default=30.0, help="seconds the slow pass blocks")
    p.add_argument("--poll", type=int, default=30)
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--baseline", default=BASELINE, help="commit of the old scheduler")
    args = p.parse_args()
    ideal = args.clusters * args.pass_ms / 1000 / args.workers
    rows = {"dispatcher": measure(Scheduler, args)}
    rows["apscheduler per job"] = measure(old_scheduler(args.baseline).Scheduler, args)
    print(
        f"{args.clusters} clusters, passes {args.pass_ms:g} ms (one blocking {args.block:g} s), "
        f"poll {args.poll} s, {args.workers} workers; ideal first round {ideal:.2f} s"
    )
    print(f"{'':22} {'first round s':>14} {'÷ ideal':>8} {'nudges':>7} "
          f"{'p50 ms':>8} {'p95 ms':>8} {'max ms':>8}")  # fmt: skip
    for label, (first, waits) in rows.items():
        p50, p95, top = summary(waits)
        print(
            f"{label:22} {first:14.2f} {first / ideal:8.2f} {len(waits):7d} "
            f"{p50 * 1000:8.1f} {p95 * 1000:8.1f} {top * 1000:8.1f}"
        )
    new, old = rows["dispatcher"], rows["apscheduler per job"]
    print(
        f"ratios old / new: first round {old[0] / new[0]:.2f}, "
        f"nudge p95 {summary(old[1])[1] / max(summary(new[1])[1], 1e-6):.1f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
