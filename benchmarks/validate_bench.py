"""``gitopsbot validate`` at fleet scale: the YAML reader of issue 11 against today's loader
before it, in the same run.

A fleet repository of N copies of ``examples/fleet/clusters/staging`` (``--values example``:
2 KB of values each) or of the same cluster carrying the real chart's full 45 KB values.yaml
(``--values real``, from ../shared/tensor-fusion/chart-1.8.7/values.yaml), validated as
``gitopsbot validate`` does it: every file loaded and checked, then the built-in policy rules
judged per cluster.

"today" is the loader before the reader: ``gitopsbot/core/fleet_loading.py`` as it was at the
parent of the commit that split it (ruamel.yaml's pure-Python round trip), read with
``git show`` into a temporary module and put in place of ``core.fleet.assembly.parse_fleet``,
with the garbage collector as it was (not paused while parsing, not frozen while judging).
Everything else (reading the files, the policy rules) is the same code in both. Each
(size, loader) runs in its own process, so its peak memory is its own; the seconds are the
validation inside that process (imports excluded).

Targets (issue 11), on one core: 1,000 example-size clusters in under 5 s, 1,000 clusters with
the real values in under 20 s, under 300 MB.

    python benchmarks/validate_bench.py [--sizes 10,100,1000] [--values example|real]
                                        [--today-up-to 1000]
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "fleet"
REAL_VALUES = ROOT.parent / "shared" / "tensor-fusion" / "chart-1.8.7" / "values.yaml"
# The commit that split core/fleet_loading.py into core/fleet/: its parent holds today's loader.
SPLIT_COMMIT = "e5cbf9d"
OLD_MODULE = "gitopsbot/core/fleet_loading.py"


def build_fleet(root: Path, clusters: int, values: Path | None) -> None:
    root.mkdir(parents=True)
    shutil.copy(EXAMPLE / "gitopsbot.yaml", root / "gitopsbot.yaml")
    if (EXAMPLE / "policies").is_dir():
        shutil.copytree(EXAMPLE / "policies", root / "policies")
    for i in range(clusters):
        target = root / "clusters" / f"c{i:04d}"
        shutil.copytree(EXAMPLE / "clusters" / "staging", target)
        if values is not None:
            shutil.copy(values, target / "values.yaml")


def old_loader_source() -> str:
    done = subprocess.run(
        ["git", "show", f"{SPLIT_COMMIT}^:{OLD_MODULE}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout


def child(which: str, fleet: Path, old_source: Path | None) -> None:
    """Validate ``fleet`` in this process; print seconds and peak RSS as JSON."""
    from gitopsbot import fleetrepo
    from gitopsbot.commands import validate
    from gitopsbot.core.fleet import assembly

    if which == "today":
        assert old_source is not None
        spec = importlib.util.spec_from_file_location("today_fleet_loading", old_source)
        assert spec is not None and spec.loader is not None
        old = importlib.util.module_from_spec(spec)
        sys.modules["today_fleet_loading"] = old  # its dataclasses look themselves up there
        spec.loader.exec_module(old)
        assembly.parse_fleet = old.parse_fleet  # type: ignore[assignment]
        # Today's garbage collection too: no pause while parsing, no freeze while judging.
        fleetrepo._gc_paused = contextlib.nullcontext  # type: ignore[assignment]
        validate.gc = types.SimpleNamespace(freeze=lambda: None, unfreeze=lambda: None)  # type: ignore[attr-defined]
    args = argparse.Namespace(path=str(fleet), chart_dir=None)
    start = time.perf_counter()
    status = validate.run(args)
    seconds = time.perf_counter() - start
    peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({"status": status, "seconds": seconds, "peak_mb": peak_kb / 1024}))


def measure(which: str, fleet: Path, old_source: Path) -> dict[str, float]:
    done = subprocess.run(
        [sys.executable, __file__, "--child", which, str(fleet), str(old_source)],
        capture_output=True,
        text=True,
        check=False,
        cwd=ROOT,
    )
    if done.returncode != 0:
        raise SystemExit(f"{which} on {fleet} failed:\n{done.stderr[-2000:]}")
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    if result["status"] != 0:
        raise SystemExit(f"{which} found problems in {fleet}: the fleet should be valid")
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="10,100,1000", help="cluster counts (comma list)")
    parser.add_argument(
        "--values",
        choices=("example", "real"),
        default="example",
        help="each cluster's values.yaml: the example's 2 KB, or the real chart's 45 KB",
    )
    parser.add_argument(
        "--today-up-to",
        type=int,
        default=1000,
        help="run today's loader only up to this many clusters (it takes minutes at 1,000 "
        "with the real values)",
    )
    parser.add_argument(
        "--child", nargs=3, metavar=("WHICH", "FLEET", "OLD"), help=argparse.SUPPRESS
    )
    args = parser.parse_args()
    if args.child:
        which, fleet, old = args.child
        child(which, Path(fleet), Path(old))
        return
    values = None
    if args.values == "real":
        if not REAL_VALUES.is_file():
            raise SystemExit(f"{REAL_VALUES} is absent: the real values need ../shared")
        values = REAL_VALUES
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    with tempfile.TemporaryDirectory(prefix="validate-bench-") as tmp:
        old_source = Path(tmp) / "today_fleet_loading.py"
        old_source.write_text(old_loader_source())
        print(f"values: {args.values}; today = {OLD_MODULE} at {SPLIT_COMMIT}^")
        print(
            f"{'clusters':>8}  {'today s':>8}  {'new s':>7}  {'ratio':>6}  "
            f"{'today MB':>8}  {'new MB':>7}  {'new ms/cluster':>14}"
        )
        for size in sizes:
            fleet = Path(tmp) / f"fleet-{size}"
            build_fleet(fleet, size, values)
            new = measure("new", fleet, old_source)
            today = measure("today", fleet, old_source) if size <= args.today_up_to else None
            ratio = f"{today['seconds'] / new['seconds']:6.1f}" if today else f"{'-':>6}"
            print(
                f"{size:>8}  "
                + (f"{today['seconds']:8.2f}" if today else f"{'-':>8}")
                + f"  {new['seconds']:7.2f}  {ratio}  "
                + (f"{today['peak_mb']:8.0f}" if today else f"{'-':>8}")
                + f"  {new['peak_mb']:7.0f}  {1000 * new['seconds'] / size:14.1f}",
                flush=True,
            )
            shutil.rmtree(fleet)


if __name__ == "__main__":
    main()
