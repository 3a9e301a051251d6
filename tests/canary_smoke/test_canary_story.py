"""The GPU canary end to end in the sandbox (issue 18 part 5, docs/gpu-canary.md): real helm
4 and kubectl, git over HTTP, the API emulator and the controller simulator with its GPU-path
stand-in (sandbox/simulator/smoke.py), the local GitHub, and the bot as ``gitopsbot run``
wires it. One pool of three nodes, ``canaryBatchPercentage: 33`` (a canary batch of one node:
the controller takes ceil(33 % of 3)) and ``clusters/sandbox/canary-smoke.yaml`` in the fleet
repository; the chart goes from 1.8.0 to 1.8.7 (hypervisor 2.13.0 to 2.15.0) through the
proposer's pull request.

- passes: the smoke pod is made once, on the node the canary batch updated, succeeds and is
  deleted; the journal says the GPU canary passed; the rest of the pool rolls to the end;
- fails (the GPU path broken for the new hypervisor image): the pool halts after the canary
  batch, its reason naming the GPU canary and its evidence, the switch closed, only the canary
  node changed, onFailure ``halt`` (no rollback), ``canary-failures/1.8.7.yaml`` on the state
  branch; another cluster's change to 1.8.7 is then denied (WAVES) against that state branch,
  and a ``clearedVersions`` entry pushed to gitopsbot.yaml lets it through;
- held: an operation to 1.8.7 that is rolling when another cluster's canary marks 1.8.7
  failed closes its switch at the next batch boundary (the pause hold).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest

from gitopsbot.bot import waves
from gitopsbot.bot.canary_marks_store import record_canary_failure
from gitopsbot.bot.journal_store import JournalStore
from gitopsbot.core.records.journal import OperationKind, OperationStatus, PhaseState, StepState
from gitopsbot.core.records.node_states import NodeState
from gitopsbot.core.rollouts.canary_smoke import CanaryVerdict
from gitopsbot.core.waves import canary_marks
from gitopsbot.core.waves.canary_marks import CanaryFailure
from gitopsbot.fleetrepo import load_fleet
from gitopsbot.sandbox.story import STATE_BRANCH, StoryOptions, StoryWorld, git
from gitopsbot.sandbox.story_bot import BotRunner
from gitopsbot.sandbox.story_fleet import CLUSTER
from gitopsbot.sandbox.story_waits import finished_op, wait_baseline, wait_for
from tests.e2e.conftest import NEW_IMAGE, OLD_IMAGE, _requirements, pool_policies, stop_within

pytestmark = pytest.mark.slow

POOL = "shared"
STEP = f"pool/{POOL}/hypervisor"
VERSION = "1.8.7"
ROLLOUT = f"clusters/{CLUSTER}/rollout.yaml"
SMOKE = f"clusters/{CLUSTER}/canary-smoke.yaml"
SMOKE_YAML = """\
timeout: 60s
pools: [shared]
manifest:
  apiVersion: v1
  kind: Pod
  metadata:
    name: gpu-smoke
  spec:
    containers:
      - name: cuda
        image: nvidia/cuda:12.4.1-base-ubuntu22.04
        command: [nvidia-smi]
