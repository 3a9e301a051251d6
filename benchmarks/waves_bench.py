"""One judged operation of the waves at fleet scale (#29): the evidence read from the
per-cluster summaries (``clusters/<name>/evidence.json``) against the full read of every
cluster's journals (the code path before, kept as the fallback).

A fleet repository of N copies of ``examples/fleet/clusters/production`` (a real Git remote
on disk, the bot's pygit2 mirror) in two waves (every cluster but the last, then the last:
a judgement reads only the earlier waves' evidence, so this is the worst case), a few
commits on the watched branch not taken in yet, and a state branch where every cluster has
``HISTORY`` finished operations (journals as the bot writes them: ``operation.new_operation``
with the example's rollout, every step succeeded) plus its ``seen`` and its summary (the
digests ``bot.evidence_store`` writes, made here in one commit: N x HISTORY records one by
one would take the benchmark longer than what it measures). Judged: the last cluster's chart
change (``bot.waves.judge``), which reads the evidence of the whole fleet.

Each size runs both ways in the same process, each with fresh caches, three times (cold: the
first judgement after a start; warm: the next one, at the same heads; next: after one
cluster's record moved the state branch, the steady state); printed: milliseconds, the
ratio full / summary, and the RSS growth of each way. Target: < 200 ms at 1,000 clusters.

    python benchmarks/waves_bench.py [--sizes 10,100,1000] [--history 5]
"""

from __future__ import annotations

import argparse
import dataclasses
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

from gitopsbot.adapters.git import GitRepo, GitSettings
from gitopsbot.bot import waves
from gitopsbot.bot.evidence_store import VersionReader
from gitopsbot.bot.journal_store import JournalStore
from gitopsbot.core.operations import operation
from gitopsbot.core.records import journal as journal_mod
from gitopsbot.core.records.journal import Journal, OperationKind, OperationStatus, StepState
from gitopsbot.core.waves import wave_evidence
from gitopsbot.fleetrepo import find_cluster, load_fleet

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "fleet"
SETTINGS = """watchedBranch: main
stateBranch: gitopsbot/state
forge:
  kind: git-only
waves:
  - name: first
    clusters:
      environment: production
    soak: 1h
  - name: last
    clusters:
      environment: staging
"""
T0 = datetime(2026, 11, 1, tzinfo=UTC)
TOKEN = "CLUSTERNAME"


