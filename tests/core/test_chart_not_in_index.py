"""A chart version the repository does not have is a verdict, not an error: `plan` prints a
plan whose CHART-NOT-IN-INDEX deny is located at ``chart.version`` in release.yaml and names
the chart source actually read; its images, CRDs and values sections say the chart could not
be read; `plan --check` and `validate` exit 1. An unreachable repository stays an error
(tests/core/test_cli_plan.py::test_plan_errors)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from gitopsbot.adapters.localfiles import DirectoryTree
from gitopsbot.cli import main
from gitopsbot.core.planning.plan import make_plan
from gitopsbot.core.policy import Decision, Outcome, Rule
from gitopsbot.fleetrepo import load_cluster
from tests.core.plan_builders import ROOT

EXAMPLE = ROOT / "examples" / "fleet"
CHARTS = ROOT / "examples" / "charts" / "repo"
MISSING = "1.9.9"


@pytest.fixture
def fleet(tmp_path: Path) -> tuple[Path, int]:
    """examples/fleet with staging asking for a chart version nobody publishes; the line."""
    if not (EXAMPLE / "clusters" / "staging").is_dir() or not CHARTS.is_dir():
        pytest.skip("examples/fleet or examples/charts/repo is not there yet")
    root = tmp_path / "fleet"
    shutil.copytree(EXAMPLE, root)
    release = root / "clusters" / "staging" / "release.yaml"
    lines = release.read_text().splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("  version: "))
    lines[at] = f"  version: {MISSING}"
    release.write_text("\n".join(lines) + "\n")
    return root, at + 1


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_plan_gives_a_denied_plan_not_an_error(
    fleet: tuple[Path, int], capsys: pytest.CaptureFixture[str]
) -> None:
    root, line = fleet
    args = ("plan", "--cluster", "staging", "--fleet", str(root), "--chart-dir", str(CHARTS))
    code, out, err = cli(capsys, *args)
    assert code == 0, err  # a plan was printed
    assert "⛔ denied" in out and "`CHART-NOT-IN-INDEX chart-version-published`" in out
    assert f"chart tensor-fusion {MISSING} is not in {CHARTS}" in out
    assert f"clusters/staging/release.yaml:{line}" in out
    for section in ("### Images", "### CRDs", "### Values"):
        body = out.split(section, 1)[1].split("###", 1)[0]
        assert "The target chart could not be read" in body, section
    assert "Nothing to do" not in out  # no steps, but not because nothing changed

    code, out, _ = cli(capsys, *args, "--check")
    assert code == 1 and "CHART-NOT-IN-INDEX" in out
    code, out, _ = cli(capsys, *args, "--output", "json")
    doc = json.loads(out)
    assert code == 0 and doc["decision"] == "denied" and doc["steps"] == []
    assert MISSING in doc["target_chart_problem"]
    [verdict] = [v for v in doc["verdicts"] if v["rule"] == "CHART-NOT-IN-INDEX"]
    assert verdict["blocking"] and verdict["location"].startswith(
        f"clusters/staging/release.yaml:{line}"
    )


def test_validate_locates_the_deny_at_chart_version(
    fleet: tuple[Path, int], capsys: pytest.CaptureFixture[str]
) -> None:
    root, line = fleet
    code, _, err = cli(capsys, "validate", str(root), "--chart-dir", str(CHARTS))
    assert code == 1
    [finding] = [x for x in err.splitlines() if "CHART-NOT-IN-INDEX" in x]
    assert finding.startswith(f"clusters/staging/release.yaml:{line}:")
    assert f"is not in {CHARTS} (newest: 1.8.7" in finding  # the source read, not the URL


def test_release_yaml_locations_are_recorded(fleet: tuple[Path, int]) -> None:
    root, line = fleet
    spec = load_cluster(DirectoryTree(root), "staging")
    where = spec.locations["release.yaml:chart.version"]
    assert (where.file, where.line) == ("clusters/staging/release.yaml", line)
    assert "release.yaml:release.namespace" in spec.locations


def test_make_plan_without_the_target_chart(fleet: tuple[Path, int]) -> None:
    root, _ = fleet
    spec = load_cluster(DirectoryTree(root), "staging")
    plan = make_plan(
        deployed=None,
        desired=spec,
        target_chart=None,
        deployed_chart=None,
        index=None,
        chart_problem="HTTP 404 for the archive",
    )
    assert plan.steps == () and plan.images == () and plan.chart_problem
    assert plan.versions.chart_after == MISSING and plan.versions.app_after == ""
    assert any("could not be read (HTTP 404 for the archive)" in n for n in plan.notes)


def test_listed_but_unreadable_chart_denies(
    fleet: tuple[Path, int], builtin_rules: tuple[Rule, ...]
) -> None:
    root, line = fleet
    spec = load_cluster(DirectoryTree(root), "staging")
    plan = make_plan(
        deployed=None,
        desired=spec,
        target_chart=None,
        deployed_chart=None,
        index=None,
        rules=builtin_rules,
        chart_source="/srv/charts",
        chart_problem="HTTP 404 for the archive",
    )
    [deny] = [v for v in plan.verdicts if v.rule_id == "CHART-NOT-IN-INDEX"]
    assert deny.outcome is Outcome.DENIED and plan.decision is Decision.DENIED
    assert "could not be read from /srv/charts: HTTP 404" in deny.message
    assert deny.location is not None and deny.location.line == line
