"""Window-fit admission in the sandbox on a time-scaled clock (issue 18): real helm 4, git
over HTTP, the API emulator and controller simulator, the local GitHub; the bot's clock runs
60 times as fast as real time (sandbox/scaled_clock.py), so a minute of its time is a real
second while the controller simulator's batches take real seconds (minutes to the bot).

Pool shared (three nodes, 34%: two nodes, one, then the controller's last step) has a
window of 3 minutes every 5 (cron ``*/5 * * * *``). A batch takes about two real seconds,
two minutes to the bot: after a batch that opened with a window the next, expected as long
as the one measured, does not fit in what is left (and the first batch, wherever it opens,
either ends inside its window or is cut by the window's end, so the second opens with the
next window). The bot closes the switch at that boundary, records why (``batches.waiting``:
"does not fit in the … left of the maintenance window"), waits for the next window's
opening and goes on there; the upgrade succeeds.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime, timedelta

import pytest

from gitopsbot.bot.pass_base import PassResult
from gitopsbot.core.records.journal import Journal, OperationKind, OperationStatus, PhaseState
from gitopsbot.sandbox.scaled_clock import ScaledClock
from gitopsbot.sandbox.story import StoryWorld, git
from gitopsbot.sandbox.story_bot import BotRunner
from gitopsbot.sandbox.story_fleet import CLUSTER
from gitopsbot.sandbox.story_waits import finished_op, wait_for
from tests.e2e.conftest import (  # noqa: F401  (_needs_git, _uses_binaries: autouse)
    NEW_IMAGE,
    _needs_git,
    _uses_binaries,
    pool_policies,
    stop_within,
)

pytestmark = pytest.mark.slow

ROLLOUT = f"clusters/{CLUSTER}/rollout.yaml"
STEP = "pool/shared/hypervisor"
SCALE = 60
WINDOW = """\
    maintenanceWindow:
      cron: "*/5 * * * *"
      duration: 3m
      timeZone: UTC
"""
DOES_NOT_FIT = re.compile(
    r"^next batch \(~\S+, measured\) does not fit in the \S+ left of the maintenance window$"
)


class StoryScaledClock(ScaledClock):
    """BotRunner subtracts its world clock's ``offset`` from the bot's "come back at";
    the scaled bot below maps it to real time instead."""

    offset = timedelta(0)


class ScaledBot(BotRunner):
    """The story's bot, its "come back at" (bot time) turned into real time for the
    scheduler, which runs on real time."""

    def _pass(self, cluster: str, *, fetch: bool = True) -> PassResult:
        result = super()._pass(cluster, fetch=fetch)
        clock = self.world.clock
        if result.next_at is None or not isinstance(clock, ScaledClock):
            return result
        return replace(result, next_at=clock.to_real(result.next_at))


def merge_with_window(world: StoryWorld) -> str:
    """The proposal with pool shared's window added, and the deadlines (bot time) made long
    enough for a scaled clock, by a person before the merge; returns the operation id."""
    proposal = world.propose()
    h = world.human
    git("fetch", "--quiet", "origin", cwd=h)
    git("checkout", "--quiet", "-B", "window", f"origin/{proposal.branch}", cwd=h)
    path = h / ROLLOUT
    text = path.read_text().replace("  shared:\n", "  shared:\n" + WINDOW, 1)
    text = text.replace("controllerReadyTimeout: 60s", "controllerReadyTimeout: 6h")
    text = text.replace("maxDuration: 30m", "maxDuration: 24h")
    text = text.replace("stallTimeout: 10m", "stallTimeout: 6h")
    path.write_text(text)
    git("commit", "--quiet", "-am", "a maintenance window for pool shared", cwd=h)
    git("push", "--quiet", "origin", f"window:{proposal.branch}", cwd=h)
    sha = world.merge(proposal.number)
    return f"{CLUSTER}-{sha[:12]}"


def opening(t: datetime) -> bool:
    return t.minute % 5 == 0 and t.second == 0 and t.microsecond == 0


def next_opening(t: datetime) -> datetime:
    """The window's first opening after ``t`` (``*/5 * * * *``)."""
    start = t.replace(second=0, microsecond=0) - timedelta(minutes=t.minute % 5)
    return start + timedelta(minutes=5)


def test_a_batch_that_does_not_fit_waits_for_the_next_window(
    make_world: Callable[..., StoryWorld],
) -> None:
    t0 = time.monotonic()
    world = make_world(
        pools=1,
        window_lead_seconds=None,
        batch_percentage=34,  # two nodes, then one, then the last step (no node)
        batch_interval="1s",
        hypervisor_ready_delay=1.5,  # a batch: ~2 real seconds, ~2 minutes to the bot
        on_failure="halt",
        poll_interval="2s",
    )
    world.clock = StoryScaledClock(SCALE)  # type: ignore[assignment]
    waits: list[tuple[Journal, PassResult, bool]] = []
    phases: list[Journal] = []

    def on_pass(result: PassResult, journal: Journal | None) -> None:
        if journal is None or not any(p.step == STEP for p in journal.phases):
            return
        phases.append(journal)
        waiting = journal.phase(STEP).batches.waiting
        if DOES_NOT_FIT.match(waiting):
            switch = bool(pool_policies(world)["shared"].get("autoUpdateHypervisor"))
            waits.append((journal, result, switch))

    bot = ScaledBot(world, on_pass=on_pass).start()
    try:
        op = merge_with_window(world)
        done = wait_for(world, finished_op(OperationKind.UPGRADE), what="the upgrade", timeout=120)
    finally:
        stop_within(bot.stop, "the bot")
    assert done.op_id == op and done.status is OperationStatus.SUCCEEDED, done.failure
    images = world.hypervisor_images()
    assert all(got == [NEW_IMAGE] for got in images.values()), images

    # At a boundary inside the window the bot closed the switch and waited, saying why.
    assert waits, [j.phase(STEP).batches.waiting for j in phases]
    journal, _, switch_open = waits[0]
    phase = journal.phase(STEP)
    assert phase.state is PhaseState.BETWEEN and 0 < phase.progress < 100
    assert phase.batches.seconds, phase.batches  # measured: the batch it came after
    assert not switch_open
    # It waited for the next window's opening (bot time) ...
    until = [r.next_at for _, r, _ in waits if r.next_at is not None]
    assert any(opening(t) for t in until), until
    # ... the first opening after the boundary it stopped at (a later wait's opening is a
    # later boundary's: under load the first wait's pass may come back sooner, to look) ...
    boundary = phase.batches.started_at
    assert boundary is not None, phase.batches
    resumed_at = next_opening(boundary)
    # ... and the next batch started there.
    nxt = [
        p
        for p in (j.phase(STEP) for j in phases)
        if p.batches.from_progress == phase.progress and p.state is PhaseState.ROLLING
    ]
    assert nxt, [(p.state, p.progress) for p in (j.phase(STEP) for j in phases)]
    started = nxt[0].batches.started_at
    assert started is not None and resumed_at <= started < resumed_at + timedelta(minutes=3)
    assert done.phase(STEP).state is PhaseState.DONE
    print(f"window fit: {time.monotonic() - t0:.1f}s, waits: {phase.batches.waiting}")
