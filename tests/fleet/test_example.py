"""The example fleet loads, through a directory and through an in-memory tree, with the
fields its files say (read back from the files themselves where the value is in them)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from ruamel.yaml import YAML

from gitopsbot.adapters.localfiles import DirectoryTree
from gitopsbot.core.fleet import secrets
from gitopsbot.core.fleet.model import Component, Environment
from gitopsbot.fleetrepo import load_cluster, load_fleet
from tests.fleet.fleet_testing import EXAMPLE, MemoryTree


def _yaml(path: Path) -> object:
    return YAML(typ="safe").load(path.read_text())


def test_example_fleet_loads_from_a_directory() -> None:
    fleet = load_fleet(DirectoryTree(EXAMPLE))
    assert sorted(fleet.clusters) == ["production", "staging"]
    staging = fleet.clusters["staging"]
    prod = fleet.clusters["production"]

    assert staging.environment is Environment.STAGING
    assert prod.environment is Environment.PRODUCTION
    assert staging.release.chart_repo_url == "https://download.tensor-fusion.ai"
    assert staging.release.chart_name == "tensor-fusion"
    assert staging.release.version == "1.8.7"
    assert staging.release.release_name == "tensor-fusion-sys"
    assert staging.release.kube_context == "gpu-staging-eu1"

    # values are plain data equal to what a YAML loader reads from the file
    assert staging.values == _yaml(EXAMPLE / "clusters/staging/values.yaml")
    assert type(staging.values) is dict
    assert type(staging.values["controller"]) is dict
    assert prod.values["controller"]["replicaCount"] == 2  # R5

    # two GPU pools each, with node counts, windows, deadlines and phases
    for spec in (staging, prod):
        assert len(spec.rollout.pools) >= 2
        for pool in spec.rollout.pools:
            assert pool.nodes > 0
            assert pool.maintenance_window is not None
            assert pool.max_duration_seconds is not None
            assert pool.phases[0] is Component.HYPERVISOR
    assert all(p.batch_percentage < 100 for p in prod.rollout.pools)
    inference = prod.rollout.ordered_pools()[0]
    assert inference.name == "inference"
    assert inference.phases == (Component.HYPERVISOR, Component.WORKER)
    assert inference.max_duration_seconds == 3 * 3600 + 30 * 60  # "3h30m"
    assert inference.maintenance_window is not None
    assert inference.maintenance_window.duration_seconds == 4 * 3600
    assert inference.maintenance_window.timezone == "Europe/Berlin"
    assert prod.rollout.canary_pool == "inference"

    refs = {r.values_path: r for r in prod.credentials.secrets}
    assert refs["agent.enrollToken"].source == "kubernetes-secret"
    assert refs["agent.enrollToken"].key == "enrollToken"
    assert refs["greptime.password"].source == "file"
    assert refs["agent.agentId"].source == "env"
    assert prod.credentials.secret_paths == ("agent.agentId",)
    assert prod.credentials.rotation == 2
    assert staging.smoke_test is not None and staging.smoke_test.manifest["kind"] == "Pod"
    assert prod.smoke_test is None

    assert fleet.settings.forge.kind == "github"
    assert fleet.settings.forge.token is not None
    assert fleet.settings.forge.token.source == "env"
    assert fleet.settings.proposals.interval_seconds == 3600
    assert [p for p, _ in fleet.policy_documents] == ["policies/team-rules.yaml"]


def test_example_values_hold_no_secret_material() -> None:
    fleet = load_fleet(DirectoryTree(EXAMPLE))
    for spec in fleet.clusters.values():
        declared = [
            *spec.credentials.secret_paths,
            *(r.values_path for r in spec.credentials.secrets),
        ]
        assert secrets.find_secret_literals(spec.values, declared) == []


def test_value_locations_point_at_the_key_in_values_yaml() -> None:
    spec = load_fleet(DirectoryTree(EXAMPLE)).clusters["staging"]
    lines = (EXAMPLE / "clusters/staging/values.yaml").read_text().splitlines()
    for path in ("cluster.hypervisorImage", "controller.replicaCount", "agent.enrollToken"):
        loc = spec.values_locations[path]
        assert loc.file == "clusters/staging/values.yaml"
        key = path.rsplit(".", 1)[-1]
        assert lines[loc.line - 1][loc.column - 1 :].startswith(f"{key}:")
    loc = spec.locations["rollout.yaml:pools.inference.phases"]
    rollout = (EXAMPLE / "clusters/staging/rollout.yaml").read_text().splitlines()
    assert rollout[loc.line - 1].strip().startswith("phases:")


def test_memory_tree_and_directory_give_the_same_fleet(
    tree_with: Callable[..., MemoryTree],
) -> None:
    assert load_fleet(tree_with({})) == load_fleet(DirectoryTree(EXAMPLE))


def test_load_cluster_reads_one_cluster(tree_with: Callable[..., MemoryTree]) -> None:
    tree = tree_with({"clusters/production/values.yaml": "controller: [broken\n"})
    spec = load_cluster(tree, "staging")  # production's broken file does not matter here
    assert spec.name == "staging"


@pytest.mark.parametrize("name", ["staging", "production"])
def test_release_versions_are_the_documented_ones(name: str) -> None:
    doc = _yaml(EXAMPLE / f"clusters/{name}/release.yaml")
    assert isinstance(doc, dict)
    assert load_cluster(DirectoryTree(EXAMPLE), name).release.version == doc["chart"]["version"]
