"""Fleet files read as a baseline (``gitopsbot.baseline``): literal secrets in values.yaml are
masked (``***``, never the value) and reported with file:line and values path, per cluster;
a fleet or cluster with any other problem is refused as the loader refuses it; a clean one
reads as the loader reads it."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from gitopsbot.adapters.localfiles import DirectoryTree
from gitopsbot.baseline import load_cluster_baseline, load_fleet_baseline
from gitopsbot.core.fleet.model import Location
from gitopsbot.errors import FleetError
from tests.core.plan_builders import ROOT

EXAMPLE = ROOT / "examples" / "fleet"
TOKEN = "canary-Bz61q-enroll-token"
PASSWORD = "canary-Lp08d-greptime-password"


@pytest.fixture
def fleet(tmp_path: Path) -> Path:
    if not (EXAMPLE / "clusters" / "staging").is_dir():
        pytest.skip("examples/fleet is not there")
    root = tmp_path / "fleet"
    shutil.copytree(EXAMPLE, root)
    return root


def _write_literal(values: Path, key: str, literal: str) -> int:
    """Set ``  <key>: "<literal>"`` (or add it under ``greptime:``); returns its line."""
    text = values.read_text()
    if re.search(rf"^  {key}: .*$", text, flags=re.M):
        text = re.sub(rf"^  {key}: .*$", f'  {key}: "{literal}"', text, count=1, flags=re.M)
    else:
        text = text.replace("greptime:\n", f'greptime:\n  {key}: "{literal}"\n', 1)
    values.write_text(text)
    return 1 + next(i for i, line in enumerate(text.splitlines()) if literal in line)


def test_a_clean_fleet_reads_as_the_loader_reads_it(fleet: Path) -> None:
    loaded, literals = load_fleet_baseline(DirectoryTree(fleet))
    assert literals == {} and {"staging", "production"} <= set(loaded.clusters)
    spec, found = load_cluster_baseline(DirectoryTree(fleet), "staging")
    assert found == {} and spec == loaded.clusters["staging"]


def test_literals_are_masked_and_located_per_cluster(fleet: Path) -> None:
    staging = fleet / "clusters" / "staging" / "values.yaml"
    production = fleet / "clusters" / "production" / "values.yaml"
    token_line = _write_literal(staging, "enrollToken", TOKEN)
    password_line = _write_literal(production, "password", PASSWORD)
    loaded, literals = load_fleet_baseline(DirectoryTree(fleet))
    assert literals["staging"]["agent.enrollToken"] == Location(
        "clusters/staging/values.yaml", token_line, literals["staging"]["agent.enrollToken"].column
    )
    assert literals["production"]["greptime.password"].line == password_line
    assert loaded.clusters["staging"].values["agent"]["enrollToken"] == "***"
    assert loaded.clusters["production"].values["greptime"]["password"] == "***"
    assert TOKEN not in repr(loaded) and PASSWORD not in repr(loaded)
    spec, found = load_cluster_baseline(DirectoryTree(fleet), "staging")
    assert set(found) == {"agent.enrollToken"} and found["agent.enrollToken"].line == token_line
    assert spec.values["agent"]["enrollToken"] == "***"
    # Everything else is as written: the line numbers of the other values did not move.
    assert spec.values_locations["agent.agentId"].line == token_line - 1


def test_any_other_problem_is_refused_as_the_loader_refuses_it(fleet: Path) -> None:
    staging = fleet / "clusters" / "staging" / "values.yaml"
    _write_literal(staging, "enrollToken", TOKEN)
    staging.write_text(
        staging.read_text().replace("  replicaCount: 1\n", "  replicaCount: [1\n", 1)
    )
    with pytest.raises(FleetError) as refused:
        load_cluster_baseline(DirectoryTree(fleet), "staging")
    assert "clusters/staging/values.yaml" in str(refused.value)
    assert TOKEN not in str(refused.value)
    with pytest.raises(FleetError):
        load_fleet_baseline(DirectoryTree(fleet))
