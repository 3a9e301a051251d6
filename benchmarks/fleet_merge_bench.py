"""One merge, every cluster's pass: what a merge for one cluster costs the rest of the fleet.

A fleet repository of N copies of ``examples/fleet/clusters/production`` (a real Git remote on
disk, the bot's real pygit2 mirror and state branch), one bot reading one cluster per pass as
``gitopsbot run`` does, and after each merged change to one cluster a pass for every cluster,
as the scheduler runs them after a poll. Measured: the state-branch commits (each one a push)
and the seconds all the passes take, per merge.

Baseline in the same run: the code path before issue 29, where every cluster recorded
"nothing new up to <head>" whenever the watched branch moved (``SEEN_STRIDE = 1``).

    python benchmarks/fleet_merge_bench.py [--sizes 10,100,300] [--merges 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

from intake_bench import bot, make_fleet, merge

from gitopsbot.adapters.git import GitRepo, GitSettings
from gitopsbot.bot import intake
from gitopsbot.fleetrepo import find_cluster


def state_commits(repo: GitRepo) -> int:
    head = repo.head("gitopsbot/state")
    return len(repo.log("gitopsbot/state", None, 1_000_000)) if head else 0


def measure(size: int, merges: int, work: Path, stride: int) -> tuple[float, float]:
    """Median seconds of a round of passes after a merge, and state commits per merge."""
    url, human = make_fleet(work, size)
    clusters = [f"c{i:04d}" for i in range(size)]
    mirror = work / f"mirror-{stride}"
    first = GitRepo(GitSettings(url=url, mirror_dir=mirror))
    first.fetch()
    spec = find_cluster(first.tree("main"), clusters[-1])
    assert spec is not None
    rec, _ = bot(url, mirror, spec, per_cluster=True)
    intake.SEEN_STRIDE = stride
    for name in clusters:
        rec.reconcile(name)  # every cluster's baseline
    before = state_commits(rec.repo)  # type: ignore[arg-type]
    rounds = []
    for n in range(merges):
        merge(human, clusters[-1], n + 1000 * stride)
        t0 = time.perf_counter()
        for name in clusters:
            rec.reconcile(name)
        rounds.append(time.perf_counter() - t0)
    added = state_commits(rec.repo) - before  # type: ignore[arg-type]
    return statistics.median(rounds), added / merges


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--sizes", default="10,100,300", help="fleet sizes (default 10,100,300)")
    p.add_argument("--merges", type=int, default=5, help="merges per size (default 5)")
    args = p.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    stride = intake.SEEN_STRIDE
    print("one merge for one cluster, then a pass for every cluster (median round)")
    for size in sizes:
        with tempfile.TemporaryDirectory(prefix="fleet-merge-bench-") as tmp:
            now_s, now_c = measure(size, args.merges, Path(tmp), stride)
        with tempfile.TemporaryDirectory(prefix="fleet-merge-bench-") as tmp:
            old_s, old_c = measure(size, args.merges, Path(tmp), 1)
        print(
            f"  {size:5d} clusters: state commits per merge {now_c:6.1f} (before: {old_c:6.1f}, "
            f"ratio {old_c / max(now_c, 1e-9):6.1f}x)   round of passes {now_s * 1000:8.1f} ms "
            f"(before: {old_s * 1000:8.1f} ms, ratio {old_s / now_s:5.2f}x)"
        )
    intake.SEEN_STRIDE = stride
    return 0


if __name__ == "__main__":
    sys.exit(main())
