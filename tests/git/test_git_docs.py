"""docs/git.md's example runs as written."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[2] / "docs" / "git.md"


def test_docs_example_runs(capsys: pytest.CaptureFixture[str]) -> None:
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.DOTALL)
    assert blocks, "docs/git.md has no python example"
    for block in blocks:
        exec(compile(block, str(DOC), "exec"), {})
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "b'version: 1.0.0\\n'"
    assert re.fullmatch(r"[0-9a-f]{40}", out[1])
