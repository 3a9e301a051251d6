"""The fleet page in a real browser, without the sandbox (docs/fleet-page.md): headless
Chromium draws both pages served over HTTP from a real state branch, and axe-core finds no
violation of WCAG 2 A/AA (contrast among them) or its best practices (landmarks, headings,
table headers) on the overview or a cluster page with holds, nodes, notes and the Gantt
chart. Skipped without chromium or tests/axe (browser.py says how CI requires them)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import httpx

from gitopsbot.core.records.batch_record import BatchRecord
from gitopsbot.core.records.node_states import NodeRecord, NodeState
from tests.executor.test_status_from_clone import bare_remote, fleet_source, seen
from tests.fleet_page import browser
from tests.fleet_page.test_fleet_page_http import T0, dump, serve
from tests.test_live_view import journal_at

__all__ = ["fleet_source"]  # a fixture, used by name


def test_both_pages_pass_axe(tmp_path: Path, fleet_source: Path) -> None:
    browser.require_browser()
    browser.require_axe()
    j = journal_at(50, T0)
    nodes = (
        NodeRecord("gpu-node-1", NodeState.VERIFIED, 1, T0),
        NodeRecord("gpu-node-2", NodeState.IN_BATCH, 2, T0),
        NodeRecord("gpu-node-3", NodeState.PENDING, 0, T0),
    )
    phase = replace(
        j.phases[0],
        nodes=nodes,
        paused_by="/gitopsbot pause by ana: checking a noisy node",
        batches=BatchRecord(waiting="gpu-smoke gate evidence pending"),
    )
    files = {
        **seen("alpha", "beta"),
        "clusters/alpha/journal.yaml": dump(replace(j, phases=(phase,))),
    }
    url = bare_remote(tmp_path, fleet_source, files=files)
    with serve(url, tmp_path) as server:
        for name, path in (("a11y-fleet", "/fleet"), ("a11y-cluster", "/fleet/clusters/alpha")):
            page = httpx.get(server.url + path, timeout=10).text
            seen_text = browser.visible_text(browser.dom(server.url + path))
            assert "alpha" in seen_text
            violations = browser.axe(page, name)
            assert violations == [], violations
    assert "checking a noisy node" in seen_text and "gpu-node-2" in seen_text