"""


@pytest.fixture(autouse=True)
def _needs(binaries: dict[str, Path]) -> None:
    """git with its http-backend, and the pinned helm 4 and kubectl (tests/conftest.py)."""
    reason = _requirements()
    if reason:
        pytest.skip(reason)


@pytest.fixture
def world(tmp_path: Path) -> Iterator[StoryWorld]:
    """One pool of three nodes, no windows, batches 5 s apart and the bot looking every 2 s (it
    closes the switch after the canary batch before the next starts), onFailure halt, the
    canary settings pushed to main."""
    w = StoryWorld(
        StoryOptions(
            state_dir=tmp_path / "world",
            pools=1,
            window_lead_seconds=None,
            batch_percentage=50,
            batch_interval="5s",
            poll_interval="2s",
            on_failure="halt",
        )
    ).start()
    try:
        _push(
            w,
            {
                SMOKE: lambda _old: SMOKE_YAML,
                ROLLOUT: lambda t: t.replace(
                    f"  {POOL}:\n", f"  {POOL}:\n    canaryBatchPercentage: 33\n", 1
                ),
            },
            "GPU canary: canary-smoke.yaml and a canary batch",
        )
        yield w
    finally:
        stop_within(w.stop, "the story world")


@pytest.fixture
def bot(world: StoryWorld) -> Iterator[BotRunner]:
    runner = BotRunner(world).start()
    try:
        wait_baseline(world)
        yield runner
    finally:
        if not runner.stopped.is_set():  # a test may have stopped it (a restart)
            stop_within(runner.stop, "the bot")


# -- helpers ---------------------------------------------------------------------------------


def _push(world: StoryWorld, edits: dict[str, Callable[[str], str]], message: str) -> str:
    """A person edits files on main and pushes."""
    h = world.human
    git("fetch", "--quiet", "origin", cwd=h)
    git("checkout", "--quiet", "main", cwd=h)
    git("merge", "--quiet", "--ff-only", "origin/main", cwd=h)
    for path, edit in edits.items():
        target = h / path
        target.write_text(edit(target.read_text() if target.exists() else ""))
        git("add", path, cwd=h)
    git("commit", "--quiet", "-m", message, cwd=h)
    git("push", "--quiet", "origin", "main", cwd=h)
    return git("rev-parse", "HEAD", cwd=h).strip()


@dataclass
class SmokeWatch:
    """Every change the API server saw to a GPU canary smoke pod: (event, name, node, phase)."""

    seen: list[tuple[str, str, str, str]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __call__(self, event: str, obj: dict[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        if (meta.get("labels") or {}).get("gitopsbot.io/smoke") != "gpu-path":
            return
        spec = obj.get("spec") or {}
        node = str((spec.get("nodeSelector") or {}).get("kubernetes.io/hostname") or "")
        phase = str((obj.get("status") or {}).get("phase") or "")
        with self.lock:
            self.seen.append((event, str(meta.get("name")), node, phase))

    def events(self) -> list[tuple[str, str, str, str]]:
        with self.lock:
            return list(self.seen)


def _watch_smoke(world: StoryWorld) -> SmokeWatch:
    watch = SmokeWatch()
    world.store().subscribe(watch)
    return watch


def _upgrade(world: StoryWorld) -> str:
    """The proposer's pull request to 1.8.7, merged: the upgrade's operation id."""
    proposal = world.propose()
    sha = world.merge(proposal.number)
    return f"{CLUSTER}-{sha[:12]}"


def _switch(world: StoryWorld) -> bool:
    return bool(pool_policies(world)[POOL].get("autoUpdateHypervisor"))


def _on_new(world: StoryWorld) -> list[str]:
    return sorted(n for n, imgs in world.hypervisor_images().items() if imgs == [NEW_IMAGE])


def _state_file(world: StoryWorld, path: str) -> str:
    world.state_log()  # fetches the state branch into the person's clone
    return git("show", f"origin/{STATE_BRANCH}:{path}", cwd=world.human)


# -- 1. the GPU canary passes ----------------------------------------------------------------


def test_gpu_canary_passes_and_the_pool_rolls_to_the_end(world: StoryWorld, bot: BotRunner) -> None:
    smoke = _watch_smoke(world)
    details: list[str] = []
    bot.on_pass = lambda _r, j: details.append(j.step(STEP).detail) if j is not None else None
    proposal = world.propose()
    op = f"{CLUSTER}-{world.merge(proposal.number)[:12]}"
    done = wait_for(world, finished_op(OperationKind.UPGRADE), what="the upgrade", timeout=150)
    assert done.op_id == op and done.status is OperationStatus.SUCCEEDED, done.failure
    assert done.step(STEP).state is StepState.SUCCEEDED
    phase = done.phase(STEP)
    assert phase.state is PhaseState.DONE and phase.canary_done
    images = world.hypervisor_images()
    assert images == {node: [NEW_IMAGE] for node in images} and len(images) == 3
    assert not _switch(world)

    # The smoke pod: made once, pinned to a node the canary batch updated (the stand-in
    # succeeds only there), Succeeded, deleted.
    events = smoke.events()
    node = events[0][2]
    names = {name for _e, name, _n, _p in events}
    assert len(names) == 1, events
    name = names.pop()
    assert name.startswith(f"gitopsbot-gpu-canary-{POOL}-")
    assert [e for e, *_ in events].count("ADDED") == 1, events
    assert events[0][0] == "ADDED" and events[0][2] == node
    assert any(p == "Succeeded" for *_x, p in events), events
    assert events[-1][0] == "DELETED"
    assert not world.store().list("v1", "Pod", label_selector="gitopsbot.io/smoke=gpu-path")

    # The journal said so when the canary passed (later batches' reasons replace it).
    passed = f"GPU canary smoke pod {name} succeeded on node {node}"
    assert any(passed in d for d in details), details
    # ... and the phase keeps the evidence after them (#28 item 6): in the journal archived
    # in history/ and in the pull request's comment.
    kept = phase.canary
    assert kept is not None and kept.verdict is CanaryVerdict.PASSED, phase
    assert (kept.evidence.pod, kept.evidence.node, kept.evidence.phase) == (name, node, "Succeeded")
    assert kept.evidence.hypervisor_image == NEW_IMAGE and kept.evidence.worker_image, kept
    archived = _state_file(world, f"clusters/{CLUSTER}/history/{op}.yaml")
    assert "verdict: passed" in archived and f"pod: {name}" in archived, archived
    shown = (
        f"GPU canary passed {kept.at:%Y-%m-%d %H:%M:%S} UTC: pod {kept.evidence.namespace}/{name}"
    )
    assert world.forge is not None
    with world.forge.lock:
        comments = [c.body for c in world.forge.comments.values() if c.number == proposal.number]
    assert any(shown in c and f"hypervisor {NEW_IMAGE}" in c for c in comments), comments
    world.state_log()  # fetched: no canary failure recorded
    listed = git("ls-tree", "--name-only", f"origin/{STATE_BRANCH}", cwd=world.human)
    assert canary_marks.RECORD_DIR not in listed.split()


# -- 2. the GPU canary fails -----------------------------------------------------------------


def _judge_other_cluster(world: StoryWorld) -> waves.WaveJudgement:
    """``gitopsbot plan``'s waves verdict for another cluster of the fleet (gpu-prod-2, same
    files) moving from 1.8.0 to 1.8.7, against the story's real state branch."""
    repo = world.git_repo("planner")
    repo.fetch()
    head = repo.head("main")
    assert head is not None
    fleet = load_fleet(repo.tree(head))
    other = replace(fleet.clusters[CLUSTER], name="gpu-prod-2")
    assert other.release.version == VERSION
    fleet = replace(fleet, clusters={**fleet.clusters, other.name: other})
    return waves.judge_plan(repo, fleet, other, before="1.8.0")


