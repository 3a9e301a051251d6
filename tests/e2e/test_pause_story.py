"""Pause, resume and approve in the sandbox (issue 14, docs/pause.md): real helm 4, kubectl,
git over HTTP, the API emulator and controller simulator, the local GitHub.

During a batched rollout of two pools (three batches each):

- a comment ``/gitopsbot pause`` from an account without write access is ignored, with a
  reply saying so, and recorded;
- ``/gitopsbot pause shared`` from a writer closes the pool's switch (the controller stops
  after the batch in flight), is answered and recorded; ``/gitopsbot resume`` lets it go on;
- ``paused: true`` pushed to rollout.yaml while the next pool rolls holds it without
  queueing an operation of its own; the commit that removes it resumes, and the upgrade
  succeeds, every hypervisor on the new image;

and, in a second story, ``requireApproval: canary-batch`` added to the proposal before its
merge: the rollout waits after the verified canary batch, the pull request shows the wait,
and ``/gitopsbot approve`` lets it finish."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from gitopsbot.bot.journal_store import JournalStore
from gitopsbot.core.forge.forge_types import find_marker
from gitopsbot.core.records.journal import Journal, OperationKind, OperationStatus, PhaseState
from gitopsbot.sandbox.story import StoryWorld, git
from gitopsbot.sandbox.story_bot import BotRunner
from gitopsbot.sandbox.story_fleet import CLUSTER
from gitopsbot.sandbox.story_waits import finished_op, wait_for
from tests.e2e.conftest import NEW_IMAGE, pool_policies

pytestmark = pytest.mark.slow

ROLLOUT = f"clusters/{CLUSTER}/rollout.yaml"


def _replies(world: StoryWorld, number: int) -> dict[int, str]:
    """Comment id → the bot's reply to it on request ``number``."""
    assert world.forge is not None
    out: dict[int, str] = {}
    with world.forge.lock:
        for c in world.forge.comments.values():
            tag = find_marker(c.body)
            if c.number == number and tag is not None and tag.marker.startswith("cmd-"):
                out[int(tag.marker[4:])] = c.body
    return out


def _running(op: str, check: Callable[[Journal], bool]) -> Callable[[JournalStore], Journal | None]:
    def found(store: JournalStore) -> Journal | None:
        j = store.current(CLUSTER)
        return j if j is not None and j.op_id == op and check(j) else None

    return found


def _switch(world: StoryWorld, pool: str) -> bool:
    return bool(pool_policies(world)[pool].get("autoUpdateHypervisor"))


def _progress(world: StoryWorld, pool: str) -> int:
    gp = world.store().get("tensor-fusion.ai/v1", "GPUPool", None, f"tensor-fusion-{pool}")
    assert gp is not None
    status = (gp.get("status") or {}).get("componentStatus") or {}
    return int(status.get("hypervisorUpdateProgress") or 0)


def _edit_rollout(world: StoryWorld, edit: Callable[[str], str], message: str) -> str:
    """A person commits an edit of rollout.yaml to main and pushes it."""
    h = world.human
    git("fetch", "--quiet", "origin", cwd=h)
    git("checkout", "--quiet", "main", cwd=h)
    git("merge", "--quiet", "--ff-only", "origin/main", cwd=h)
    path = h / ROLLOUT
    path.write_text(edit(path.read_text()))
    git("commit", "--quiet", "-am", message, cwd=h)
    git("push", "--quiet", "origin", "main", cwd=h)
    return git("rev-parse", "HEAD", cwd=h).strip()


