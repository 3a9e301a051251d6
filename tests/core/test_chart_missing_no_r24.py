"""Issue 17 item 7a: a chart version missing from the index is CHART-NOT-IN-INDEX, not also
R24's "dynamicConfig changed": without the target chart the plan has no steps (so no restart
to add) and the controller image change is unknown."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from gitopsbot.adapters.localfiles import DirectoryTree
from gitopsbot.cli import main
from gitopsbot.core.planning.plan import make_plan
from gitopsbot.core.policy import Rule
from gitopsbot.fleetrepo import load_cluster
from tests.core.plan_builders import ROOT

EXAMPLE = ROOT / "examples" / "fleet"
CHARTS = ROOT / "examples" / "charts" / "repo"


@pytest.fixture
def fleet(tmp_path: Path) -> Path:
    """examples/fleet with staging asking for chart 1.9.9, which the index does not have."""
    if not (EXAMPLE / "clusters" / "staging").is_dir() or not CHARTS.is_dir():
        pytest.skip("examples/fleet or examples/charts/repo is not there yet")
    root = tmp_path / "fleet"
    shutil.copytree(EXAMPLE, root)
    release = root / "clusters" / "staging" / "release.yaml"
    lines = [
        "  version: 1.9.9" if line.startswith("  version: ") else line
        for line in release.read_text().splitlines()
    ]
    release.write_text("\n".join(lines) + "\n")
    return root


def test_plan_of_a_missing_chart_has_no_r24_warning(
    fleet: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["plan", "--cluster", "staging", "--fleet", str(fleet), "--chart-dir", str(CHARTS)]
    assert main(args) == 0
    out, _ = capsys.readouterr()
    assert "CHART-NOT-IN-INDEX" in out
    assert "`R24`" not in out and "rollout restart" not in out
    assert main([*args, "--output", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    rules = {v["rule"] for v in doc["verdicts"]}
    assert "CHART-NOT-IN-INDEX" in rules and "R24" not in rules


def test_make_plan_without_the_target_chart_skips_r24(
    fleet: Path, builtin_rules: tuple[Rule, ...]
) -> None:
    spec = load_cluster(DirectoryTree(fleet), "staging")
    assert "dynamicConfig" in spec.values  # the diff from nothing touches it
    plan = make_plan(
        deployed=None,
        desired=spec,
        target_chart=None,
        deployed_chart=None,
        index=None,
        rules=builtin_rules,
        chart_problem="not in the index",
    )
    assert "CHART-NOT-IN-INDEX" in {v.rule_id for v in plan.verdicts}
    assert "R24" not in {v.rule_id for v in plan.verdicts}