def git(*args: str, cwd: Path) -> str:
    done = subprocess.run(
        ["git", "-c", "user.email=p@example.com", "-c", "user.name=p", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def make_fleet(root: Path, size: int) -> tuple[str, str]:
    """A bare remote of ``size`` clusters; the watched commit every cluster has seen."""
    src = root / "src"
    (src / "clusters").mkdir(parents=True)
    (src / "gitopsbot.yaml").write_text(SETTINGS)
    for i in range(size):
        target = src / "clusters" / f"c{i:04d}"
        shutil.copytree(EXAMPLE / "clusters" / "production", target)
        release = target / "release.yaml"
        text = release.read_text().replace("gpu-prod-eu1", f"ctx-{i}")
        if i == size - 1:  # the judged cluster, alone in the last wave
            text = text.replace("environment: production", "environment: staging")
        release.write_text(text)
    git("init", "--quiet", "--initial-branch=main", cwd=src)
    git("add", "-A", cwd=src)
    git("commit", "-qm", "fleet", cwd=src)
    seen = git("rev-parse", "HEAD", cwd=src).strip()
    for i in range(min(3, size)):  # merged, not taken in yet: pending walks them
        values = src / "clusters" / f"c{i:04d}" / "values.yaml"
        values.write_text(values.read_text() + f"# change {i}\n")
        git("commit", "-qam", f"c{i:04d}: a change", cwd=src)
    remote = root / "remote.git"
    git("clone", "--quiet", "--bare", str(src), str(remote), cwd=root)
    return remote.as_uri(), seen


def history(repo: GitRepo, seen: str, clusters: list[str], ops: int) -> None:
    """Every cluster's journals, seen and summary on the state branch, in one commit."""
    spec = find_cluster(repo.tree(seen), clusters[0])
    assert spec is not None
    templates: list[tuple[str, Journal]] = []
    for k in range(ops):
        at = T0 + timedelta(days=k)
        j = operation.new_operation(
            kind=OperationKind.UPGRADE,
            cluster=TOKEN,
            desired_sha=seen,
            created_at=at,
            policy=spec.rollout,
        )
        j = dataclasses.replace(j, op_id=f"{TOKEN}-op{k:03d}", status=OperationStatus.SUCCEEDED)
        for step in j.steps:
            j = j.with_step(
                dataclasses.replace(step, state=StepState.SUCCEEDED, started_at=at, finished_at=at)
            )
        templates.append((journal_mod.dumps(j), j))
    files: dict[str, bytes | None] = {}
    version = spec.release.version
    for name in clusters:
        base = f"clusters/{name}"
        digests: dict[str, wave_evidence.OpDigest] = {}
        text = b""
        for text_t, j in templates:
            text = text_t.replace(TOKEN, name).encode()
            mine = dataclasses.replace(j, cluster=name, op_id=j.op_id.replace(TOKEN, name))
            files[f"{base}/history/{mine.op_id}.yaml"] = text
            digests[f"{mine.op_id}.yaml"] = wave_evidence.digest(mine, version)
        files[f"{base}/journal.yaml"] = text
        files[f"{base}/seen"] = (seen + "\n").encode()
        current = digests[sorted(digests)[-1]]
        summary = wave_evidence.Summary(
            fingerprint=wave_evidence.fingerprint(text, None, digests),
            history=digests,
            current=current,
        )
        files[f"{base}/{wave_evidence.FILE}"] = wave_evidence.dumps(summary).encode()
    repo.commit_files("gitopsbot/state", files, "state", parent=None)


class FullRead(JournalStore):
    """The store as before the summaries: every judgement reads the journals."""

    def __init__(self, repo: GitRepo) -> None:
        super().__init__(repo, branch="gitopsbot/state", push=False)
        self.summaries.read = lambda tree, clusters: {}  # type: ignore[method-assign]


def judge_once(repo: GitRepo, store: JournalStore, shared: bool) -> tuple[float, str]:
    head = repo.head("main")
    assert head is not None
    fleet = load_fleet(repo.tree(head))
    target = sorted(fleet.clusters)[-1]
    spec = fleet.clusters[target]
    spec = dataclasses.replace(spec, release=dataclasses.replace(spec.release, version="1.9.0"))
    known = waves.WatchedLog(repo, "main", head) if shared else None
    versions: Callable[[Journal], str] = VersionReader(repo)
    started = time.perf_counter()
    found = waves.judge(
        store=store,
        settings=fleet.settings,
        clusters=fleet.clusters,
        spec=spec,
        before=fleet.clusters[target].release.version,
        now=T0 + timedelta(days=30),
        version_of=versions,
        pending=waves.pending_reader(repo, store, "main", known),
    )
    took = time.perf_counter() - started
    verdict = found.verdicts[0].message if found.verdicts else "allowed"
    return took, verdict


def run_size(size: int, ops: int) -> None:
    with tempfile.TemporaryDirectory(prefix="waves-bench-") as tmp:
        root = Path(tmp)
        url, seen = make_fleet(root, size)
        repo = GitRepo(
            GitSettings(url=url, mirror_dir=root / "mirror", author_email="bot@example.com")
        )
        repo.fetch()
        clusters = [f"c{i:04d}" for i in range(size)]
        history(repo, seen, clusters, ops)
        figures: dict[str, tuple[float, float, float, float]] = {}
        verdicts: dict[str, str] = {}
        for way in ("summary", "full"):
            store: JournalStore = (
                FullRead(repo)
                if way == "full"
                else JournalStore(repo, branch="gitopsbot/state", push=False)
            )
            before = rss_mb()
            cold, verdicts[way] = judge_once(repo, store, shared=way == "summary")
            warm, _ = judge_once(repo, store, shared=way == "summary")
            # The steady state: one cluster recorded something since (the state branch
            # moved; its other clusters' directories did not).
            step = len(figures)
            note = f"clusters/{clusters[0]}/pass-failure.yaml"
            repo.commit_files(
                "gitopsbot/state", {note: f"n: {step}\n".encode()}, "a pass", parent=None
            )
            nxt, _ = judge_once(repo, store, shared=way == "summary")
            figures[way] = (cold, warm, nxt, rss_mb() - before)
            if way == "summary":
                assert store.summaries.last.fallback == [], store.summaries.last.fallback
        assert verdicts["summary"] == verdicts["full"], verdicts
        s, f = figures["summary"], figures["full"]
        print(
            f"{size:>6} clusters x {ops} ops: summary {s[0] * 1000:8.1f} ms cold "
            f"{s[1] * 1000:7.1f} ms warm {s[2] * 1000:7.1f} ms next (RSS +{s[3]:.1f} MB) | "
            f"full read {f[0] * 1000:8.1f} ms cold {f[1] * 1000:8.1f} ms warm "
            f"{f[2] * 1000:8.1f} ms next (RSS +{f[3]:.1f} MB) | ratio full / summary "
            f"{f[0] / s[0]:6.1f}x cold {f[1] / s[1]:6.1f}x warm {f[2] / s[2]:6.1f}x next",
            flush=True,
        )
        print(f"{'':>6} verdict (both ways): {verdicts['summary'][:110]}", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="10,100,1000", help="fleet sizes, comma-separated")
    parser.add_argument("--history", type=int, default=5, help="finished operations per cluster")
    args = parser.parse_args(argv)
    for size in (int(s) for s in args.sizes.split(",")):
        run_size(size, args.history)
    return 0


if __name__ == "__main__":
    sys.exit(main())
