"""Plan + render throughput for generated fleets of 10, 100 and 1,000 clusters.

Each cluster upgrades from the real chart 1.8.0 to 1.8.7: its deployed values are the real
1.8.0 values.yaml and its desired values the real 1.8.7 values.yaml (with a few per-cluster
edits), and both charts' real CRDs are compared. Charts are parsed once, as the chart source
caches them by digest. Prints the time per cluster, the peak traced memory (tracemalloc, in a
separate pass over at most 100 clusters), and the ratio of plan + render time to bare YAML
parsing of the same values files (ruamel.yaml, the parser the bot uses), measured in the same
run. Target: linear growth; 1,000 clusters in under 10 s.

    python benchmarks/plan_bench.py [--sizes 10,100,1000]

Reads ../shared/tensor-fusion at run time; exits 0 with a message where it is absent.
"""

from __future__ import annotations

import argparse
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML

from gitopsbot.core.chart import Chart, parse_chart_files
from gitopsbot.core.model import (
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
from gitopsbot.core.observed import DeployedState
from gitopsbot.core.plan import make_plan
from gitopsbot.core.policy import load_rules
from gitopsbot.core.render import render_markdown

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
    rules = load_rules(
        [(p.name, p.read_text()) for p in sorted((ROOT / "policies").glob("*.yaml"))]
    )
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
    return 0


if __name__ == "__main__":
    sys.exit(main())
