"""examples/fleet-waves (issue 14): the worked example of a fleet promoted in waves loads,
validates, and its waves hold and release a chart version as its README says."""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

from gitopsbot.adapters.localfiles import DirectoryTree
from gitopsbot.core.waves.promotion import ChangeKind, ClusterEvidence, fleet_by_wave, judge
from gitopsbot.fleetrepo import load_fleet

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "fleet-waves"
NOW = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)


def test_the_example_validates() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "gitopsbot", "validate", str(EXAMPLE)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "6 cluster(s) OK" in done.stdout


def test_three_waves_one_staging_two_canaries_three_production() -> None:
    fleet = load_fleet(DirectoryTree(EXAMPLE))
    groups = fleet_by_wave(fleet.settings.waves, fleet.clusters.values())
    assert [(g.wave.name if g.wave else None, g.clusters) for g in groups] == [
        ("staging", ("staging-eu1",)),
        ("canary", ("prod-canary-eu1", "prod-canary-us1")),
        ("production", ("prod-eu1", "prod-eu2", "prod-us1")),
    ]


def _verified(cluster: str, version: str, ago: timedelta) -> ClusterEvidence:
    return ClusterEvidence(cluster, chart_version=version, verified_at=NOW - ago)


def _judge(target: str, version: str, *evidence: ClusterEvidence) -> tuple[bool, str]:
    fleet = load_fleet(DirectoryTree(EXAMPLE))
    decision = judge(
        waves=fleet.settings.waves,
        clusters=fleet.clusters.values(),
        evidence={e.cluster: e for e in evidence},
        target=target,
        version=version,
        change=ChangeKind.CHART,
        failed_versions=fleet.settings.failed_versions,
        now=NOW,
        deployed="1.8.0",
    )
    return decision.allowed, decision.message


def test_production_waits_for_staging_then_for_the_canaries_soak() -> None:
    allowed, message = _judge("prod-eu1", "1.8.7")
    assert not allowed
    assert "wave production waits for wave staging: staging-eu1 not on 1.8.7 yet" in message
    staging = _verified("staging-eu1", "1.8.7", timedelta(hours=30))  # soaked (24h)
    canary_eu = _verified("prod-canary-eu1", "1.8.7", timedelta(hours=1))
    allowed, message = _judge("prod-eu1", "1.8.7", staging, canary_eu)
    assert not allowed
    assert message.startswith("wave production waits for wave canary: "), message  # not staging
    assert "prod-canary-us1" in message and "prod-canary-eu1" in message, message
    canary_us = _verified("prod-canary-us1", "1.8.7", timedelta(hours=49))
    canary_eu = _verified("prod-canary-eu1", "1.8.7", timedelta(hours=49))
    allowed, message = _judge("prod-eu1", "1.8.7", staging, canary_eu, canary_us)
    assert allowed, message


def test_the_canaries_wait_for_staging_only() -> None:
    staging = _verified("staging-eu1", "1.8.7", timedelta(hours=2))
    allowed, message = _judge("prod-canary-us1", "1.8.7", staging)
    assert not allowed and "soak ends" in message, message
    staging = _verified("staging-eu1", "1.8.7", timedelta(hours=25))
    allowed, message = _judge("prod-canary-us1", "1.8.7", staging)
    assert allowed, message


def test_the_failed_version_is_refused_from_the_canary_wave_on() -> None:
    allowed, _ = _judge("staging-eu1", "1.8.5")
    assert allowed  # staging comes before the wave the mark names
    for target in ("prod-canary-eu1", "prod-us1"):
        allowed, message = _judge(target, "1.8.5")
        assert not allowed and "1.8.5" in message and "hypervisor crash loop" in message, message
