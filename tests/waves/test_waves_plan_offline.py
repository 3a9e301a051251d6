"""`gitopsbot plan` on a fleet with waves but no state branch to read (a directory, not a
clone): the WAVES verdict fails closed for a later wave and says why; the first wave passes."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from gitopsbot.cli import main
from tests.waves.test_waves_plan import WAVES

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def fleet(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("GITOPSBOT_CACHE", str(tmp_path / "cache"))
    dest = tmp_path / "fleet"
    shutil.copytree(ROOT / "examples" / "fleet", dest)
    settings = dest / "gitopsbot.yaml"
    settings.write_text(settings.read_text() + WAVES)
    return dest


def plan(fleet: Path, cluster: str, capsys: pytest.CaptureFixture[str]) -> dict[str, object]:
    capsys.readouterr()
    args = ["plan", "--cluster", cluster, "--fleet", str(fleet), "--output", "json"]
    main([*args, "--chart-dir", str(ROOT / "examples" / "charts" / "repo")])
    out = json.loads(capsys.readouterr().out)
    assert isinstance(out, dict)
    return out


def test_a_later_wave_fails_closed_without_a_state_branch(
    fleet: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = plan(fleet, "production", capsys)
    verdicts = out["verdicts"]
    assert isinstance(verdicts, list)
    (waves,) = [v for v in verdicts if v["rule"] == "WAVES"]
    assert waves["outcome"] == "denied"
    assert "the promotion evidence cannot be read" in waves["message"]
    assert "not a Git repository" in waves["message"]
    assert "wave production waits for wave staging: staging not on 1.8.7 yet" in waves["message"]
    assert out["decision"] == "denied"


def test_the_first_wave_needs_no_evidence(fleet: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = plan(fleet, "staging", capsys)
    verdicts = out["verdicts"]
    assert isinstance(verdicts, list)
    assert not [v for v in verdicts if v["rule"] == "WAVES"]
