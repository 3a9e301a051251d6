"""The demo's story, asserted from Git, Helm, the cluster and the forge.

(a) A proposal pull request for 1.8.0 → 1.8.7 (plan as one comment), its merge (webhook),
and the upgrade: every step succeeded in the journal on the state branch, the second pool
held by its maintenance window until it opened (R21: the bot enforces windows, the
controller ignores them), Helm at 1.8.7 with the bot's revision description (R8, the
resume key), one hypervisor per GPU node on the new image (R15, F6), status success.
(c) A ``git revert`` of the merge: a rollback with ``helm rollback`` to the recorded
revision, hypervisors back on the old image, CRDs untouched (R16: the 1.8.7 field stays).

Each test runs twice (conftest ``story_backend``): on the API emulator, and on the real
control plane (kube-apiserver and kube-controller-manager; ``realkube``), where the
controller's readiness comes from the real Deployment controller.

The bot's clock is moved to the window's opening once the second pool is seen held, so the
test does not wait for a wall-clock minute (the demo waits for real).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from gitopsbot.core.records.journal import Journal, OperationKind, OperationStatus, StepState
from gitopsbot.sandbox.story import STATE_BRANCH, StoryOptions, StoryWorld, git
from gitopsbot.sandbox.story_bot import BotRunner
from gitopsbot.sandbox.story_fleet import CLUSTER
from gitopsbot.sandbox.story_waits import finished_op, state_reader, wait_for
from tests.e2e.conftest import (
    NEW_IMAGE,
    NS,
    OLD_IMAGE,
    RELEASE,
    Watch,
    crd_text,
    held_by_window,
    helm_history,
    pool_policies,
    stop_within,
)

# The story runs once per backend (the module fixture ``upgraded``); its tests read it.
pytestmark = [pytest.mark.slow, pytest.mark.module_world("story_backend")]


@dataclass
class Upgraded:
    world: StoryWorld
    bot: BotRunner
    watch: Watch
    number: int
    merge_sha: str
    journal: Journal
    images: dict[str, list[str]]
    history: list[dict[str, Any]]
    comments: list[str]
    statuses: list[tuple[str, str, str]]  # (sha, context, state)
    backend: str
    deployment_status_writers: set[str]  # field managers of the controller Deployment's status


def _comments(world: StoryWorld, number: int) -> list[str]:
    assert world.forge is not None
    with world.forge.lock:
        return [c.body for c in world.forge.comments.values() if c.number == number]


def _statuses(world: StoryWorld) -> list[tuple[str, str, str]]:
    assert world.forge is not None
    with world.forge.lock:
        return [(s.sha, s.context, s.state) for s in world.forge.statuses]


def _status_writers(world: StoryWorld) -> set[str]:
    dep = world.store().get("apps/v1", "Deployment", NS, f"{RELEASE}-controller")
    assert dep is not None
    entries = dep["metadata"].get("managedFields") or []
    return {str(e.get("manager")) for e in entries if e.get("subresource") == "status"}


@pytest.fixture(scope="module")
def upgraded(
    tmp_path_factory: pytest.TempPathFactory, story_backend: dict[str, Any]
) -> Iterator[Upgraded]:
    # Far enough ahead that the window is surely closed when pool-2's turn comes.
    options = StoryOptions(
        state_dir=tmp_path_factory.mktemp("story") / "world",
        window_lead_seconds=3600,
        **story_backend,
    )
    world = StoryWorld(options).start()
    bot: BotRunner | None = None
    try:
        watch = Watch()
        bot = BotRunner(world, on_pass=watch).start()
        proposal = world.propose()
        merge_sha = world.merge(proposal.number)
        watch.until("pool-2 held by its window", held_by_window("pool-2"))
        assert world.fleet is not None and world.fleet.window_opens is not None
        world.clock.jump_to(world.fleet.window_opens)  # "and then the window opens"
        journal = wait_for(
            world, finished_op(OperationKind.UPGRADE), what="the upgrade", timeout=180
        )
        bot.mirror.flush()  # the pull request shows the recorded transitions
        yield Upgraded(
            world=world,
            bot=bot,
            watch=watch,
            number=proposal.number,
            merge_sha=merge_sha,
            journal=journal,
            images=world.hypervisor_images(),
            history=helm_history(world),
            comments=_comments(world, proposal.number),
            statuses=_statuses(world),
            backend="realkube" if "control_plane" in story_backend else "emulator",
            deployment_status_writers=_status_writers(world),
        )
    finally:
        if bot is not None:
            stop_within(bot.stop, "the bot")
        stop_within(world.stop, "the story world")


def test_upgrade_journal_on_the_state_branch_shows_every_step_succeeded(
    upgraded: Upgraded,
) -> None:
    j = upgraded.journal
    assert (j.kind, j.status, j.failure) == (OperationKind.UPGRADE, OperationStatus.SUCCEEDED, "")
    assert j.desired_sha == upgraded.merge_sha
    assert j.pr_number == upgraded.number
    names = [s.name for s in j.steps]
    assert names == [
        "backup",
        "crds",
        "helm-upgrade",
        "controller-ready",
        "pool/shared/hypervisor",
        "pool/pool-2/hypervisor",
        "verify",
    ]
    assert {s.name: s.state for s in j.steps} == {n: StepState.SUCCEEDED for n in names}
    assert j.rollback_point is not None and j.rollback_point.chart_version == "1.8.0"
    # The backup (R6) is committed on the state branch next to the journal.
    reader = state_reader(upgraded.world)
    reader.refresh()
    head = reader.head()
    assert head is not None
    repo = upgraded.world.git_repo("reader")
    backups = f"clusters/{CLUSTER}/backups/{j.op_id}"
    values = repo.read(head, f"{backups}/values.yaml")  # `helm get values` of revision 1
    assert values is not None and b"name: pool-2" in values
    objects = repo.read(head, f"{backups}/tf-state.yaml")
    assert objects is not None and b"kind: GPUPool" in objects


def test_controller_readiness_came_from_the_clusters_deployment_controller(
    upgraded: Upgraded,
) -> None:
    # On the real control plane the simulator never writes Deployment status: the real
    # Deployment controller does, from pods the simulator bound and ran as the kubelet.
    writer = {"realkube": "kube-controller-manager", "emulator": "tensor-fusion-controller"}
    assert upgraded.deployment_status_writers == {writer[upgraded.backend]}


def test_second_pool_waited_for_its_window(upgraded: Upgraded) -> None:
    fleet = upgraded.world.fleet
    assert fleet is not None and fleet.window_opens is not None
    j = upgraded.journal
    first = j.step("pool/shared/hypervisor")
    held = j.step("pool/pool-2/hypervisor")
    assert first.finished_at is not None and first.finished_at < fleet.window_opens
    assert held.started_at is not None and held.started_at >= fleet.window_opens


def test_helm_release_is_the_bots_revision_at_1_8_7(upgraded: Upgraded) -> None:
    last = upgraded.history[-1]
    assert last["chart"] == "tensor-fusion-1.8.7"
    assert last["status"] == "deployed"
    op = upgraded.journal.op_id
    assert last["description"] == f"gitopsbot op={op} step=helm-upgrade"
    assert len(upgraded.history) == 2  # the sandbox's install, then exactly one upgrade


def test_every_gpu_node_has_exactly_one_hypervisor_on_the_new_image(upgraded: Upgraded) -> None:
    assert len(upgraded.images) == 6  # 2 pools x 3 nodes
    assert {node: imgs for node, imgs in upgraded.images.items()} == {
        node: [NEW_IMAGE] for node in upgraded.images
    }


def test_forge_shows_one_plan_comment_and_success(upgraded: Upgraded) -> None:
    plans = [c for c in upgraded.comments if "gitopsbot plan for `sandbox`" in c]
    assert len(plans) == 1, upgraded.comments
    applies = [c for c in upgraded.comments if "upgrade of `sandbox`" in c]
    assert len(applies) == 1 and "succeeded" in applies[0]
    # The pool phases' batch lines and the operation as it happened, drawn as a Mermaid
    # Gantt chart (docs/progress.md); the plan comment carries the planned one.
    assert "batch 2/2 of 2 nodes · 3/3 nodes done · progress 100%" in applies[0], applies[0]
    assert "```mermaid\ngantt" in applies[0] and "section pool/shared/hypervisor" in applies[0]
    assert "to 100% :done," in applies[0]
    assert "```mermaid\ngantt" in plans[0] and "hypervisor batch 1/2" in plans[0], plans[0]
    apply_states = [st for sha, ctx, st in upgraded.statuses if ctx == "gitopsbot/apply"]
    merge_states = [
        st
        for sha, ctx, st in upgraded.statuses
        if ctx == "gitopsbot/apply" and sha == upgraded.merge_sha
    ]
    assert merge_states and merge_states[-1] == "success", apply_states
    assert "pending" in merge_states  # it was pending while the upgrade ran


def test_revert_rolls_back_with_helm_rollback_and_keeps_crds(upgraded: Upgraded) -> None:
    world = upgraded.world
    upgrade = upgraded.journal
    revert_sha = world.revert(upgraded.merge_sha)
    upgraded.bot.scheduler.nudge()
    rollback = wait_for(
        world,
        finished_op(OperationKind.ROLLBACK, after=upgrade.op_id),
        what="the rollback",
        timeout=180,
    )
    assert (rollback.status, rollback.failure) == (OperationStatus.SUCCEEDED, "")
    assert rollback.desired_sha == revert_sha
    assert rollback.reverts_op == upgrade.op_id
    assert "crds" not in [s.name for s in rollback.steps]  # R16: CRDs never downgraded
    assert all(s.state is StepState.SUCCEEDED for s in rollback.steps)

    history = helm_history(world)
    assert len(history) == 3
    last = history[-1]
    assert last["chart"] == "tensor-fusion-1.8.0"
    # Revision 1 was installed by hand with the chart's own pool policy (switches on, 20 %):
    # a helm rollback would hand the rollout back to it. The rollback is an upgrade to the
    # recorded chart with the Git values, through the post-renderer (issue 10).
    assert last["description"] == f"gitopsbot op={rollback.op_id} step=helm-upgrade"
    policies = pool_policies(world)
    assert policies and all(p.get("autoUpdateHypervisor") is False for p in policies.values())
    assert all(p.get("autoUpdateWorker") is not True for p in policies.values()), policies
    images = world.hypervisor_images()
    assert images == {node: [OLD_IMAGE] for node in images}
    # The 1.8.7 CRD field is still served: the rollback left the CRDs as they were.
    assert "isolationModeRules" in crd_text(world, "tensorfusionclusters.tensor-fusion.ai")
    assert "isolationModeRules" in crd_text(world, "gpupools.tensor-fusion.ai")
    # Each operation keeps one comment on the pull request, edited at every transition.
    comments = _comments(world, upgraded.number)
    assert len([c for c in comments if "rollback of `sandbox`" in c]) == 1, comments
    assert len([c for c in comments if "upgrade of `sandbox`" in c]) == 1, comments
    # The person's clone sees the whole story on the state branch.
    log = world.state_log()
    assert f"rollback {rollback.op_id} succeeded" in log
    assert f"upgrade {upgrade.op_id} succeeded" in log
    shown = git("show", f"origin/{STATE_BRANCH}:clusters/{CLUSTER}/journal.yaml", cwd=world.human)
    assert f"op_id: {rollback.op_id}" in shown
