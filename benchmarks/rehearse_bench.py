"""``gitopsbot rehearse`` of the example production cluster: how much of the bot's clock one
second of real time covers, and what a rehearsal costs next to the plan it is compared with.

Each sample runs, as a person would, ``gitopsbot rehearse --cluster production --fleet
examples/fleet --chart-dir examples/charts --json`` in its own process (real helm 4 renders
the chart; the controller simulator plays the pools on a jumping clock), then
``gitopsbot plan`` with the same fleet and charts. Printed per sample and as medians:

- wall seconds of the rehearsal process, and of the rehearsal itself (its ``wall_seconds``);
- the rehearsed span (``finished_at - started_at``: windows waited for included) and the
  ratio span / wall, the compression against playing the operation in real time;
- wall seconds of ``gitopsbot plan`` and the ratio rehearse / plan.

Issue 15 asks that the example production rehearsal finish in under a minute here; the
figures say by how much (docs/rehearsal.md, docs/benchmarks.md).

    python benchmarks/rehearse_bench.py [--samples 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
COMMON = ["--cluster", "production", "--fleet", "examples/fleet"]


def _run(args: list[str]) -> tuple[float, str]:
    began = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "gitopsbot", *args],
        capture_output=True, text=True, check=False, cwd=ROOT,
    )  # fmt: skip
    took = time.monotonic() - began
    if done.returncode != 0:
        raise SystemExit(f"gitopsbot {' '.join(args)}: exit {done.returncode}\n{done.stderr}")
    return took, done.stdout


def sample() -> dict[str, float]:
    wall, out = _run(["rehearse", *COMMON, "--chart-dir", "examples/charts", "--json"])
    r = json.loads(out)
    span = (
        datetime.fromisoformat(r["finished_at"]) - datetime.fromisoformat(r["started_at"])
    ).total_seconds()
    plan_wall, _ = _run(["plan", *COMMON, "--chart-dir", "examples/charts/repo"])
    return {
        "rehearse_wall": wall,
        "rehearsal": float(r["wall_seconds"]),
        "span_hours": span / 3600,
        "compression": span / wall,
        "plan_wall": plan_wall,
        "vs_plan": wall / plan_wall,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=3)
    args = parser.parse_args()
    rows = []
    print("sample  rehearse(s)  in-sandbox(s)  span(h)  span/wall   plan(s)  rehearse/plan")
    for i in range(args.samples):
        s = sample()
        rows.append(s)
        print(
            f"{i + 1:>6}  {s['rehearse_wall']:>11.2f}  {s['rehearsal']:>13.2f}  "
            f"{s['span_hours']:>7.1f}  {s['compression']:>9.0f}x  {s['plan_wall']:>8.2f}  "
            f"{s['vs_plan']:>12.1f}x"
        )
    med = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
    print(
        f"median  {med['rehearse_wall']:>11.2f}  {med['rehearsal']:>13.2f}  "
        f"{med['span_hours']:>7.1f}  {med['compression']:>9.0f}x  {med['plan_wall']:>8.2f}  "
        f"{med['vs_plan']:>12.1f}x"
    )
    print(f"under a minute (issue 15): {med['rehearse_wall']:.1f}s of 60s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
