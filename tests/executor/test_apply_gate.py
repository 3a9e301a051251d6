"""The policy gate at apply time, with the real rules (policies/builtin.yaml), the example
fleet read from disk and the example charts read by the real LocalChartSource."""

from __future__ import annotations

import shutil
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from gitopsbot.adapters.builtin_policies import builtin_policy_documents
from gitopsbot.adapters.chartrepo import LocalChartSource
from gitopsbot.adapters.localfiles import DirectoryTree
from gitopsbot.bot.apply_gate import ApplyGate, Deployed
from gitopsbot.core.charts.observed import HelmReleaseInfo, HelmReleaseStatus
from gitopsbot.core.fleet.model import ClusterSpec
from gitopsbot.core.operations import operation
from gitopsbot.core.policy import apply_gate
from gitopsbot.core.records.journal import Journal, OperationKind, OperationStatus
from gitopsbot.errors import ChartUnavailable
from gitopsbot.fleetrepo import load_cluster, policy_documents

ROOT = Path(__file__).resolve().parents[2]
CHARTS = ROOT / "examples" / "charts" / "repo"
T0 = datetime(2026, 6, 10, 1, 0, tzinfo=UTC)


@pytest.fixture()
def fleet(tmp_path: Path) -> Path:
    shutil.copytree(ROOT / "examples" / "fleet", tmp_path / "fleet")
    return tmp_path / "fleet"


def edit(fleet: Path, name: str, old: str, new: str) -> None:
    path = fleet / "clusters" / "staging" / name
    text = path.read_text()
    assert old in text, f"{old!r} not in {name}"
    path.write_text(text.replace(old, new, 1))


def spec_of(fleet: Path) -> ClusterSpec:
    return load_cluster(DirectoryTree(fleet), "staging")


def deployed(spec: ClusterSpec, chart: str = "1.8.0", values: Any = None) -> Deployed:
    info = HelmReleaseInfo(
        name=spec.release.release_name,
        namespace=spec.release.namespace,
        revision=3,
        status=HelmReleaseStatus.DEPLOYED,
        chart_name="tensor-fusion",
        chart_version=chart,
        app_version="",
        description="installed by hand",
    )
    return Deployed(info=info, values=dict(spec.values) if values is None else values)


def gate(fleet: Path, charts: Any = None) -> ApplyGate:
    return ApplyGate(
        charts or LocalChartSource([CHARTS]),
        builtin_documents=builtin_policy_documents(),
        policies_at=lambda _sha: policy_documents(DirectoryTree(fleet)),
    )


def journal(spec: ClusterSpec, kind: OperationKind = OperationKind.UPGRADE) -> Journal:
    return operation.new_operation(
        kind=kind, cluster=spec.name, desired_sha="a" * 40, created_at=T0, policy=spec.rollout
    )


def test_the_example_upgrade_is_allowed_and_keeps_its_verdicts(fleet: Path) -> None:
    spec = spec_of(fleet)
    judged = gate(fleet).judge(journal(spec), spec, deployed(spec))
    assert judged.status is OperationStatus.RUNNING, judged.failure
    assert not judged.failure


def test_a_worker_phase_without_its_switch_is_blocked_with_file_and_line(fleet: Path) -> None:
    # F3: the training pool gets a worker phase but no autoUpdateWorker switch.
    edit(
        fleet,
        "rollout.yaml",
        "    phases: [hypervisor]\n    nodes: 4",
        "    phases: [hypervisor, worker]\n    nodes: 4",
    )
    spec = spec_of(fleet)
    judged = gate(fleet).judge(journal(spec), spec, deployed(spec))
    assert judged.status is OperationStatus.BLOCKED
    assert not judged.active  # never started, never remediated
    assert "F3 phase-needs-its-switch denied" in judged.failure
    line = next(v for v in judged.verdicts if "F3" in v)
    assert line.startswith("clusters/staging/rollout.yaml:"), line
    assert int(line.split(":")[1]) > 0  # a real line number


def test_a_chart_bump_without_the_hypervisor_acknowledgement_waits_for_it(fleet: Path) -> None:
    # R4: a chart bump while the hypervisor image follows the chart needs an acknowledgement.
    path = fleet / "clusters" / "staging" / "values.yaml"
    # Without an explicit hypervisor image the chart's default would change silently.
    edited = [
        line for line in path.read_text().splitlines() if "tensor-fusion-hypervisor" not in line
    ]
    path.write_text("\n".join(edited) + "\n")
    spec = spec_of(fleet)
    judged = gate(fleet).judge(journal(spec), spec, deployed(spec))
    assert judged.status is OperationStatus.BLOCKED, judged.verdicts
    assert "R4 hypervisor-image-pinned needs-acknowledgement" in judged.failure
    # The acknowledgement in rollout.yaml lifts it.
    rollout = fleet / "clusters" / "staging" / "rollout.yaml"
    rollout.write_text(rollout.read_text() + 'acknowledgements:\n  R4: "2.17 is certified"\n')
    spec = spec_of(fleet)
    judged = gate(fleet).judge(journal(spec), spec, deployed(spec))
    assert judged.status is OperationStatus.RUNNING, judged.failure
    acked = "R4 hypervisor-image-pinned acknowledged"
    assert any(acked in v and "2.17 is certified" in v for v in judged.verdicts)


