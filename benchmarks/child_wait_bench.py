"""Benchmark (issue 13): how late the bot notices that a helm child ended.

``helm_children.wait`` used ``Popen.wait(timeout=...)``, which polls with sleeps growing to
50 ms; it now blocks on a pidfd (``helm_children.exited``). Each round starts a child that
sleeps a random 50-400 ms (a helm call's order of magnitude) and measures, for both ways of
waiting, the time from the child's own exit (it writes ``time.monotonic()`` as its last act,
the same clock as ours: CLOCK_MONOTONIC is system-wide) to the wait returning. Rounds
alternate the two ways. Prints the medians, the 95th percentiles and their ratio.

    python benchmarks/child_wait_bench.py [--rounds 40]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import time

from gitopsbot.adapters import helm_children as children

CHILD = "import sys,time; time.sleep(float(sys.argv[1])); print(time.monotonic(), flush=True)"


def late(way: str, sleep: float) -> float:
    """Seconds between the child's exit and the wait returning."""
    child = subprocess.Popen(
        [sys.executable, "-S", "-c", CHILD, f"{sleep:.3f}"], stdout=subprocess.PIPE
    )
    if way == "polling":
        child.wait(timeout=30)
    else:
        children.exited(child, 30)
        child.wait()
    seen = time.monotonic()
    assert child.stdout is not None
    ended = float(child.stdout.read())
    child.stdout.close()
    return seen - ended


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--rounds", type=int, default=40, help="children per way of waiting")
    args = p.parse_args(argv)
    if not hasattr(os, "pidfd_open"):
        print("no pidfd_open here: the bot polls as before; nothing to compare")
        return 0
    rng = random.Random(13)
    times: dict[str, list[float]] = {"polling": [], "pidfd": []}
    for _ in range(args.rounds):
        sleep = rng.uniform(0.05, 0.4)
        for way in ("polling", "pidfd"):
            times[way].append(late(way, sleep))
    for way, values in times.items():
        p95 = statistics.quantiles(values, n=20, method="inclusive")[-1]
        print(
            f"{way:8}: exit noticed after p50 {1000 * statistics.median(values):6.2f} ms, "
            f"p95 {1000 * p95:6.2f} ms ({args.rounds} children)"
        )
    ratio = statistics.median(times["polling"]) / max(statistics.median(times["pidfd"]), 1e-6)
    print(f"polling / pidfd (p50): {ratio:.0f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
