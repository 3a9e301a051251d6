"""docs/rotation.md's examples are real: its credentials.yaml loads in the example fleet, and
the plan's steps table and the ROTATION-ALONE line are what ``gitopsbot plan`` prints for
those changes, on a real Git copy of the example fleet."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from gitopsbot.cli import main

ROOT = Path(__file__).resolve().parents[2]
DOC = (ROOT / "docs" / "rotation.md").read_text()
CREDENTIALS = "clusters/staging/credentials.yaml"


def _git(repo: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args],
        cwd=repo, check=True, capture_output=True,
    )  # fmt: skip


def _plan(repo: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, str]:
    capsys.readouterr()
    charts = str(ROOT / "examples/charts/repo")
    argv = [
        "plan",
        "--cluster",
        "staging",
        "--fleet",
        str(repo),
        "--from",
        "HEAD~1",
        "--to",
        "HEAD",
    ]
    code = main([*argv, "--chart-dir", charts, *extra])
    return code, capsys.readouterr().out


@pytest.fixture
def fleet(tmp_path: Path) -> Path:
    repo = tmp_path / "fleet"
    shutil.copytree(ROOT / "examples/fleet", repo)
    _git(repo, "init", "-q")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "base")
    return repo


def test_the_rotation_example_plans_as_the_doc_shows(
    fleet: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    snippet = re.search(rf"<!-- file: {CREDENTIALS} -->\n```yaml\n(.*?)```", DOC, re.S)
    assert snippet is not None
    before = (fleet / CREDENTIALS).read_text()
    assert "rotation: 0" in before
    (fleet / CREDENTIALS).write_text(snippet.group(1))
    _git(fleet, "commit", "-qam", "rotate the agent token")
    code, out = _plan(fleet, capsys)
    assert code == 0
    table = DOC.split("--chart-dir examples/charts/repo`):\n\n```\n", 1)[1].split("```", 1)[0]
    assert table.strip() in out
    assert "- rotation of the agent token: the bot reads the new value" in out


def test_a_rotation_with_another_change_is_denied_as_the_doc_shows(
    fleet: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = fleet / CREDENTIALS
    path.write_text(path.read_text().replace("rotation: 0", "rotation: 1"))
    values = fleet / "clusters/staging/values.yaml"
    values.write_text(values.read_text().replace("replicaCount: 1", "replicaCount: 2", 1))
    _git(fleet, "commit", "-qam", "rotate and scale")
    code, out = _plan(fleet, capsys, "--check")
    assert code == 1
    line = DOC.split("### ROTATION-ALONE", 1)[1].split("```\n", 1)[1].split("\n", 1)[0]
    rule, _, rest = line.partition(" denied: ")
    message, _, where = rest.rpartition(" (")
    assert f"| ⛔ denied | `{rule}` | R17 | {message} (`{where.rstrip(')')}`) |" in out
