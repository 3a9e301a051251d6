"""docs/proposals.md's offline walkthrough runs as written."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "proposals.md"


@pytest.mark.slow
def test_offline_walkthrough_runs(tmp_path: Path) -> None:
    text = DOC.read_text()
    section = text.split("## Try it offline", 1)[1]
    script = re.search(r"```sh\n(.*?)```", section, re.DOTALL)
    assert script is not None, "docs/proposals.md: no sh block under 'Try it offline'"
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        "TMPDIR": str(tmp_path),
        "GIT_CONFIG_GLOBAL": os.devnull,
    }
    env.pop("GITOPSBOT_CHARTS", None)
    done = subprocess.run(
        ["bash", "-c", script.group(1)], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "staging: 1.8.7 #" in done.stdout and "opened" in done.stdout
