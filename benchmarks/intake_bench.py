"""Merge → recorded operation at fleet scale: what one merged change costs the bot when the
fleet has 10, 100 or 300 clusters.

A fleet repository of N copies of ``examples/fleet/clusters/production`` (a real Git remote
on disk, the bot's real pygit2 mirror and state branch), one merged change to one cluster,
and the pass that takes it in (fetch, classify, read the cluster, compare with the release,
record the operation on the state branch and push). Helm and the cluster are the in-memory
fakes of ``gitopsbot.testing`` (the same contract as the real adapters): this measures the
bot, not helm.

Three bots in the same run: the bot's own (``fleetrepo.find_cluster``: only the merged
cluster's files, the apply-time policy gate judging the change); as baselines, a reader of
the whole fleet (``load_fleet``, what the bot did before) and the bot without the policy gate
(the code path before issue 10), so the gate's cost per merge shows as a ratio. Target: the
bot's cost per merge does not grow with the fleet.

    python benchmarks/intake_bench.py [--sizes 10,100,300] [--samples 3]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import zoneinfo
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path

from gitopsbot.adapters.chartrepo import LocalChartSource
from gitopsbot.adapters.git import GitRepo, GitSettings
from gitopsbot.app import apply_gate
from gitopsbot.bot.apply_gate import ApplyGate, Deployed
from gitopsbot.bot.journal_store import JournalStore
from gitopsbot.bot.reconciler import Reconciler
from gitopsbot.bot.steps.executor import Executor
from gitopsbot.core.fleet.model import BotSettings, ClusterSpec, SecretRef
from gitopsbot.core.records.journal import Journal
from gitopsbot.fleetrepo import find_cluster, load_fleet
from gitopsbot.ports.files import FileTree
from gitopsbot.ports.helm import ChartRef, UpgradeRequest
from gitopsbot.testing import FakeCluster, FakeHelm

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "fleet"
SETTINGS = "watchedBranch: main\nstateBranch: gitopsbot/state\nforge:\n  kind: git-only\n"


class NoSecrets:
    def resolve_all(self, refs: Sequence[SecretRef]) -> dict[str, str]:
        return {ref.values_path: "redacted" for ref in refs}


class SystemClock:
    def now(self) -> datetime:
        return datetime.now(UTC)

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)

    def monotonic(self) -> float:
        return time.monotonic()


def git(*args: str, cwd: Path) -> str:
    done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True)
    return done.stdout


def make_fleet(root: Path, size: int) -> tuple[str, Path]:
    """A bare remote holding ``size`` clusters, and a person's clone of it."""
    src = root / "src"
    (src / "clusters").mkdir(parents=True)
    (src / "gitopsbot.yaml").write_text(SETTINGS)
    for i in range(size):
        target = src / "clusters" / f"c{i:04d}"
        shutil.copytree(EXAMPLE / "clusters" / "production", target)
        release = target / "release.yaml"
        release.write_text(release.read_text().replace("gpu-prod-eu1", f"ctx-{i}"))
    git("init", "--quiet", "--initial-branch=main", cwd=src)
    git("-c", "user.email=p@example.com", "-c", "user.name=p", "add", "-A", cwd=src)
    git("-c", "user.email=p@example.com", "-c", "user.name=p", "commit", "-qm", "fleet", cwd=src)
    remote = root / "remote.git"
    git("clone", "--quiet", "--bare", str(src), str(remote), cwd=root)
    human = root / "human"
    git("clone", "--quiet", str(remote), str(human), cwd=root)
    return remote.as_uri(), human


# One chart source for every bot of the run, as a long-running bot keeps one (warm cache).
CHARTS = LocalChartSource([EXAMPLE.parent / "charts" / "repo"])


class NoGate(ApplyGate):
    """The code path before issue 10: an operation starts without the policy gate."""

    def judge(self, journal: Journal, spec: ClusterSpec, deployed: Deployed) -> Journal:
        return journal