def test_gpu_canary_fails_halts_the_pool_and_holds_the_version_until_cleared(
    world: StoryWorld, bot: BotRunner
) -> None:
    sandbox = world.sandbox
    assert sandbox is not None and sandbox.sim is not None
    sandbox.sim.config = replace(sandbox.sim.config, broken_gpu_path_images=frozenset({NEW_IMAGE}))
    smoke = _watch_smoke(world)
    op = _upgrade(world)
    done = wait_for(world, finished_op(OperationKind.UPGRADE), what="the halt", timeout=90)
    assert done.op_id == op and done.status is OperationStatus.FAILED
    step, phase = done.step(STEP), done.phase(STEP)
    taken = sorted(n.name for n in phase.nodes if n.state is NodeState.FAILED)
    assert len(taken) == 1, phase.nodes  # the canary batch: one node of three
    node = taken[0]
    assert step.state is StepState.FAILED and phase.state is PhaseState.HALTED
    why = step.detail
    assert why.startswith("GPU canary: GPU canary smoke pod gitopsbot-gpu-canary-shared-"), why
    assert f"failed on node {node}: GPU call failed on node {node}" in why, why
    assert f"broken GPU path for image {NEW_IMAGE}" in why, why
    assert f"{VERSION} marked failed for every cluster and wave" in why
    assert phase.halt_reason == why and done.failure == f"{STEP}: {why}"
    kept = phase.canary  # the evidence, as for a pass (#28 item 6)
    assert kept is not None and kept.verdict is CanaryVerdict.FAILED, phase
    assert (kept.evidence.node, kept.evidence.phase) == (node, "Failed"), kept
    assert f"broken GPU path for image {NEW_IMAGE}" in kept.evidence.exit_message, kept
    # Only the canary node changed, the switch is closed, and nothing more rolls.
    assert not _switch(world)
    assert _on_new(world) == [node]
    events = smoke.events()
    assert [e for e, *_ in events].count("ADDED") == 1 and events[0][2] == node, events
    assert any(p == "Failed" for *_x, p in events) and events[-1][0] == "DELETED", events
    time.sleep(6)  # longer than the batch interval: a batch would have started
    assert _on_new(world) == [node] and not _switch(world)
    images = world.hypervisor_images()
    assert sorted(i for imgs in images.values() for i in imgs).count(OLD_IMAGE) == 2
    # onFailure halt: no rollback follows.
    reader = JournalStore(world.git_repo("reader2"), branch=STATE_BRANCH, push=False)
    reader.refresh()
    current = reader.current(CLUSTER)
    assert current is not None and current.op_id == op and current.kind is OperationKind.UPGRADE

    # The mark on the state branch.
    path = canary_marks.record_path(VERSION)
    mark = canary_marks.loads(_state_file(world, path), path)
    assert (mark.version, mark.cluster, mark.pool, mark.op_id, mark.node) == (
        VERSION,
        CLUSTER,
        POOL,
        op,
        node,
    )
    assert f"broken GPU path for image {NEW_IMAGE}" in mark.message

    # Another cluster's change to 1.8.7: denied by the waves, naming the canary failure.
    judged = _judge_other_cluster(world)
    assert len(judged.verdicts) == 1, judged.verdicts
    verdict = judged.verdicts[0]
    assert verdict.rule_id == "WAVES" and verdict.outcome == "denied", verdict
    assert f"GPU canary failed on {CLUSTER} pool {POOL} ({op}" in verdict.message, verdict

    # A person clears the version in gitopsbot.yaml: the change may go again.
    _push(
        world,
        {
            "gitopsbot.yaml": lambda t: (
                t + f"clearedVersions:\n  - version: {VERSION}\n    reason: driver fixed\n"
            )
        },
        f"clear {VERSION}",
    )
    assert _judge_other_cluster(world).verdicts == ()


