"""kill × gate wait end to end (issue 28 item 3, docs/decisions.md): the bot dies while a pool
waits on an inconclusive gate between two batches, and a fresh bot (its own mirror, nothing in
memory) takes over from the state branch and the cluster.

The sandbox of tests/gates/test_gates_story.py: real helm 4, the API emulator and controller
simulator, the local GitHub, a Prometheus-compatible server on loopback; one pool of three
nodes in three batches. After the first batch Prometheus answers 503: the gate is
inconclusive, the switch stays closed and the wait is recorded (``gate inconclusive (1/5)``,
judged again ``gateRetryInterval`` later). The bot is killed there (the in-process SIGKILL of
tests/e2e/test_resume.py: nothing it still held is pushed, no further pass). After the
restart the switch is not opened early, no batch is repeated, the gate is judged again (a
query, ``(2/5)``) and not taken as passed, the wait is still shown on the pull request, no
record is written twice; once Prometheus answers again the gate passes and the rollout ends.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator

import pytest

from gitopsbot.core.records.journal import Journal, OperationKind, OperationStatus, PhaseState
from gitopsbot.sandbox.prometheus import PromServer
from gitopsbot.sandbox.story import StoryWorld, git
from gitopsbot.sandbox.story_bot import BotRunner, CrashingStore
from gitopsbot.sandbox.story_fleet import CLUSTER
from gitopsbot.sandbox.story_waits import finished_op, wait_for
from tests.e2e.conftest import (  # noqa: F401  (_needs_git, _uses_binaries: autouse)
    Watch,
    _needs_git,
    _uses_binaries,
)
from tests.gates.test_gates_story import (
    QUERY,
    STEP,
    after_first_batch,
    gates_yaml,
    merge_with_gates,
    on_new,
    queries,
    shared_switch,
    story,
)

pytestmark = pytest.mark.slow

RETRY = 8  # seconds between two judgements of an inconclusive gate: the kill comes in between


@pytest.fixture
def prom() -> Iterator[PromServer]:
    with PromServer() as server:
        yield server


def waiting_on(attempt: int) -> Callable[[object], Journal | None]:
    """The upgrade, once the state branch records the gate's ``attempt``-th inconclusive
    judgement at the first boundary."""

    def check(store: object) -> Journal | None:
        j = store.current(CLUSTER)  # type: ignore[attr-defined]
        if j is None or j.kind is not OperationKind.UPGRADE:
            return None
        if not any(p.step == STEP for p in j.phases):
            return None
        waiting = j.phase(STEP).batches.waiting
        return j if waiting.startswith(f"gate inconclusive ({attempt}/5): error-rate:") else None

    return check


def state_log(world: StoryWorld) -> list[str]:
    """The state branch's commit subjects, oldest first."""
    h = world.human
    git("fetch", "--quiet", "origin", "+gitopsbot/state:refs/remotes/origin/state", cwd=h)
    return git("log", "--reverse", "--format=%s", "origin/state", cwd=h).splitlines()


def comments(world: StoryWorld, number: int) -> str:
    assert world.forge is not None
    return "\n".join(c.body for c in list(world.forge.comments.values()) if c.number == number)


def test_a_bot_killed_during_a_gate_wait_judges_the_gate_again_after_the_restart(
    make_world: Callable[..., StoryWorld],
    make_bot: Callable[..., BotRunner],
    prom: PromServer,
) -> None:
    prom.vector(QUERY, ({"job": "tf"}, 0.01))
    world = story(make_world, batch_interval="3s")
    watch = Watch()
    bots: list[BotRunner] = []

    def down_then_killed(j: Journal) -> None:
        prom.error(QUERY, "unavailable", "overloaded", status=503)
        if j.phase(STEP).batches.waiting.startswith("gate inconclusive (1/5)"):
            # Killed in the wait, right after recording it: no further pass, nothing more
            # recorded (its next record would die with it).
            store = bots[0].store
            assert isinstance(store, CrashingStore)
            store.crashed.set()
            bots[0].stopped.set()

    first = make_bot(
        world,
        name="bot-1",
        on_pass=after_first_batch(watch, down_then_killed),
        crash_on=lambda _m: False,
    )
    bots.append(first)
    gates = gates_yaml(retries=5).replace("gateRetryInterval: 1s", f"gateRetryInterval: {RETRY}s")
    op = merge_with_gates(world, prom, gates)

    # The pool waits on the inconclusive gate, the switch closed after the first batch.
    assert isinstance(first.store, CrashingStore)
    assert first.store.crashed.wait(120), "the bot never waited on the gate"
    first.stop()
    dead = wait_for(world, waiting_on(1), what="the first inconclusive judgement", timeout=30)
    asked = queries(prom)
    phase = dead.phase(STEP)
    assert dead.op_id == op and phase.state is PhaseState.BETWEEN, phase
    assert phase.batches.gate_attempts == 1 and phase.batches.gates_retry_at is not None
    progress = phase.progress
    assert 0 < progress < 100
    assert not shared_switch(world)
    updated = on_new(world.hypervisor_images())
    assert len(updated) == 1, updated
    assert dead.pr_number is not None

    # A fresh bot, Prometheus still down: the gate is judged again, inconclusive again; the
    # switch stays closed and no node more is taken.
    second = Watch()
    make_bot(world, name="bot-2", on_pass=second)
    _, shown = second.until("the restarted bot's first pass", lambda _r, j: j is not None)
    assert shown is not None and shown.phase(STEP).batches.waiting == phase.batches.waiting
    assert phase.batches.waiting in comments(world, dead.pr_number)  # still shown
    again = wait_for(world, waiting_on(2), what="the gate judged again", timeout=60)
    assert queries(prom) > asked  # asked Prometheus again, not taken as passed
    assert again.phase(STEP).progress == progress
    assert again.phase(STEP).state is PhaseState.BETWEEN
    assert not shared_switch(world)
    assert on_new(world.hypervisor_images()) == updated

    # Prometheus answers again: the gate passes and the rollout goes on to the end.
    prom.vector(QUERY, ({"job": "tf"}, 0.02))
    done = wait_for(world, finished_op(OperationKind.UPGRADE), what="the upgrade", timeout=120)
    assert done.op_id == op and done.status is OperationStatus.SUCCEEDED, done.failure
    images = world.hypervisor_images()
    assert on_new(images) == set(images)
    log = state_log(world)
    opened = [s for s in log if re.search(rf"{STEP} open-switch \d+%", s)]
    at = [re.search(rf"{STEP} open-switch (\d+)%", s).group(1) for s in opened]  # type: ignore[union-attr]
    assert len(at) == len(set(at)) and at[:3] == ["0", "33", "66"], log  # none repeated
    for attempt in (1, 2):
        said = [s for s in log if f"gate inconclusive ({attempt}/5)" in s]
        assert len(said) == 1, log  # each judgement recorded once
    reopened = next(i for i, s in enumerate(log) if f"{STEP} open-switch {progress}%" in s)
    retried = next(i for i, s in enumerate(log) if "gate inconclusive (2/5)" in s)
    assert retried < reopened, log  # the next batch opened only after the restart judged
    assert len([s for s in log if f"upgrade {op} started" in s]) == 1, log