def test_pause_and_resume_from_comments_and_from_git_during_a_batched_rollout(
    make_world: Callable[..., StoryWorld], make_bot: Callable[..., BotRunner]
) -> None:
    world = make_world(
        window_lead_seconds=None,
        batch_percentage=34,  # three batches per pool of three nodes
        batch_interval="4s",
        hypervisor_ready_delay=1.0,
    )
    assert world.forge is not None
    world.forge.grant("alice", "write")
    world.forge.grant("mallory", "read")
    make_bot(world)
    proposal = world.propose()
    number = proposal.number
    sha = world.merge(number)
    op = f"{CLUSTER}-{sha[:12]}"
    shared = "pool/shared/hypervisor"
    wait_for(
        world,
        _running(op, lambda j: j.phase(shared).progress > 0 and j.phase(shared).progress < 100),
        what="shared's first batch",
        timeout=120,
    )

    # A reader's pause: ignored, with a reply; the rollout goes on.
    nope = world.forge.say(number, "mallory", "/gitopsbot pause")
    j = wait_for(
        world, _running(op, lambda j: j.comment_cursor >= nope.id), what="mallory", timeout=60
    )
    assert j.holds == {} and "ignored" in j.commands[-1]
    assert _replies(world, number)[nope.id].startswith(
        "@mallory: `/gitopsbot pause` ignored: the forge says they may not write"
    )

    # A writer's pause of pool shared: the switch closes, the pool stops after its batch.
    said = world.forge.say(number, "alice", "please hold\n/gitopsbot pause shared")
    j = wait_for(
        world,
        _running(op, lambda j: j.phase(shared).paused_by.startswith("paused by @alice")),
        what="the comment's pause",
        timeout=60,
    )
    assert j.phase(shared).state is PhaseState.PAUSED
    assert j.holds == {"shared": f"paused by @alice (comment {said.id})"}
    assert "@alice: paused pool `shared`" in _replies(world, number)[said.id]
    assert not _switch(world, "shared")
    time.sleep(6)  # the batch in flight (interval 4s, readiness 1s) ends
    held_at = _progress(world, "shared")
    time.sleep(6)
    assert _progress(world, "shared") == held_at < 100  # nothing more while paused
    assert not _switch(world, "shared")

    # Resumed from a comment: the pool goes on and finishes.
    back = world.forge.say(number, "alice", "/gitopsbot resume")
    j = wait_for(
        world,
        _running(op, lambda j: j.comment_cursor >= back.id and j.step(shared).state.finished),
        what="the resume",
        timeout=120,
    )
    assert j.holds == {} and _replies(world, number)[back.id].startswith("@alice: resumed")

    # Paused in Git while pool-2 rolls: held, no operation of its own; resumed in Git.
    second = "pool/pool-2/hypervisor"
    wait_for(world, _running(op, lambda j: j.phase(second).progress > 0), what="pool-2", timeout=60)
    pause_sha = _edit_rollout(world, lambda t: "paused: true\n" + t, "pause the rollout")
    j = wait_for(
        world,
        _running(op, lambda j: j.phase(second).paused_by.startswith("paused in Git")),
        what="the pause in Git",
        timeout=60,
    )
    assert pause_sha[:12] in j.phase(second).paused_by
    assert not _switch(world, "pool-2")
    reader_store = wait_for(
        world,
        lambda s: s.current(CLUSTER) if s.seen(CLUSTER) == pause_sha else None,
        what="the pause commit seen",
        timeout=30,
    )
    assert reader_store.op_id == op
    _edit_rollout(world, lambda t: t.replace("paused: true\n", "", 1), "resume the rollout")
    done = wait_for(world, finished_op(OperationKind.UPGRADE), what="the upgrade", timeout=180)
    assert done.op_id == op and done.status is OperationStatus.SUCCEEDED, done.failure
    assert len(done.commands) == 3
    images = world.hypervisor_images()
    assert images == {node: [NEW_IMAGE] for node in images}
    assert not _switch(world, "shared") and not _switch(world, "pool-2")
    log = world.state_log()
    assert "(paused in Git" in log and "(resumed)" in log and "@alice /gitopsbot pause" in log


def test_approval_after_the_canary_batch(
    make_world: Callable[..., StoryWorld], make_bot: Callable[..., BotRunner]
) -> None:
    # Batches 6s apart: the bot closes the switch after the canary batch, before the next.
    world = make_world(window_lead_seconds=None, batch_percentage=34, batch_interval="6s")
    assert world.forge is not None
    world.forge.grant("alice", "write")
    make_bot(world)
    proposal = world.propose()
    number = proposal.number
    # The person adds the approval gate to the proposal before merging it.
    h = world.human
    git("fetch", "--quiet", "origin", cwd=h)
    git("checkout", "--quiet", "-B", "gate", f"origin/{proposal.branch}", cwd=h)
    path = h / ROLLOUT
    path.write_text(
        path.read_text().replace(
            "  shared:\n",
            "  shared:\n    canaryBatchPercentage: 34\n    requireApproval: canary-batch\n",
        )
    )
    git("commit", "--quiet", "-am", "approval after the canary batch", cwd=h)
    git("push", "--quiet", "origin", f"gate:{proposal.branch}", cwd=h)
    sha = world.merge(number)
    op = f"{CLUSTER}-{sha[:12]}"
    shared = "pool/shared/hypervisor"
    j = wait_for(
        world,
        _running(op, lambda j: "awaiting approval" in j.phase(shared).paused_by),
        what="the wait for approval",
        timeout=120,
    )
    assert j.phase(shared).canary_done and not _switch(world, "shared")
    assert "passed verification" in j.step(shared).detail
    wait_for(
        world,
        lambda s: s.current(CLUSTER) if _shows_wait(world, number) else None,
        what="the wait on the pull request",
        timeout=30,
    )
    ok = world.forge.say(number, "alice", "/gitopsbot approve")
    done = wait_for(world, finished_op(OperationKind.UPGRADE), what="the upgrade", timeout=180)
    assert done.status is OperationStatus.SUCCEEDED, done.failure
    assert done.approved == (shared,)
    assert "approved; going on" in _replies(world, number)[ok.id]


def _shows_wait(world: StoryWorld, number: int) -> bool:
    assert world.forge is not None
    with world.forge.lock:
        return any(
            "awaiting approval" in c.body and c.author == "gitopsbot"
            for c in world.forge.comments.values()
            if c.number == number
        )
