"""A proposal names only the edits it really makes, and a Git-only pass writes at most one
commit per proposal branch (edits, PLAN.md and the policy status together)."""

from __future__ import annotations

from collections.abc import Callable

from gitopsbot.adapters.gitonly import GitOnlyForge
from gitopsbot.bot.proposer import Proposer
from gitopsbot.core.fleet.yamledit import set_value
from tests.proposals.conftest import World, git

BRANCH = "gitopsbot/staging/1.8.3"
VALUES = "clusters/staging/values.yaml"
TARGET_IMAGE = "tensorfusion/tensor-fusion-hypervisor:2.14.0"  # chart 1.8.3's default


def _git_only(world: World) -> tuple[GitOnlyForge, Proposer]:
    repo = world.repo()
    proposer = world.proposer(forge=GitOnlyForge(repo))
    proposer.repo = repo  # one mirror for the forge and the proposer
    return GitOnlyForge(repo), proposer


def _commits_on_branch(world: World) -> list[str]:
    out = git("--git-dir", str(world.bare), "rev-list", f"main..{BRANCH}")
    return out.split()


def test_git_only_pass_writes_one_commit_with_edits_plan_and_status(
    world_factory: Callable[..., World],
) -> None:
    world = world_factory(versions={"staging": "1.8.0"})
    forge, proposer = _git_only(world)
    report = proposer.run_once()
    assert report.problems == []
    (commit,) = _commits_on_branch(world)
    changed = git("--git-dir", str(world.bare), "show", "--name-only", "--format=", commit)
    assert set(changed.split()) == {
        "clusters/staging/release.yaml",
        VALUES,
        "clusters/staging/PLAN.md",
    }
    plan = world.show(BRANCH, "clusters/staging/PLAN.md")
    assert "| `gitopsbot/policy` |" in plan and "this commit" in plan
    info = forge.get_pull_request(report.proposals[0].number)
    assert info.head_sha == commit == report.proposals[0].head
    # a second pass finds everything recorded: no commit at all
    _, again = _git_only(world)
    assert not again.run_once().changed
    assert _commits_on_branch(world) == [commit]


def test_body_does_not_claim_a_values_edit_when_the_pin_already_matches(
    world_factory: Callable[..., World],
) -> None:
    world = world_factory(versions={"staging": "1.8.0"})
    pinned = set_value(world.show("main", VALUES), "cluster.hypervisorImage", TARGET_IMAGE)
    world.human_commit({VALUES: pinned}, "Pin the hypervisor image ahead of the upgrade")
    # Git-only: the body is PLAN.md
    forge, proposer = _git_only(world)
    report = proposer.run_once()
    assert report.problems == []
    assert world.show(BRANCH, VALUES) == world.show("main", VALUES)
    body = forge.get_pull_request(report.proposals[0].number).body
    assert "`release.yaml`: `chart.version` → `1.8.3`" in body
    assert "`values.yaml`" not in body
    (commit,) = _commits_on_branch(world)
    message = git("--git-dir", str(world.bare), "log", "-1", "--format=%B", commit)
    assert "Hypervisor image set explicitly" not in message


def test_body_names_the_values_edit_when_there_is_one(
    world_factory: Callable[..., World],
) -> None:
    world = world_factory(versions={"staging": "1.8.0"})  # pinned to 2.15.0 in the example
    world.proposer().run_once()
    (pr,) = world.forge_server.pulls.values()
    assert f"`values.yaml`: `cluster.hypervisorImage` → `{TARGET_IMAGE}`" in pr.body
