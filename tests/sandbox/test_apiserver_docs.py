"""The Python examples in docs/sandbox.md's "Kubernetes API emulator" section run."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from gitopsbot.sandbox.apiserver import ApiServer

DOC = Path(__file__).resolve().parents[2] / "docs" / "sandbox.md"


def _section() -> str:
    text = DOC.read_text()
    start = text.index("## Kubernetes API emulator")
    end = text.find("\n## ", start + 1)
    return text[start : end if end > 0 else None]


def test_python_examples_run(tmp_path: Path) -> None:
    blocks = re.findall(r"```python\n(.*?)```", _section(), re.S)
    assert len(blocks) >= 2
    first = blocks[0].replace("/tmp/sandbox-kubeconfig", str(tmp_path / "kubeconfig"))
    exec(compile(first, f"{DOC}:start", "exec"), {})
    assert (tmp_path / "kubeconfig").is_file()
    with ApiServer() as api:
        for i, block in enumerate(blocks[1:], 2):
            exec(compile(block, f"{DOC}:block{i}", "exec"), {"api": api})


def test_fault_control_shell_example_runs() -> None:
    curl = shutil.which("curl")
    if curl is None:
        pytest.skip("curl is not installed")
    block = next(b for b in re.findall(r"```sh\n(.*?)```", _section(), re.S) if "curl" in b)
    with ApiServer() as api:
        proc = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", block.replace("curl ", "curl -sf ")],
            env={"URL": api.url, "PATH": os.environ["PATH"]},
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert proc.returncode == 0, proc.stderr
        assert api.faults.rules == []  # the example ends by deleting them all
        assert '"hits"' in proc.stdout
