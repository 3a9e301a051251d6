"""The Gantt charts gitopsbot writes into pull request comments, read by Mermaid itself
(tests/mermaid: the pinned mermaid package in jsdom under node, as `.ci/run` installs it):
each parses, and each task starts and ends where core.gantt meant it to (Mermaid reads a
task's start and end by the chart's dateFormat, and once read seconds as milliseconds).

Without node and `npm ci --prefix tests/mermaid` the module is skipped, unless
GITOPSBOT_MERMAID=require (CI), when that is a failure."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from gitopsbot.core.planning import gantt
from tests.core.test_gantt import body
from tests.test_live_view import journal_at

HERE = Path(__file__).resolve().parents[1] / "mermaid"
GOLDEN = Path(__file__).resolve().parent / "golden"
READY = shutil.which("node") is not None and (HERE / "node_modules" / "mermaid").is_dir()

if not READY:
    if os.environ.get("GITOPSBOT_MERMAID") == "require":
        raise RuntimeError("GITOPSBOT_MERMAID=require: run `npm ci --prefix tests/mermaid`")
    pytest.skip("node or tests/mermaid/node_modules missing", allow_module_level=True)


def mermaid(charts: list[str]) -> list[Any]:
    done = subprocess.run(
        ["node", str(HERE / "check.mjs")],
        input=json.dumps(charts),
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    result: list[Any] = json.loads(done.stdout)
    return result


def blocks(text: str) -> list[str]:
    return re.findall(r"```mermaid\n(.*?)```", text, re.S)


def meant(chart: str) -> list[tuple[str, int, int]]:
    """Each task's name, start and end as core.gantt wrote them (read back in seconds)."""
    out = []
    for line in body(f"```mermaid\n{chart}```"):
        m = re.match(r"(.+?) :(?:[a-z]+, )*(\d+), (\d+)$", line)
        if m:
            out.append((m[1].strip(), int(m[2]), int(m[3])))
    return out


def charts() -> list[str]:
    found = [c for f in sorted(GOLDEN.glob("*.md")) for c in blocks(f.read_text())]
    t0 = datetime(2026, 12, 4, 2, 0, tzinfo=UTC)
    for progress in (0, 50, 100):
        now = t0 + timedelta(seconds=90)
        found += blocks(gantt.actual(journal_at(progress, t0), now))
    return found


def test_every_chart_parses_and_each_task_is_where_it_was_meant() -> None:
    written = charts()
    assert len(written) >= 5
    for chart, resolved in zip(written, mermaid(written), strict=True):
        assert not isinstance(resolved, dict), f"Mermaid rejects:\n{chart}\n{resolved}"
        expected = meant(chart)
        assert [t["task"] for t in resolved] == [name for name, _, _ in expected], chart
        for task, (name, start, end) in zip(resolved, expected, strict=True):
            assert (task["start"], task["end"]) == (start * 1000, end * 1000), (name, chart)


def test_mermaid_says_so_when_a_chart_is_wrong() -> None:
    """The check can fail: a task line Mermaid cannot read is reported."""
    [resolved] = mermaid(["gantt\n    dateFormat x\n    a task :notadate, alsonot\n"])
    assert isinstance(resolved, dict) and resolved["error"]
