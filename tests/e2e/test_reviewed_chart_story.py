"""The reviewed chart is the applied chart (#30), end to end with real helm.

A proposal for 1.8.0 → 1.8.7 gets its plan comment (the archive's and the rendered
manifests' digests shown, recorded on the state branch); then 1.8.7 is re-published under the
same version with other bytes, and the request is merged. The bot fetches the merged version
once, finds another archive than the plan saw, and blocks the operation naming both digests
and where the chart came from: Helm stays at 1.8.0, no hypervisor moves.
"""

from __future__ import annotations

import hashlib
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from gitopsbot.core.records.journal import Journal, OperationStatus
from gitopsbot.sandbox.chartrepo import republish
from gitopsbot.sandbox.environment import DEFAULT_CHARTS
from gitopsbot.sandbox.story import StoryWorld
from gitopsbot.sandbox.story_bot import BotRunner
from gitopsbot.sandbox.story_fleet import CLUSTER
from gitopsbot.sandbox.story_waits import wait_for
from tests.e2e.conftest import OLD_IMAGE, helm_history

pytestmark = pytest.mark.slow


def _blocked(store: object) -> Journal | None:
    j = store.current(CLUSTER)  # type: ignore[attr-defined]
    return j if j is not None and j.status is OperationStatus.BLOCKED else None


def test_a_chart_republished_between_plan_and_merge_is_blocked_with_both_digests(
    tmp_path: Path,
    make_world: Callable[..., StoryWorld],
    make_bot: Callable[..., BotRunner],
) -> None:
    charts = tmp_path / "charts"
    shutil.copytree(DEFAULT_CHARTS, charts)
    reviewed = (
        "sha256:" + hashlib.sha256((charts / "tensor-fusion-1.8.7.tgz").read_bytes()).hexdigest()
    )
    world = make_world(charts_dir=charts, window_lead_seconds=None)
    make_bot(world)
    proposal = world.propose()  # the plan comment, as `gitopsbot comment` posts it

    assert world.forge is not None
    with world.forge.lock:
        comments = [c.body for c in world.forge.comments.values() if c.number == proposal.number]
    plan = next(c for c in comments if "gitopsbot plan" in c)
    assert f"chart archive: `{reviewed}`" in plan
    assert "rendered manifests: `sha256:" in plan

    republished = "sha256:" + republish(charts, "tensor-fusion", "1.8.7", "re-published")
    assert republished != reviewed
    world.merge(proposal.number)

    journal = wait_for(world, _blocked, what="the operation blocked", timeout=120)
    assert reviewed in journal.failure and republished in journal.failure
    assert world.chart_repo_url in journal.failure  # where the chart came from
    assert "re-published" in journal.failure
    assert f"pull request #{proposal.number}" in journal.failure  # the recorded plan
    assert journal.steps == () or all(s.started_at is None for s in journal.steps)
    history = helm_history(world)
    assert [h["chart"] for h in history] == ["tensor-fusion-1.8.0"]  # nothing applied
    images = world.hypervisor_images()
    assert images and all(imgs == [OLD_IMAGE] for imgs in images.values())
