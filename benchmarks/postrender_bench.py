"""Benchmark (issue 13): what the post-renderer costs each ``helm upgrade`` the bot runs.

1. **The post-renderer alone.** The sandbox chart (examples/charts/tensor-fusion-<version>)
   rendered once by the pinned helm 4 (``helm template``, two GPU pools), then fed on stdin,
   with the same policy file, to the old entry, ``python -m gitopsbot post-render`` (the
   whole command line: every command module, the kubernetes client, httpx, pygit2,
   apscheduler), and to the new one, ``python -m gitopsbot.post_render`` (core.postrender
   and the standard library). Rounds alternate old and new, so load on the machine falls on
   both; each round checks that both wrote the same bytes. Also ``python -c pass``: the
   interpreter's own start, the floor. Prints wall and CPU (user+sys of the child) medians
   and the old/new ratios.
2. **``helm upgrade`` through the adapter** (``HelmCli.upgrade`` with a policy, against the
   sandbox's API emulator in this process): the old and the new ``post_render_command``,
   and no post-renderer at all (what a person's ``helm upgrade`` costs), alternating. CPU is
   helm's and the post-renderer's (children of this process); the emulator's is not in it.
   ``--skip-upgrade`` leaves this out.

    python benchmarks/postrender_bench.py [--rounds 7] [--helm helm4|helm3] [--skip-upgrade]
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from gitopsbot.ports.helm import UpgradeRequest

ROOT = Path(__file__).resolve().parent.parent
CHARTS = ROOT / "examples" / "charts"
VALUES = {"cluster": {"extraPools": [{"name": "training"}]}}

OLD = (sys.executable, "-m", "gitopsbot", "post-render")
NEW = (sys.executable, "-m", "gitopsbot.post_render")
FLOOR = (sys.executable, "-c", "pass")


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed(action: Callable[[], object]) -> tuple[float, float, object]:
    """(wall seconds, CPU seconds of the children it waited for, its result)."""
    cpu, wall = children_cpu(), time.perf_counter()
    result = action()
    return time.perf_counter() - wall, children_cpu() - cpu, result


def policy_text() -> str:
    from gitopsbot.core.charts.postrender import encode_policy
    from gitopsbot.core.fleet.model import MaintenanceWindow, PoolPolicy, RolloutPolicy

    return encode_policy(
        RolloutPolicy(
            pools=(
                PoolPolicy(
                    name="shared",
                    batch_percentage=10,
                    batch_interval_seconds=120,
                    max_duration_seconds=3600,
                    maintenance_window=MaintenanceWindow("0 3 * * 6", 7200),
                ),
                PoolPolicy(name="training", batch_percentage=50, batch_interval_seconds=5),
            )
        )
    )


def render(helm: Path, chart: Path, work: Path) -> str:
    values = work / "values.json"
    values.write_text(json.dumps(VALUES))
    done = subprocess.run(
        [str(helm), "template", "tf", str(chart), "--namespace", "tensor-fusion",
         "--values", str(values)],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return done.stdout


def summary(name: str, walls: Sequence[float], cpus: Sequence[float]) -> tuple[float, float]:
    wall, cpu = statistics.median(walls), statistics.median(cpus)
    print(
        f"  {name:<44} wall {wall * 1000:7.0f} ms (min {min(walls) * 1000:5.0f})"
        f"   cpu {cpu * 1000:7.0f} ms (min {min(cpus) * 1000:5.0f})"
    )
    return wall, cpu


def bench_post_render(manifests: str, policy: Path, rounds: int) -> None:
    runs: dict[str, tuple[list[float], list[float]]] = {}
    entries = {
        "old: python -m gitopsbot post-render": (*OLD, "--policy", str(policy)),
        "new: python -m gitopsbot.post_render": (*NEW, "--policy", str(policy)),
        "floor: python -c pass": FLOOR,
    }
    outputs: dict[str, str] = {}
    for _ in range(rounds):
        for name, argv in entries.items():

            def run(argv: Sequence[str] = argv) -> subprocess.CompletedProcess[str]:
                return subprocess.run(
                    argv, input=manifests, capture_output=True, text=True, check=True
                )

            wall, cpu, done = timed(run)
            assert isinstance(done, subprocess.CompletedProcess)
            if not name.startswith("floor"):
                previous = outputs.setdefault("out", done.stdout)
                assert done.stdout == previous, f"{name} wrote other manifests"
            walls, cpus = runs.setdefault(name, ([], []))
            walls.append(wall)
            cpus.append(cpu)
    assert "autoUpdateHypervisor: false" in outputs["out"]
    print(f"post-renderer on {len(manifests)} bytes of rendered manifests, {rounds} rounds:")
    figures = {name: summary(name, *runs[name]) for name in entries}
    (old_wall, old_cpu), (new_wall, new_cpu) = list(figures.values())[:2]
    print(f"  old/new: wall x{old_wall / new_wall:.1f}, cpu x{old_cpu / new_cpu:.1f}")


def bench_upgrade(helm_binary: Path, chart: Path, policy_source: str, rounds: int) -> None:
    from gitopsbot.adapters.helm import HelmCli
    from gitopsbot.core.charts.postrender import decode_policy
    from gitopsbot.ports.helm import ChartRef
    from gitopsbot.sandbox.apiserver import ApiServer

    policy = decode_policy(policy_source, source="bench")
    version = chart.name.rsplit("-", 1)[1]
    runs: dict[str, tuple[list[float], list[float]]] = {}
    with tempfile.TemporaryDirectory(prefix="postrender-bench-") as tmp, ApiServer() as api:
        kubeconfig = api.write_kubeconfig(Path(tmp) / "kubeconfig")
        clis = {
            "old post-render command": (OLD, True),
            "new post-render command": (NEW, True),
            "no post-renderer (as by hand)": (NEW, False),
        }
        helms = {
            name: HelmCli(helm_binary, home=Path(tmp) / f"h{i}", kubeconfig=kubeconfig,
                          post_render_command=command)
            for i, (name, (command, _)) in enumerate(clis.items())
        }  # fmt: skip
        first = next(iter(helms.values()))
        print(f"\nhelm upgrade via HelmCli ({first.version}, API emulator), {rounds} rounds:")
        for _ in range(rounds):
            for name, helm in helms.items():
                with_policy = clis[name][1]

                def upgrade(helm: HelmCli = helm, with_policy: bool = with_policy) -> object:
                    return helm.upgrade(UpgradeRequest(
                        release="tf", namespace="default", chart=ChartRef(path=str(chart)),
                        version=version, values=VALUES, description="bench",
                        post_render_policy=policy if with_policy else None,
                    ))  # fmt: skip

                wall, cpu, _ = timed(upgrade)
                walls, cpus = runs.setdefault(name, ([], []))
                walls.append(wall)
                cpus.append(cpu)
        # Each upgrade also runs ``helm history`` twice (the pending check, the result).
        figures = {name: summary(name, *runs[name]) for name in clis}
        (old_wall, old_cpu), (new_wall, new_cpu), _ = figures.values()
        print(f"  old/new: wall x{old_wall / new_wall:.1f}, cpu x{old_cpu / new_cpu:.1f}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Time the Helm post-renderer's old entry (python -m gitopsbot "
        "post-render) against the new one (python -m gitopsbot.post_render), alone and "
        "inside helm upgrade through HelmCli.",
    )
    parser.add_argument("--rounds", type=int, default=7, help="rounds of each (default 7)")
    parser.add_argument("--helm", choices=("helm4", "helm3"), default="helm4")
    parser.add_argument("--chart-version", default="1.8.7", help="examples/charts version")
    parser.add_argument("--skip-upgrade", action="store_true", help="the post-renderer only")
    args = parser.parse_args(argv)

    from gitopsbot import settings
    from gitopsbot.adapters import binaries

    chart = CHARTS / f"tensor-fusion-{args.chart_version}"
    if not (chart / "Chart.yaml").is_file():
        print(f"{chart} is absent")
        return 1
    helm_binary = binaries.ensure(args.helm, settings.cache_dir())
    with tempfile.TemporaryDirectory(prefix="postrender-bench-") as tmp:
        work = Path(tmp)
        manifests = render(helm_binary, chart, work)
        policy = work / "policy.json"
        policy.write_text(policy_text(), encoding="utf-8")
        bench_post_render(manifests, policy, args.rounds)
        if not args.skip_upgrade:
            bench_upgrade(helm_binary, chart, policy.read_text(encoding="utf-8"), args.rounds)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
