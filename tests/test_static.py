"""Static checks run as tests: ruff (lint and format) and mypy --strict on gitopsbot/."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, check=False)


@pytest.mark.skipif(
    shutil.which("ruff") is None, reason="ruff not installed (pip install -e .[dev])"
)
def test_ruff_lint() -> None:
    proc = _run("ruff", "check", "gitopsbot", "tests", "benchmarks")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_mypy_strict() -> None:
    proc = _run(sys.executable, "-m", "mypy", "--no-error-summary")
    assert proc.returncode == 0, proc.stdout + proc.stderr