# -- 3. a running operation to the version is held -------------------------------------------


def test_a_mark_from_another_cluster_holds_a_running_operation_at_the_next_boundary(
    world: StoryWorld, bot: BotRunner
) -> None:
    # The canary passes here; the rest of the pool goes 1 node per batch, 5 s apart.
    _push(
        world,
        {ROLLOUT: lambda t: t.replace("batchPercentage: 50", "batchPercentage: 33")},
        "smaller batches",
    )
    op = _upgrade(world)
    wait_for(
        world,
        lambda s: (
            j
            if (j := s.current(CLUSTER)) is not None
            and j.op_id == op
            and j.phase(STEP).canary_done
            and j.phase(STEP).state is PhaseState.ROLLING
            else None
        ),
        what="the canary passed and the pool rolling",
        timeout=120,
    )
    # gpu-prod-2's bot records its canary failure of 1.8.7 on the fleet's state branch.
    other = world.git_repo("gpu-prod-2")
    other.fetch()
    store = JournalStore(other, branch=STATE_BRANCH, push=True)
    failure = CanaryFailure(
        version=VERSION,
        cluster="gpu-prod-2",
        pool="training",
        op_id="gpu-prod-2-0123456789ab",
        at=world.clock.now(),
        message="GPU canary smoke pod x failed on node g1: CUDA error",
        node="g1",
    )
    assert record_canary_failure(store, other, failure, ())
    held = wait_for(
        world,
        lambda s: (
            j
            if (j := s.current(CLUSTER)) is not None
            and j.phase(STEP).paused_by.startswith("GPU canary failed on gpu-prod-2")
            else None
        ),
        what="the hold",
        timeout=60,
    )
    assert held.op_id == op and held.status is OperationStatus.RUNNING
    assert held.phase(STEP).state is PhaseState.PAUSED
    assert not _switch(world)
    time.sleep(5)  # the batch in flight ends; no other starts
    at = _on_new(world)
    time.sleep(5)
    assert _on_new(world) == at and len(at) < 3 and not _switch(world)

    # A person clears 1.8.7 in gitopsbot.yaml; the bot, restarted, lets the pool roll to the
    # end. (Restarted: driving._canary_hold reads clearedVersions from the settings the bot
    # started with, so a running bot keeps the hold until it restarts; see the report of
    # issue 18 part 5. Once it reads them from the watched branch, no restart is needed.)
    _push(
        world,
        {
            "gitopsbot.yaml": lambda t: (
                t + f"clearedVersions:\n  - version: {VERSION}\n    reason: driver fixed\n"
            )
        },
        f"clear {VERSION}",
    )
    stop_within(bot.stop, "the bot")
    again = BotRunner(world, name="bot2").start()
    try:
        done = wait_for(world, finished_op(OperationKind.UPGRADE), what="the upgrade", timeout=60)
    finally:
        stop_within(again.stop, "the restarted bot")
    assert done.op_id == op and done.status is OperationStatus.SUCCEEDED, done.failure
    assert done.phase(STEP).paused_by == "" and _on_new(world) == sorted(world.hypervisor_images())