def test_a_version_the_repository_lacks_is_denied_not_an_error(fleet: Path) -> None:
    edit(fleet, "release.yaml", "version: 1.8.7", "version: 1.9.9")
    spec = spec_of(fleet)
    judged = gate(fleet).judge(journal(spec), spec, deployed(spec))
    assert judged.status is OperationStatus.BLOCKED
    assert "CHART-NOT-IN-INDEX chart-version-published denied" in judged.failure


def test_a_rollback_is_not_judged_by_upgrade_rules(fleet: Path) -> None:
    edit(
        fleet,
        "rollout.yaml",
        "    phases: [hypervisor]\n    nodes: 4",
        "    phases: [hypervisor, worker]\n    nodes: 4",
    )
    edit(fleet, "release.yaml", "version: 1.8.7", "version: 1.8.0")
    spec = spec_of(fleet)
    judged = gate(fleet).judge(journal(spec, OperationKind.ROLLBACK), spec, deployed(spec, "1.8.7"))
    assert judged.status is OperationStatus.RUNNING, judged.failure


def test_rollbacks_keep_only_the_hard_rules() -> None:
    rules = apply_gate.rules_for(OperationKind.UPGRADE, (), chart_downgrade=False)
    assert rules == ()
    from gitopsbot.core.policy import load_rules

    builtin = load_rules(builtin_policy_documents())
    kept = apply_gate.rules_for(OperationKind.ROLLBACK, builtin, chart_downgrade=False)
    assert {r.kind for r in kept} == set(apply_gate.HARD_CHECKS)
    assert apply_gate.rules_for(OperationKind.ROLLBACK, builtin, chart_downgrade=True) == ()
    assert len(apply_gate.rules_for(OperationKind.UPGRADE, builtin, chart_downgrade=True)) == len(
        builtin
    )


def test_deployed_secrets_are_not_a_difference_nor_shown(fleet: Path) -> None:
    spec = spec_of(fleet)
    assert spec.credentials.secrets, "the example declares secret references"
    from gitopsbot.core.fleet.secrets import merge_secrets

    canary = "canary-5ecret-value-42"
    live = merge_secrets(spec.values, {r.values_path: canary for r in spec.credentials.secrets})
    judged = gate(fleet).judge(journal(spec), spec, deployed(spec, values=live))
    assert judged.status is OperationStatus.RUNNING, judged.failure
    assert canary not in repr(judged)


def test_an_unreachable_chart_repository_is_retried_not_blocked(fleet: Path) -> None:
    class Down:
        def index(self, repo_url: str, name: str = "") -> Any:
            raise ChartUnavailable(f"{repo_url}: connection refused")

        def chart(self, repo_url: str, name: str, version: str) -> Any:
            raise ChartUnavailable(f"{repo_url}: connection refused")

    spec = spec_of(fleet)
    with pytest.raises(ChartUnavailable):
        gate(fleet, Down()).judge(journal(spec), spec, deployed(spec))


def test_a_rotation_pushed_with_a_values_change_is_denied_at_apply_time(fleet: Path) -> None:
    """Review bypassed: credentials.yaml's rotation raised and a value changed in one push.
    The gate reads credentials.yaml at the merge's base commit (spec_at) and denies it."""
    before = spec_of(fleet)
    edit(fleet, "credentials.yaml", "rotation: 0", "rotation: 1")
    rotated_only = spec_of(fleet)
    edit(fleet, "values.yaml", "replicaCount: 1", "replicaCount: 2")
    both = spec_of(fleet)
    seen: list[tuple[str, str]] = []

    def spec_at(sha: str, name: str) -> ClusterSpec:
        seen.append((sha, name))
        return before

    judge = ApplyGate(
        LocalChartSource([CHARTS]),
        builtin_documents=builtin_policy_documents(),
        policies_at=lambda _sha: policy_documents(DirectoryTree(fleet)),
        spec_at=spec_at,
    )
    live = deployed(before, chart="1.8.7")
    mixed = replace(journal(both, OperationKind.ROLLOUT_ONLY), base_sha="b" * 40)
    judged = judge.judge(mixed, both, live)
    assert judged.status is OperationStatus.BLOCKED
    assert "ROTATION-ALONE" in judged.failure
    assert "clusters/staging/credentials.yaml" in judged.failure
    assert seen == [("b" * 40, "staging")]
    alone = replace(journal(rotated_only, OperationKind.ROTATION), base_sha="b" * 40)
    assert judge.judge(alone, rotated_only, live).status is OperationStatus.RUNNING
    # Without the base commit's credentials nothing rotates: the gate judges as before.
    assert gate(fleet).judge(mixed, both, live).status is OperationStatus.RUNNING
