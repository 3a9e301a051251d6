"""End-to-end proposal passes over real transports: a bare Git repository (file://), the local
GitHub REST server, and a Helm chart repository on loopback built with the real helm."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from gitopsbot.adapters.gitonly import GitOnlyForge
from gitopsbot.core.fleet.commit_classes import PROPOSAL_TRAILER
from gitopsbot.core.fleet.yamledit import set_value
from gitopsbot.core.forge.forge_types import PullRequestState
from gitopsbot.core.proposing.proposals import LEDGER_FILE
from tests.proposals.conftest import TOKEN, World

# slow: each test runs the command line, a Git remote or real helm in subprocesses (seconds)
pytestmark = pytest.mark.slow

WRITES = ("POST", "PATCH", "PUT", "DELETE")


def writes(world: World) -> list[str]:
    with world.forge_server.lock:
        return [f"{r.method} {r.path}" for r in world.forge_server.log if r.method in WRITES]


def open_pulls(world: World) -> dict[str, int]:
    with world.forge_server.lock:
        return {p.head: n for n, p in world.forge_server.pulls.items() if p.state == "open"}


def test_first_pass_opens_a_proposal_with_plan_labels_and_status(
    world_factory: Callable[..., World],
) -> None:
    world = world_factory(versions={"staging": "1.8.0"}, max_open=3)
    report = world.proposer().run_once()
    assert report.problems == []
    assert [(p.cluster, p.version, p.opened) for p in report.proposals] == [
        ("staging", "1.8.3", True)
    ]
    branch = "gitopsbot/staging/1.8.3"
    assert branch in world.branches()
    # The edits: chart bumped, hypervisor image set explicitly to the chart default (R4), with
    # the file's comments kept.
    release = world.show(branch, "clusters/staging/release.yaml")
    assert "version: 1.8.3" in release and "# Where the chart comes from" in release
    values = world.show(branch, "clusters/staging/values.yaml")
    assert "hypervisorImage: tensorfusion/tensor-fusion-hypervisor:2.14.0" in values
    assert "# Set explicitly on every upgrade (R4)" in values
    log = world.repo()
    log.fetch()
    head = log.head(branch)
    assert head is not None
    commit = log.log(branch, log.head("main"), 5)
    assert len(commit) == 1 and f"{PROPOSAL_TRAILER}: staging/1.8.3" in commit[0].message
    # The request: plan body, chart changes, labels, policy status on the pushed head.
    pulls = world.forge_server.pulls
    (pr,) = pulls.values()
    assert pr.head == branch and pr.base == "main"
    assert "gitopsbot plan for `staging`" in pr.body
    assert "hypervisor leaks a GPU context on restart" in pr.body
    assert sorted(pr.labels) == ["gitopsbot", "upgrade"]
    statuses = [s for s in world.forge_server.statuses if s.context == "gitopsbot/policy"]
    assert [s.sha for s in statuses] == [head]
    # The ledger on the state branch remembers the request.
    ledger = json.loads(world.show("gitopsbot/state", LEDGER_FILE))
    assert ledger["proposals"] == [
        {
            "cluster": "staging",
            "version": "1.8.3",
            "number": pr.number,
            "state": "open",
            "head": head,
        }
    ]
    assert TOKEN not in "\n".join(report.lines())


def test_second_pass_is_a_no_op(world_factory: Callable[..., World]) -> None:
    world = world_factory(versions={"staging": "1.8.0"})
    world.proposer().run_once()
    before = writes(world)
    state_before = world.show("gitopsbot/state", LEDGER_FILE)
    branches = {b: world.sha(b) for b in world.branches()}
    report = world.proposer().run_once()
    assert writes(world) == before  # zero forge writes
    assert not report.changed
    assert [p.opened or p.updated for p in report.proposals] == [False]
    assert world.show("gitopsbot/state", LEDGER_FILE) == state_before
    assert {b: world.sha(b) for b in world.branches()} == branches


@pytest.mark.slow
def test_newer_version_supersedes_the_open_proposal(world_factory: Callable[..., World]) -> None:
    world = world_factory(versions={"staging": "1.8.0"})
    world.proposer().run_once()
    old = open_pulls(world)["gitopsbot/staging/1.8.3"]
    world.charts.add_example("1.8.7")
    report = world.proposer().run_once()
    assert [(p.version, p.opened) for p in report.proposals] == [("1.8.7", True)]
    new = open_pulls(world)["gitopsbot/staging/1.8.7"]
    assert list(open_pulls(world)) == ["gitopsbot/staging/1.8.7"]  # not piled up
    closed = world.forge_server.pulls[old]
    assert closed.state == "closed" and closed.merged_at is None
    comments = [c.body for c in world.forge_server.comments.values() if c.number == old]
    assert any(f"#{new}" in c and "superseded by chart 1.8.7" in c for c in comments)
    ledger = {
        p["version"]: p["state"]
        for p in json.loads(world.show("gitopsbot/state", LEDGER_FILE))["proposals"]
    }
    assert ledger == {"1.8.3": "superseded", "1.8.7": "open"}
    # And the pass after that is quiet again.
    before = writes(world)
    world.proposer().run_once()
    assert writes(world) == before


def test_declined_proposal_is_not_reopened(world_factory: Callable[..., World]) -> None:
    world = world_factory(versions={"staging": "1.8.0"})
    world.proposer().run_once()
    number = open_pulls(world)["gitopsbot/staging/1.8.3"]
    world.forge().close_pull_request(number)  # a person closes it without merging
    before = writes(world)
    report = world.proposer().run_once()
    assert open_pulls(world) == {}
    assert writes(world) == before
    (decision,) = report.decisions
    assert decision.target is None
    assert any(f"#{number}" in n and "not proposed again" in n for n in decision.notes)
    ledger = json.loads(world.show("gitopsbot/state", LEDGER_FILE))["proposals"]
    assert [p["state"] for p in ledger] == ["closed"]
    # Still not reopened on the next pass, even with the ledger already up to date.
    world.proposer().run_once()
    assert open_pulls(world) == {}


def test_max_open_bounds_the_fleet(world_factory: Callable[..., World]) -> None:
    world = world_factory(versions={"staging": "1.8.0", "production": "1.8.0"}, max_open=1)
    report = world.proposer().run_once()
    assert list(open_pulls(world)) == ["gitopsbot/production/1.8.3"]  # name order
    staging = next(d for d in report.decisions if d.cluster == "staging")
    assert staging.target is None and any("maxOpen is 1" in n for n in staging.notes)
    # A newer version supersedes production's proposal in place; staging still waits.
    world.charts.add_example("1.8.7")
    world.proposer().run_once()
    assert list(open_pulls(world)) == ["gitopsbot/production/1.8.7"]


def test_merged_proposal_is_recorded_and_nothing_reopens(
    world_factory: Callable[..., World],
) -> None:
    world = world_factory(versions={"staging": "1.8.0"})
    world.proposer().run_once()
    number = open_pulls(world)["gitopsbot/staging/1.8.3"]
    # The person merges: on the forge, and the branch content lands on main.
    world.forge_server.merge(number)
    branch_release = world.show("gitopsbot/staging/1.8.3", "clusters/staging/release.yaml")
    branch_values = world.show("gitopsbot/staging/1.8.3", "clusters/staging/values.yaml")
    world.human_commit(
        {
            "clusters/staging/release.yaml": branch_release,
            "clusters/staging/values.yaml": branch_values,
        },
        "Merge gitopsbot/staging/1.8.3",
    )
    report = world.proposer().run_once()
    assert report.proposals == [] and open_pulls(world) == {}
    ledger = json.loads(world.show("gitopsbot/state", LEDGER_FILE))["proposals"]
    assert [p["state"] for p in ledger] == ["merged"]


def test_pinned_and_r2_skips(world_factory: Callable[..., World]) -> None:
    world = world_factory(versions={"staging": "1.8.0"}, scope="pinned")
    report = world.proposer().run_once()
    assert report.proposals == [] and world.forge_server.pulls == {}
    assert "gitopsbot/state" not in world.branches()  # nothing to remember: no write


def test_git_only_mode_produces_a_branch_with_plan(world_factory: Callable[..., World]) -> None:
    world = world_factory(versions={"staging": "1.8.0"})
    repo = world.repo()
    proposer = world.proposer(forge=GitOnlyForge(repo))
    proposer.repo = repo  # one mirror for the forge and the proposer
    report = proposer.run_once()
    assert report.problems == []
    branch = "gitopsbot/staging/1.8.3"
    plan = world.show(branch, "clusters/staging/PLAN.md")
    assert "gitopsbot plan for `staging`" in plan
    assert "version: 1.8.3" in world.show(branch, "clusters/staging/release.yaml")
    info = GitOnlyForge(repo).get_pull_request(report.proposals[0].number)
    assert info.state is PullRequestState.OPEN and info.labels == ("gitopsbot", "upgrade")
    heads = {b: world.sha(b) for b in world.branches()}
    # Idempotent in Git-only mode too: the second pass commits nothing.
    again = world.proposer(forge=GitOnlyForge(repo))
    again.repo = repo
    assert not again.run_once().changed
    assert {b: world.sha(b) for b in world.branches()} == heads


def test_a_persons_push_to_the_proposal_is_kept_and_gets_a_status(
    world_factory: Callable[..., World],
) -> None:
    world = world_factory(versions={"staging": "1.8.0"})
    world.proposer().run_once()
    branch = "gitopsbot/staging/1.8.3"
    rollout = world.show(branch, "clusters/staging/rollout.yaml")
    human = world.human_commit_on(
        branch,
        {"clusters/staging/rollout.yaml": rollout + "# reviewed by the GPU team\n"},
        "Review note",
    )
    before = writes(world)
    world.proposer().run_once()
    assert world.sha(branch) == human  # no bot commit on top: the person's change stays
    new_writes = writes(world)[len(before) :]
    assert [w.split()[0] for w in new_writes] == ["POST"]  # only the status on the new head
    assert human in new_writes[0]
    quiet = writes(world)
    world.proposer().run_once()
    assert writes(world) == quiet


def test_policy_deny_fails_the_status(world_factory: Callable[..., World]) -> None:
    world = world_factory(versions={"production": "1.8.0"})
    values = world.show("main", "clusters/production/values.yaml")
    world.human_commit(
        {
            "clusters/production/values.yaml": set_value(values, "controller.replicaCount", 1),
        },
        "One controller replica",
    )
    report = world.proposer().run_once()
    (proposal,) = report.proposals
    assert proposal.decision == "denied"
    (pr,) = world.forge_server.pulls.values()
    assert "⛔ denied" in pr.body and "R5" in pr.body
    (status,) = [s for s in world.forge_server.statuses if s.context == "gitopsbot/policy"]
    assert status.state == "failure" and status.sha == world.sha(pr.head)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["gitlab", "gitea"])
def test_other_forges_open_then_stay_quiet_then_supersede(
    world_factory: Callable[..., World], kind: str
) -> None:
    world = world_factory(versions={"staging": "1.8.0"}, kind=kind)
    first = world.proposer().run_once()
    assert first.problems == [] and [p.version for p in first.proposals] == ["1.8.3"]
    (pr,) = world.forge_server.pulls.values()
    assert "gitopsbot plan for `staging`" in pr.body
    assert sorted(pr.labels) == ["gitopsbot", "upgrade"]
    before = writes(world)
    world.proposer().run_once()
    assert writes(world) == before
    world.charts.add_example("1.8.7")
    world.proposer().run_once()
    assert list(open_pulls(world)) == ["gitopsbot/staging/1.8.7"]