def bot(
    url: str, mirror: Path, spec: ClusterSpec, *, per_cluster: bool, gated: bool = True
) -> tuple[Reconciler, FakeHelm]:
    repo = GitRepo(GitSettings(url=url, mirror_dir=mirror, author_email="bot@example.com"))
    repo.fetch()
    helm = FakeHelm()
    helm.upgrade(
        UpgradeRequest(
            release=spec.release.release_name,
            namespace=spec.release.namespace,
            chart=ChartRef.of(spec.release),
            version=spec.release.version,
            values=spec.values,
            description="installed by hand",
            post_render_policy=spec.rollout,
        )
    )
    executor = Executor(cluster=FakeCluster(), helm=helm, secrets=NoSecrets())
    find: Callable[[FileTree, str], ClusterSpec | None] | None = (
        find_cluster if per_cluster else None
    )
    rec = Reconciler(
        repo=repo,
        store=JournalStore(repo, branch="gitopsbot/state"),
        executor_for=lambda _spec: executor,
        gate=apply_gate(repo, CHARTS)
        if gated
        else NoGate(CHARTS, builtin_documents=(), policies_at=lambda _sha: ()),
        clock=SystemClock(),
        load_fleet=load_fleet,
        load_cluster=find,
        resolve_tz=zoneinfo.ZoneInfo,
        settings=BotSettings(),
    )
    return rec, helm


def merge(human: Path, cluster: str, n: int) -> None:
    values = human / "clusters" / cluster / "values.yaml"
    values.write_text(values.read_text() + f"# tuning {n}\n")
    ident = ("-c", "user.email=p@example.com", "-c", "user.name=p")
    git(*ident, "commit", "-qam", f"{cluster}: tuning {n}", cwd=human)
    git("push", "--quiet", "origin", "main", cwd=human)


def measure(size: int, samples: int, work: Path) -> Mapping[str, float]:
    url, human = make_fleet(work, size)
    cluster = "c0000"
    out: dict[str, float] = {}
    readers = (("whole fleet", False, True), ("one cluster", True, True), ("no gate", True, False))
    for name, per_cluster, gated in readers:
        times = []
        for n in range(samples):
            mirror = work / f"mirror-{per_cluster}-{n}"
            first = GitRepo(GitSettings(url=url, mirror_dir=mirror))
            first.fetch()
            loaded = find_cluster(first.tree("main"), cluster)
            assert loaded is not None
            rec, _ = bot(url, mirror, loaded, per_cluster=per_cluster, gated=gated)
            rec.reconcile(cluster)  # baseline: the branch head as of now
            merge(human, cluster, n + (100 if per_cluster else 0) + (0 if gated else 200))
            t0 = time.perf_counter()
            result = rec.reconcile(cluster)
            times.append(time.perf_counter() - t0)
            if result.action not in ("started", "queued"):  # queued: outside its window
                raise SystemExit(f"{size} clusters, {name}: expected an operation, got {result}")
        out[name] = statistics.median(times)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--sizes", default="10,100,300", help="fleet sizes (default 10,100,300)")
    p.add_argument("--samples", type=int, default=3, help="merges per size and reader")
    args = p.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    print("merge -> recorded operation, one merged change (median of samples)")
    first: float | None = None
    for size in sizes:
        with tempfile.TemporaryDirectory(prefix="intake-bench-") as tmp:
            got = measure(size, args.samples, Path(tmp))
        one, whole, bare = got["one cluster"], got["whole fleet"], got["no gate"]
        first = first or one
        print(
            f"  {size:5d} clusters: bot (one cluster) {one * 1000:7.1f} ms   "
            f"whole-fleet reader {whole * 1000:8.1f} ms   ratio whole/one {whole / one:6.1f}   "
            f"bot vs smallest fleet {one / first:4.2f}   "
            f"without the apply gate {bare * 1000:7.1f} ms (gate/no gate {one / bare:4.2f})"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
