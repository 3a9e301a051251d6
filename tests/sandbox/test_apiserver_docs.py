"""The Python examples in docs/sandbox.md's "Kubernetes API emulator" section run."""

from __future__ import annotations

import re
from pathlib import Path

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
