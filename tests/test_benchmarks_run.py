"""The benchmark scripts still run (their figures are read by people, never asserted here):
each answers ``--help``, the intake benchmark runs end to end on a tiny fleet, and the
apply and fleet benchmarks run once in their quick modes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # the benchmark scripts in subprocesses (docs/testing.md)

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = sorted((ROOT / "benchmarks").glob("*_bench.py"))


@pytest.mark.parametrize("script", SCRIPTS, ids=[s.stem for s in SCRIPTS])
def test_each_benchmark_answers_help(script: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(script), "--help"], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    assert "usage:" in done.stdout


def test_the_intake_benchmark_runs_on_a_tiny_fleet() -> None:
    script = str(ROOT / "benchmarks" / "intake_bench.py")
    done = subprocess.run(
        [sys.executable, script, "--sizes", "2,3", "--samples", "1"],
        capture_output=True,
        text=True,
        check=False,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    rows = [ln for ln in done.stdout.splitlines() if "clusters: bot (one cluster)" in ln]
    assert [r.split()[0] for r in rows] == ["2", "3"], done.stdout


@pytest.mark.slow
def test_the_apply_benchmark_runs_quick(binaries: dict[str, Path]) -> None:
    """One bot round and one by-hand round, three webhook merges, no loaded run (the whole
    sandbox, real helm 4 and kubectl; about a minute)."""
    script = str(ROOT / "benchmarks" / "apply_bench.py")
    done = subprocess.run(
        [sys.executable, script, "--quick", "--skip-load"],
        capture_output=True,
        text=True,
        check=False,
        cwd=ROOT,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    assert "ratio bot / by hand" in done.stdout, done.stdout
    assert "merge -> first action, webhook, quiet" in done.stdout, done.stdout


def test_the_fleet_merge_benchmark_runs_on_a_tiny_fleet() -> None:
    script = str(ROOT / "benchmarks" / "fleet_merge_bench.py")
    done = subprocess.run(
        [sys.executable, script, "--sizes", "3", "--merges", "1"],
        capture_output=True,
        text=True,
        check=False,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    assert "3 clusters: state commits per merge" in done.stdout, done.stdout


def test_the_fleet_benchmark_runs_quick(binaries: dict[str, Path]) -> None:
    """Three clusters against one sandbox, a real `gitopsbot run`, 10 s idle, two webhook
    merges (about 45 s): every figure is printed, as JSON and in the table."""
    script = str(ROOT / "benchmarks" / "fleet_bench.py")
    done = subprocess.run(
        [sys.executable, script, "--quick", "--json"],
        capture_output=True,
        text=True,
        check=False,
        cwd=ROOT,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    row = json.loads(done.stdout.splitlines()[0])
    assert row["clusters"] == 3, done.stdout
    assert set(row) >= {"idle_cpu_percent", "first_action_p95_seconds", "lease_writes_per_second"}
    assert "judged_operation_seconds" in done.stderr, done.stderr[-4000:]
