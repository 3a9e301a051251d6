"""The issue-18 YAML examples of docs/rollout-policy.md, docs/rollout-gates.md,
docs/gpu-canary.md and docs/workload-awareness.md load in the example fleet, and the settings
they show reach the policy as written."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest

from gitopsbot.core.fleet.model import Share
from gitopsbot.fleetrepo import load_fleet
from tests.fleet.fleet_testing import MemoryTree

DOCS = Path(__file__).resolve().parents[2] / "docs"
BLOCK = re.compile(r"```yaml\n(.*?)```", re.S)
STAGING = "clusters/staging/"


def _blocks(doc: str) -> list[str]:
    return BLOCK.findall((DOCS / doc).read_text())


def _section(doc: str, title: str) -> str:
    return (DOCS / doc).read_text().split(title, 1)[1].split("\n## ", 1)[0]


def test_rollout_policy_complete_example(tree_with: Callable[..., MemoryTree]) -> None:
    (block,) = BLOCK.findall(_section("rollout-policy.md", "## Gates, budgets and admission"))
    fleet = load_fleet(tree_with({STAGING + "rollout.yaml": block}))
    inference, training = fleet.clusters["staging"].rollout.pools
    assert inference.max_unavailable == Share(2) and inference.window_fit
    assert [g.name for g in inference.gates] == [
        "xid-errors",
        "no-critical-alerts",
        "nodes-ready",
        "allocation",
    ]
    assert (inference.gate_retries, inference.gate_retry_interval_seconds) == (3, 60)
    assert inference.workloads is not None and inference.workloads.max_tenant_share_percent == 25
    assert training.max_unavailable == Share(25, percent=True) and not training.window_fit


@pytest.mark.parametrize(
    ("doc", "path", "marker"),
    [
        ("rollout-gates.md", "rollout.yaml", "gates:"),
        ("workload-awareness.md", "rollout.yaml", "waitForWorkloads:"),
        ("gpu-canary.md", "canary-smoke.yaml", "manifest:"),
        ("rollout-gates.md", "../../gitopsbot.yaml", "clearedVersions:"),
        ("gpu-canary.md", "../../gitopsbot.yaml", "clearedVersions:"),
    ],
)
def test_doc_examples_load(
    doc: str, path: str, marker: str, tree_with: Callable[..., MemoryTree]
) -> None:
    blocks = [b for b in _blocks(doc) if marker in b]
    if path == "rollout.yaml":  # not the journal excerpts, which hold gates: too
        blocks = [b for b in blocks if b.startswith(("pools:", "prometheus:"))]
    assert blocks, (doc, marker)
    target = "gitopsbot.yaml" if path.startswith("../") else STAGING + path
    for block in blocks:
        # The examples name a pool of their own: put it in the example cluster's file.
        load_fleet(tree_with({target: block.replace("gpu-a:", "inference:")}))
