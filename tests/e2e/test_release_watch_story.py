"""#29 end to end: an idle cluster's release watched, not polled. After the bot's upgrade, a
person's ``helm upgrade`` (real helm, the sandbox emulator) is reported on the state branch by
the pass the watch's event runs, with the periodic look pushed out of reach (a day), so
nothing but the watch can bring it."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from datetime import timedelta

import pytest

from gitopsbot.bot import reconciler
from gitopsbot.core.records.journal import OperationKind
from gitopsbot.sandbox.story import StoryWorld
from gitopsbot.sandbox.story_bot import BotRunner
from gitopsbot.sandbox.story_fleet import CLUSTER
from gitopsbot.sandbox.story_waits import finished_op, state_reader, wait_for
from tests.e2e.conftest import NS, RELEASE

pytestmark = pytest.mark.slow
WAIT = 60.0  # seconds for the bot's pass after the event, on a loaded machine


def test_a_manual_helm_revision_while_idle_is_reported_by_the_watch(
    make_world: Callable[..., StoryWorld],
    make_bot: Callable[..., BotRunner],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Only the first look of each cluster (which starts the watch) happens on its own.
    monkeypatch.setattr(reconciler, "MANUAL_CHECK", timedelta(days=1))
    monkeypatch.setattr(reconciler, "MANUAL_CHECK_WATCHED", timedelta(days=1))
    world = make_world(window_lead_seconds=None)
    bot = make_bot(world, release_watch=True)
    world.merge(world.propose().number)
    wait_for(world, finished_op(OperationKind.UPGRADE), what="the upgrade", timeout=180)
    watches = bot.watches
    assert watches is not None
    # The watch started with the cluster's first look and saw the upgrade's own revisions; on
    # a loaded machine its stream may be (re)connecting just now: healthy once connected.
    healthy_by = time.monotonic() + WAIT
    while not watches.healthy(CLUSTER) and time.monotonic() < healthy_by:
        time.sleep(0.2)
    assert watches.healthy(CLUSTER), "the release watch never connected"
    reader = state_reader(world)
    reader.refresh()
    assert reader.manual_revision(CLUSTER) is None

    listed = world.helm("list", "--namespace", NS, "--output", "json")
    (release,) = json.loads(listed)
    version = str(release["chart"]).rsplit("-", 1)[1]
    world.helm("upgrade", RELEASE, "tensor-fusion", "--repo", world.chart_repo_url,
               "--version", version, "--namespace", NS, "--reuse-values",
               "--set", "controller.replicas=2", "--description", "break-glass by dana",
               "--force-conflicts")  # fmt: skip
    deadline = time.monotonic() + WAIT
    while True:  # the event's pass records it; nothing else looks for a day
        reader.refresh()
        found = reader.manual_revision(CLUSTER)
        # A look during helm's upgrade reads "Preparing upgrade"; the record follows helm.
        finished = found is not None and found.description != "Preparing upgrade"
        if finished or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert found is not None, "the watch's event did not bring the look"
    assert found.description == "break-glass by dana"
