"""Plan + render throughput for generated fleets of 10, 100 and 1,000 clusters.

Each cluster upgrades from the real chart 1.8.0 to 1.8.7: its deployed values are the real
1.8.0 values.yaml and its desired values the real 1.8.7 values.yaml (with a few per-cluster
edits), and both charts' real CRDs are compared. Charts are parsed once, as the chart source
caches them by digest. Two measurements, each with a baseline measured in the same run:

1. **plan + render only**: values parsed once with ruamel's *safe* loader (a cheap baseline,
   not the bot's loader) and reused across clusters; the ratio is plan + render time over that
   bare safe parse of the same values files. Also the peak traced memory (tracemalloc, in a
   separate pass over at most 100 clusters).
2. **end to end, from disk**: N cluster directories written to a temporary fleet repository
   (release.yaml, values.yaml, rollout.yaml, credentials.yaml, from examples/fleet and the real
   values), then ``fleetrepo.load_fleet(DirectoryTree(...))`` (the bot's own loader: round-trip
   parse, validation, locations) + plan + render of every cluster. The ratio is over a bare
   round-trip parse (``YAML(typ="rt")``) of the same files.

Target: linear growth; 1,000 clusters in under 10 s (plan + render).

    python benchmarks/plan_bench.py [--sizes 10,100,1000]

Reads ../shared/tensor-fusion at run time; exits 0 with a message where it is absent.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML

from gitopsbot.adapters.localfiles import DirectoryTree
from gitopsbot.core.charts.chart import Chart, parse_chart_files
from gitopsbot.core.charts.observed import DeployedState
from gitopsbot.core.fleet.model import (
    ClusterSpec,
    Component,
    CredentialsSpec,
    Environment,
    MaintenanceWindow,
    PoolPolicy,
    ReleaseSpec,
    RolloutPolicy,
    SecretRef,
)
from gitopsbot.core.fleet.yamledit import set_value
from gitopsbot.core.planning.plan import make_plan
from gitopsbot.core.planning.render import render_markdown
from gitopsbot.core.policy import load_rules
from gitopsbot.fleetrepo import load_fleet

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared" / "tensor-fusion"
# Parsing is measured on at most this many clusters per size and scaled (it is per-file work).
PARSE_SAMPLE = 100


def load_chart(version: str) -> Chart:
    root = SHARED / f"chart-{version}"
    files = {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}
    return parse_chart_files(files, digest=f"bench-{version}")


def cluster_texts(i: int, new_values: str, old_values: str) -> tuple[str, str]:
    """(desired, deployed) values.yaml text of cluster i: real files plus per-cluster edits."""
    desired = new_values.replace("replicaCount: 1", f"replicaCount: {2 + i % 2}", 1)
    desired += f"\nclusterLabel: gpu-{i:04d}\n"
    deployed = old_values + f"\nclusterLabel: gpu-{i:04d}\n"
    return desired, deployed


def spec(i: int, values: dict[str, Any]) -> ClusterSpec:
    pools = (
        PoolPolicy(
            "inference",
            auto_update_worker=True,
            batch_percentage=10,
            batch_interval_seconds=120,
            phases=(Component.HYPERVISOR, Component.WORKER),
            nodes=8 + i % 32,
            maintenance_window=MaintenanceWindow("0 1 * * 2,4", 4 * 3600),
        ),
        PoolPolicy("training", batch_percentage=20, nodes=16 + i % 64),
    )
    return ClusterSpec(
        name=f"gpu-{i:04d}",
        environment=Environment.PRODUCTION if i % 3 == 0 else Environment.STAGING,
        release=ReleaseSpec(
            "https://download.tensor-fusion.ai",
            "tensor-fusion",
            "1.8.7",
            "tensor-fusion-sys",
            "tensor-fusion-sys",
        ),
        values=values,
        rollout=RolloutPolicy(pools=pools, acknowledgements={"R4": "pinned on purpose"}),
        credentials=CredentialsSpec(secrets=(SecretRef("agent.enrollToken", "env", "TOKEN"),)),
    )


def run(size: int, charts: tuple[Chart, Chart], texts: tuple[str, str]) -> dict[str, float]:
    old, new = charts
    rules = load_rules(builtin_rules())
    yaml = YAML(typ="safe", pure=True)
    files = [cluster_texts(i, texts[1], texts[0]) for i in range(size)]

    # Baseline: bare YAML parsing of the same values files (sampled for large fleets).
    sample = min(size, PARSE_SAMPLE)
    t0 = time.perf_counter()
    for desired_text, deployed_text in files[:sample]:
        yaml.load(desired_text)
        yaml.load(deployed_text)
    parse_seconds = (time.perf_counter() - t0) * size / sample

    parsed = [(yaml.load(d), yaml.load(o)) for d, o in files[:sample]]
    inputs = [parsed[i % sample] for i in range(size)]

    def plan_all(count: int) -> int:
        chars = 0
        for i, (desired, deployed) in enumerate(inputs[:count]):
            plan = make_plan(
                deployed=DeployedState("1.8.0", old.app_version, deployed, revision=i),
                desired=spec(i, desired),
                target_chart=new,
                deployed_chart=old,
                index=None,
                rules=rules,
            )
            chars += len(render_markdown(plan))
        return chars

    # Timing pass without tracemalloc (it slows allocation several times over).
    t0 = time.perf_counter()
    total_chars = plan_all(size)
    plan_seconds = time.perf_counter() - t0
    # Memory pass: peak traced memory while planning (sampled like the parse baseline).
    tracemalloc.start()
    plan_all(sample)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return {
        "clusters": size,
        "plan_s": plan_seconds,
        "ms_per_cluster": plan_seconds * 1000 / size,
        "parse_s": parse_seconds,
        "ratio": plan_seconds / parse_seconds,
        "peak_mb": peak / 2**20,
        "chars": total_chars / size,
    }


EXAMPLE = ROOT / "examples" / "fleet"


def write_fleet(root: Path, size: int, new_values: str) -> list[Path]:
    """A fleet repository of ``size`` clusters on disk; returns every cluster YAML file."""
    shutil.copy(EXAMPLE / "gitopsbot.yaml", root / "gitopsbot.yaml")
    template = EXAMPLE / "clusters" / "staging"
    release = set_value((template / "release.yaml").read_text(), "chart.version", "1.8.7")
    files: list[Path] = []
    for i in range(size):
        d = root / "clusters" / f"gpu-{i:04d}"
        d.mkdir(parents=True)
        desired, _ = cluster_texts(i, new_values, "")
        texts = {
            "release.yaml": set_value(release, "kubeContext", f"gpu-{i:04d}"),
            "values.yaml": desired,
            "rollout.yaml": (template / "rollout.yaml").read_text(),
            "credentials.yaml": (template / "credentials.yaml").read_text(),
        }
        for name, text in texts.items():
            (d / name).write_text(text)
            files.append(d / name)
    return files


def run_end_to_end(
    size: int, charts: tuple[Chart, Chart], texts: tuple[str, str]
) -> dict[str, float]:
    """load_fleet from a directory + plan + render, against a bare round-trip parse."""
    old, new = charts
    deployed_values = YAML(typ="safe", pure=True).load(texts[0])
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        files = write_fleet(root, size, texts[1])
        # Baseline: the same files, read and parsed round-trip (what the loader must do at
        # least), nothing else.
        t0 = time.perf_counter()
        for f in files:
            YAML(typ="rt").load(f.read_text())
        parse_seconds = time.perf_counter() - t0

        t0 = time.perf_counter()
        fleet = load_fleet(DirectoryTree(root))
        load_seconds = time.perf_counter() - t0
        rules = load_rules([*builtin_rules(), *fleet.policy_documents])
        t1 = time.perf_counter()
        for i, name in enumerate(sorted(fleet.clusters)):
            plan = make_plan(
                deployed=DeployedState("1.8.0", old.app_version, deployed_values, revision=i),
                desired=fleet.clusters[name],
                target_chart=new,
                deployed_chart=old,
                index=None,
                rules=rules,
            )
            render_markdown(plan)
        total = time.perf_counter() - t0
        plan_seconds = time.perf_counter() - t1
    return {
        "clusters": size,
        "total_s": total,
        "ms_per_cluster": total * 1000 / size,
        "load_ms": load_seconds * 1000 / size,
        "plan_ms": plan_seconds * 1000 / size,
        "parse_ms": parse_seconds * 1000 / size,
        "ratio": total / parse_seconds,
        "load_ratio": load_seconds / parse_seconds,
    }


def builtin_rules() -> list[tuple[str, str]]:
    return [(p.name, p.read_text()) for p in sorted((ROOT / "policies").glob("*.yaml"))]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10,100,1000")
    args = parser.parse_args(argv)
    if not SHARED.is_dir():
        print(f"skipped: {SHARED} is absent (real chart data needed)")
        return 0
    t0 = time.perf_counter()
    charts = (load_chart("1.8.0"), load_chart("1.8.7"))
    texts = (
        (SHARED / "chart-1.8.0" / "values.yaml").read_text(),
        (SHARED / "chart-1.8.7" / "values.yaml").read_text(),
    )
    print(f"charts parsed once in {time.perf_counter() - t0:.2f} s (cached by digest)")
    print(
        f"{'clusters':>8} {'plan+render s':>14} {'ms/cluster':>11} {'yaml parse s':>13} "
        f"{'plan/parse':>11} {'peak MiB':>9}"
    )
    results = []
    for size in (int(s) for s in args.sizes.split(",")):
        r = run(size, charts, texts)
        results.append(r)
        print(
            f"{r['clusters']:>8} {r['plan_s']:>14.3f} {r['ms_per_cluster']:>11.2f} "
            f"{r['parse_s']:>13.3f} {r['ratio']:>11.3f} {r['peak_mb']:>9.1f}"
        )
    if len(results) > 1:
        first, last = results[0], results[-1]
        growth = last["ms_per_cluster"] / first["ms_per_cluster"]
        print(f"per-cluster time, largest vs smallest fleet: {growth:.2f}x (1.0 = linear)")
        big = results[-1]
        verdict = "meets" if big["plan_s"] < 10 else "MISSES"
        print(f"{big['clusters']} clusters: {big['plan_s']:.2f} s, {verdict} the 10 s target")
    print()
    print("end to end from disk: load_fleet(DirectoryTree) + plan + render (the bot's loader)")
    print(
        f"{'clusters':>8} {'total s':>8} {'ms/cluster':>11} {'load ms':>8} {'plan ms':>8} "
        f"{'rt parse ms':>12} {'total/parse':>12} {'load/parse':>11}"
    )
    for size in (int(s) for s in args.sizes.split(",")):
        e = run_end_to_end(size, charts, texts)
        print(
            f"{e['clusters']:>8} {e['total_s']:>8.2f} {e['ms_per_cluster']:>11.2f} "
            f"{e['load_ms']:>8.2f} {e['plan_ms']:>8.2f} {e['parse_ms']:>12.2f} "
            f"{e['ratio']:>12.2f} {e['load_ratio']:>11.2f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
