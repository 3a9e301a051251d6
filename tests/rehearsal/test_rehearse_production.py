"""``gitopsbot rehearse`` of the example production cluster (issue 15): real ``helm template``
of the example chart 1.8.7, the API emulator's Store and the controller simulator on the
rehearsal's jumping clock (sandbox/rehearsal.py).

Production: inference (16 nodes, canary 5%, then 10% batches every 2m, hypervisor then
worker, window 4h Tue/Thu 01:00 Berlin, maxDuration 3h30m) before training (24 nodes, 20%
every 5m, window 6h Saturday 02:00 Berlin, maxDuration 5h). Days of waiting for windows and
an hour and a half of batches take a few seconds of real time; each pool's rolling time
matches the plan's estimate within core.rehearsal.TOLERANCE.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from gitopsbot import app
from gitopsbot.commands import plan as plan_command
from gitopsbot.core import rehearsal as rh
from gitopsbot.core.fleet.model import ClusterSpec
from gitopsbot.core.operations import operation
from gitopsbot.core.records.journal import OperationKind, StepKind
from gitopsbot.fleetrepo import load_fleet
from gitopsbot.sandbox import rehearsal as sr

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
FLEET = ROOT / "examples" / "fleet"
CHARTS = ROOT / "examples" / "charts"
TUESDAY = datetime(2026, 12, 1, 0, 0, tzinfo=UTC)  # 01:00 Berlin: inference's window opens


def _args() -> argparse.Namespace:
    return argparse.Namespace(
        cluster="production",
        fleet=str(FLEET),
        from_ref=None,
        to_ref=None,
        chart_dir=[CHARTS / "repo"],
    )


def _rehearse(
    tmp_path: Path, binaries: dict[str, Path], spec: ClusterSpec | None = None, **kw: object
) -> rh.Rehearsal:
    plan = plan_command.build_plan(_args())
    spec = spec or load_fleet(app.fleet_tree(FLEET)).clusters["production"]
    rel = spec.release
    chart = plan_command.chart_source([CHARTS / "repo"]).chart(
        rel.chart_repo_url, rel.chart_name, rel.version
    )
    options = sr.Options(
        helm=binaries["helm4"],
        workdir=tmp_path,
        start=TUESDAY,
        chart=sr.find_chart([CHARTS], rel.chart_name, rel.version, rel.chart_repo_url),
    )
    return sr.rehearse(spec, plan, chart.crds, replace(options, **kw))  # type: ignore[arg-type]


def test_production_rehearses_in_seconds_and_matches_the_plan(
    tmp_path: Path, binaries: dict[str, Path]
) -> None:
    # How fast: benchmarks/rehearse_bench.py (never a timed assertion in a test).
    r = _rehearse(tmp_path, binaries)
    assert r.succeeded
    inference, training = r.pools
    assert (inference.pool, inference.nodes, inference.components) == (
        "inference",
        16,
        ("hypervisor", "worker"),
    )
    assert (training.pool, training.nodes, training.components) == ("training", 24, ("hypervisor",))
    # Inference starts at once (its window is open); training waits for Saturday's.
    assert inference.started_at == TUESDAY
    assert training.started_at == datetime(2026, 12, 5, 1, 0, tzinfo=UTC)  # 02:00 Berlin
    assert any("waits for its maintenance window" in m.what for m in r.moments)
    # Canary (1 node), then 10% batches; each phase's batches counted.
    assert inference.batches >= 11 + 10 and training.batches == 5
    # Within the stated tolerance of the plan's estimate, per pool.
    rows = rh.compare(rh.predicted(r), rh.estimates(r))
    assert [c.pool for c in rows] == ["inference", "training"]
    assert all(c.within for c in rows), rows
    assert training.rolling_seconds == training.estimate_seconds  # 5×90s + 4×5m
    text = rh.render_text(r)
    assert "what a rollback would do:" in text and "never touches CRDs (R16)" in text
    assert "GPU canary pod" in text  # canary-smoke.yaml applies to inference
    assert "MAXDURATION" not in text


def test_a_window_that_closes_mid_pool_pauses_it_until_the_next(
    tmp_path: Path, binaries: dict[str, Path]
) -> None:
    start = TUESDAY + timedelta(hours=3, minutes=40)  # 20 minutes before the window's end
    r = _rehearse(tmp_path, binaries, start=start)
    assert r.succeeded
    inference = r.pools[0]
    whats = [m.what for m in r.moments if m.pool == "inference"]
    assert any(w.startswith("maintenance window closed at hypervisor") for w in whats), whats
    assert inference.waited_seconds == 44 * 3600  # Tue 04:00 UTC → Thu 00:00 UTC
    rows = rh.compare(rh.predicted(r), rh.estimates(r))
    assert all(c.within for c in rows), rows  # waits are not rolling time


def test_a_rehearsal_that_hits_max_duration_says_so(
    tmp_path: Path, binaries: dict[str, Path]
) -> None:
    spec = load_fleet(app.fleet_tree(FLEET)).clusters["production"]
    pools = tuple(
        replace(p, max_duration_seconds=1800) if p.name == "inference" else p
        for p in spec.rollout.pools
    )
    short = replace(spec, rollout=replace(spec.rollout, pools=pools))
    r = _rehearse(tmp_path, binaries, spec=short)
    assert not r.succeeded
    inference, training = r.pools
    assert inference.outcome == rh.Outcome.MAX_DURATION
    assert training.outcome == rh.Outcome.NOT_STARTED
    assert inference.finished_at == TUESDAY + timedelta(minutes=30)
    text = rh.render_text(r)
    assert "MAXDURATION HIT: pool inference did not finish within its maxDuration" in text
    assert "maxDuration 30m00s ran out at hypervisor progress" in text
    assert "hits its maxDuration (onFailure: revert-pr)" in rh.compressed(r)


def test_the_canary_pool_goes_first_as_the_bot_moves_it(
    tmp_path: Path, binaries: dict[str, Path]
) -> None:
    spec = load_fleet(app.fleet_tree(FLEET)).clusters["production"]
    assert spec.rollout.order == ("inference", "training")
    canary_last = replace(spec, rollout=replace(spec.rollout, canary_pool="training"))
    r = _rehearse(tmp_path, binaries, spec=canary_last)
    assert r.succeeded
    assert [p.pool for p in r.pools] == ["training", "inference"]
    training, inference = r.pools
    assert training.started_at == datetime(2026, 12, 5, 1, 0, tzinfo=UTC)  # its own window
    assert training.finished_at is not None and inference.started_at is not None
    assert inference.started_at >= training.finished_at  # the next Tuesday's window
    # The same order as the operation's phase steps the bot makes for this policy.
    journal = operation.new_operation(
        kind=OperationKind.UPGRADE,
        cluster="production",
        desired_sha="0" * 40,
        created_at=TUESDAY,
        policy=canary_last.rollout,
    )
    bot_order = list(dict.fromkeys(s.pool for s in journal.steps if s.kind is StepKind.POOL_PHASE))
    assert bot_order == [p.pool for p in r.pools]


def test_the_command_prints_json_and_exits_0(binaries: dict[str, Path]) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "gitopsbot",
            "rehearse",
            "--cluster",
            "production",
            "--fleet",
            str(FLEET),
            "--chart-dir",
            str(CHARTS),
            "--start",
            "2026-12-01T00:00:00Z",
            "--json",
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["succeeded"] and [p["pool"] for p in out["pools"]] == ["inference", "training"]
    assert all(row["within"] for row in out["compared_with_plan"])
