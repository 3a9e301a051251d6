"""docs/drift.md, "Try it", run as written in one bash against a real ``gitopsbot sandbox up``
with real helm 4 and kubectl: the sandbox's own install is drift (exit 1), and a hand edit of
the pool's batch size is reported where it was made."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gitopsbot import settings

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "drift.md"

pytestmark = pytest.mark.slow


def try_it() -> str:
    text = DOC.read_text()
    section = text.split("\n## Try it\n", 1)[1].split("\n## ", 1)[0]
    (block,) = re.findall(r"^```sh\n(.*?)^```$", section, flags=re.S | re.M)
    return block


def test_try_it_runs_as_written(tmp_path: Path, binaries: dict[str, Path]) -> None:
    if shutil.which("jq") is None:
        pytest.skip("the example uses jq")
    home, cache, work = tmp_path / "home", tmp_path / "cache", tmp_path / "work"
    for d in (home, cache, work):
        d.mkdir()
    (cache / "bin").symlink_to(settings.cache_dir() / "bin")  # the pinned helm, fetched once
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "HOME": str(home),
        "GITOPSBOT_CACHE": str(cache),
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_TERMINAL_PROMPT": "0",
    }
    try:
        done = subprocess.run(
            ["bash", "--norc", "--noprofile", "-c", try_it()],
            cwd=work, env=env, capture_output=True, text=True, timeout=300, check=False,
        )  # fmt: skip
    finally:
        subprocess.run(
            [sys.executable, "-m", "gitopsbot", "sandbox", "down", "--state-dir", "sbx"],
            cwd=work, env=env, capture_output=True, timeout=60, check=False,
        )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert "sandbox: drift (" in out and "exit 1" in out, out
    assert "pool-policy: TensorFusionCluster tensor-fusion pool shared: batchPercentage" in out
    assert "TensorFusionCluster tensor-fusion pool shared: batchPercentage: 80" in out, out
