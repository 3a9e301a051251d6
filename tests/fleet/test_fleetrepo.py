"""fleetrepo: reading through the FileTree port, from a real directory on disk."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from gitopsbot.adapters.localfiles import DirectoryTree
from gitopsbot.errors import ConfigError, FleetError
from gitopsbot.fleetrepo import load_cluster, load_fleet
from tests.fleet.fleet_testing import EXAMPLE


@pytest.fixture
def fleet_dir(tmp_path: Path) -> Path:
    target = tmp_path / "fleet"
    shutil.copytree(EXAMPLE, target)
    return target


def test_broken_file_on_disk_is_reported_with_its_relative_path(fleet_dir: Path) -> None:
    release = fleet_dir / "clusters/production/release.yaml"
    release.write_text(release.read_text().replace("version: 1.8.7", "version: latest"))
    with pytest.raises(FleetError) as info:
        load_fleet(DirectoryTree(fleet_dir))
    assert isinstance(info.value, ConfigError)  # never retried
    (problem,) = info.value.problems
    assert (problem.file, problem.line, problem.field) == (
        "clusters/production/release.yaml",
        5,
        "chart.version",
    )


def test_load_cluster_names_the_nearest_existing_cluster(fleet_dir: Path) -> None:
    with pytest.raises(FleetError) as info:
        load_cluster(DirectoryTree(fleet_dir), "stagin")
    assert "no such cluster" in str(info.value)
    assert "did you mean 'staging'" in str(info.value)


def test_load_cluster_reports_its_own_problems_only(fleet_dir: Path) -> None:
    (fleet_dir / "clusters/staging/values.yaml").write_text("controller: [\n")
    (fleet_dir / "gitopsbot.yaml").write_text("unknown: 1\n")
    with pytest.raises(FleetError) as info:
        load_cluster(DirectoryTree(fleet_dir), "staging")
    assert {p.file for p in info.value.problems} == {"clusters/staging/values.yaml"}
    assert load_cluster(DirectoryTree(fleet_dir), "production").name == "production"


def test_cluster_without_release_yaml(fleet_dir: Path) -> None:
    (fleet_dir / "clusters/staging/release.yaml").unlink()
    with pytest.raises(FleetError) as info:
        load_fleet(DirectoryTree(fleet_dir))
    assert str(info.value) == (
        "clusters/staging/release.yaml: missing: every cluster directory needs release.yaml"
    )


def test_policies_are_collected_as_raw_documents(fleet_dir: Path) -> None:
    (fleet_dir / "policies/more.yml").write_text("- id: TEAM-2\n")
    (fleet_dir / "policies/README.md").write_text("not a rule\n")
    fleet = load_fleet(DirectoryTree(fleet_dir))
    assert [p for p, _ in fleet.policy_documents] == [
        "policies/more.yml",
        "policies/team-rules.yaml",
    ]
    assert dict(fleet.policy_documents)["policies/more.yml"] == "- id: TEAM-2\n"


def test_settings_file_may_be_empty_but_not_absent(fleet_dir: Path) -> None:
    (fleet_dir / "gitopsbot.yaml").write_text("# all defaults\n")
    assert load_fleet(DirectoryTree(fleet_dir)).settings.watched_branch == "main"
    (fleet_dir / "gitopsbot.yaml").unlink()
    with pytest.raises(FleetError, match=r"gitopsbot\.yaml: missing"):
        load_fleet(DirectoryTree(fleet_dir))
