"""Git-only mode: proposals are branches with a PLAN.md, merges are found by ancestry."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

import pytest

from gitopsbot.adapters.gitonly import GitOnlyForge, plan_path, request_number
from gitopsbot.core.fleet.commit_classes import CommitKind, classify_commits, snapshot
from gitopsbot.core.forge.forge_types import (
    CommitState,
    CommitStatus,
    PullRequestDraft,
    PullRequestState,
    find_marker,
)
from gitopsbot.errors import ForgeFailed, ForgeNotFound

if TYPE_CHECKING:
    from tests.git.conftest import Fleet

BRANCH = "gitopsbot/alpha/2.0.0"
MARKER = "alpha/tensor-fusion-2.0.0"


def _propose(fleet: Fleet) -> tuple[GitOnlyForge, int]:
    """What the proposer does in Git-only mode: push the change, then open the proposal."""
    repo = fleet.bot()
    repo.commit_files(
        BRANCH,
        {"clusters/alpha/release.yaml": b"version: 2.0.0\n"},
        "Upgrade alpha to 2.0.0\n\nGitopsbot-Proposal: alpha/2.0.0\n",
        parent=repo.head("main"),
    )
    repo.push(BRANCH)
    forge = GitOnlyForge(repo)
    pr = forge.open_or_update_pull_request(
        PullRequestDraft(
            branch=BRANCH,
            base="main",
            title="Upgrade alpha to 2.0.0",
            body="## Plan\n\n- helm upgrade 1.0.0 → 2.0.0",
            marker=MARKER,
            labels=("gitopsbot",),
        )
    )
    return forge, pr.number


def test_proposal_is_a_branch_with_a_plan(fleet: Fleet) -> None:
    forge, number = _propose(fleet)
    assert plan_path(BRANCH) == "clusters/alpha/PLAN.md"
    assert number == request_number(BRANCH)
    pr = forge.get_pull_request(number)
    assert pr.state is PullRequestState.OPEN
    assert pr.branch == BRANCH and pr.base == "main"
    assert pr.marker == MARKER and find_marker(pr.body) is not None
    assert pr.mergeable is True  # fast-forwardable onto main
    assert pr.labels == ("gitopsbot",)
    # What a person sees: the branch, its PLAN.md and the commit message carry the plan.
    human = fleet.human()
    plan = human.show(f"origin/{BRANCH}:clusters/alpha/PLAN.md")
    assert "# Upgrade alpha to 2.0.0" in plan and "helm upgrade 1.0.0 → 2.0.0" in plan
    message = human.git("log", "-1", "--format=%B", f"origin/{BRANCH}")
    assert "helm upgrade 1.0.0 → 2.0.0" in message
    assert "Gitopsbot-Proposal: alpha/2.0.0" in message
    assert human.show(f"origin/{BRANCH}:clusters/alpha/release.yaml") == "version: 2.0.0\n"


def test_open_is_idempotent_and_survives_a_restart(fleet: Fleet) -> None:
    forge, number = _propose(fleet)
    head = forge.get_pull_request(number).head_sha
    restarted = GitOnlyForge(fleet.bot("mirror2"))
    found = restarted.find_pull_request(BRANCH, MARKER)
    assert found is not None and found.number == number
    again = restarted.open_or_update_pull_request(
        PullRequestDraft(
            branch=BRANCH,
            base="main",
            title="Upgrade alpha to 2.0.0",
            body="## Plan\n\n- helm upgrade 1.0.0 → 2.0.0",
            marker=MARKER,
            labels=("gitopsbot",),
        )
    )
    assert again.number == number
    assert again.head_sha == head  # nothing changed: no new commit
    assert restarted.find_pull_request(BRANCH, "someone-else") is None
    with pytest.raises(ForgeFailed, match="without our marker"):
        restarted.open_or_update_pull_request(
            PullRequestDraft(branch=BRANCH, base="main", title="x", body="y", marker="someone-else")
        )


def test_comments_and_statuses_update_plan_md(fleet: Fleet) -> None:
    forge, number = _propose(fleet)
    first = forge.upsert_comment(number, marker="plan", body="plan one")
    second = forge.upsert_comment(number, marker="plan", body="plan two")
    assert first.id == second.id
    head = forge.get_pull_request(number).head_sha
    forge.upsert_comment(number, marker="plan", body="plan two")
    assert forge.get_pull_request(number).head_sha == head  # unchanged text: no commit
    forge.set_status(head, CommitStatus(CommitState.FAILURE, "deny: window closed"))
    after = forge.get_pull_request(number).head_sha
    forge.set_status(after, CommitStatus(CommitState.FAILURE, "deny: window closed"))
    assert forge.get_pull_request(number).head_sha == after  # same verdict: no commit
    forge.add_labels(number, ["upgrade"])
    # A status on a commit of main is no proposal's: nothing is written anywhere.
    proposal_head = forge.get_pull_request(number).head_sha
    base_sha = fleet.human("other").sha("origin/main")
    forge.set_status(base_sha, CommitStatus(CommitState.SUCCESS, "main is fine"))
    assert forge.get_pull_request(number).head_sha == proposal_head
    plan = fleet.human().show(f"origin/{BRANCH}:clusters/alpha/PLAN.md")
    assert "plan two" in plan and "plan one" not in plan
    assert "| `gitopsbot/policy` | failure | deny: window closed |" in plan
    assert forge.get_pull_request(number).labels == ("gitopsbot", "upgrade")
    with pytest.raises(ForgeNotFound):
        forge.upsert_comment(12345, marker="plan", body="x")


def test_merge_is_detected_by_ancestry(fleet: Fleet) -> None:
    forge, number = _propose(fleet)
    before = datetime.now(UTC) - timedelta(minutes=5)
    assert forge.list_merged_since(before) == []
    human = fleet.human()
    human.git("merge", "--quiet", "--no-ff", "--no-edit", f"origin/{BRANCH}")
    human.git("commit", "--quiet", "--allow-empty", "-m", "later work")
    human.push()
    repo = fleet.bot()
    forge = GitOnlyForge(repo)
    pr = forge.get_pull_request(number)
    assert pr.state is PullRequestState.MERGED
    merge = human.sha("HEAD~1")
    assert pr.merge_commit_sha == merge
    assert pr.merged_at is not None and pr.merged_at >= before
    assert [p.number for p in forge.list_merged_since(before)] == [number]
    assert forge.list_merged_since(pr.merged_at + timedelta(seconds=1)) == []
    assert forge.find_pull_request(BRANCH, MARKER) is None  # no longer open
    # Writing to a merged proposal would un-merge it: skipped.
    forge.upsert_comment(number, marker="plan", body="applied")
    assert forge.get_pull_request(number).state is PullRequestState.MERGED
    again = forge.open_or_update_pull_request(
        PullRequestDraft(branch=BRANCH, base="main", title="again", body="again", marker=MARKER)
    )
    assert again.state is PullRequestState.MERGED and again.head_sha == pr.head_sha
    # And the merge classifies as the bot's proposal on the watched branch.
    start = human.sha("HEAD~2")
    snaps = [
        snapshot(c, repo.tree(c.sha).read, repo.tree(c.sha).list("clusters"))
        for c in repo.log("main", None, 10)
    ]
    shas = [s.commit.sha for s in snaps]
    base = shas.index(start)
    result = classify_commits(snaps[base + 1 :], baseline=snaps[base], history=snaps[:base])
    assert [c.kind for c in result.commits] == [CommitKind.PROPOSAL_MERGE, CommitKind.CHANGE]


def test_fast_forward_merge_is_detected_too(fleet: Fleet) -> None:
    forge, number = _propose(fleet)
    human = fleet.human()
    human.git("merge", "--quiet", "--ff-only", f"origin/{BRANCH}")
    human.push()
    forge = GitOnlyForge(fleet.bot())
    pr = forge.get_pull_request(number)
    assert pr.state is PullRequestState.MERGED
    assert pr.merge_commit_sha == human.sha("HEAD")


def test_close_without_merging(fleet: Fleet) -> None:
    forge, number = _propose(fleet)
    forge.close_pull_request(number, "superseded by 2.0.1")
    pr = forge.get_pull_request(number)
    assert pr.state is PullRequestState.CLOSED
    assert forge.find_pull_request(BRANCH, MARKER) is None
    plan = fleet.human().show(f"origin/{BRANCH}:clusters/alpha/PLAN.md")
    assert "Closed without merging" in plan and "superseded by 2.0.1" in plan


def test_new_branch_is_created_from_the_base(fleet: Fleet) -> None:
    repo = fleet.bot()
    forge = GitOnlyForge(repo)
    pr = forge.open_or_update_pull_request(
        PullRequestDraft(
            branch="gitopsbot/beta/1.1.0", base="main", title="t", body="b", marker="m"
        )
    )
    assert repo.commit_info(pr.head_sha).parents == (repo.head("main"),)
    with pytest.raises(ForgeFailed, match="base branch"):
        forge.open_or_update_pull_request(
            PullRequestDraft(
                branch="gitopsbot/beta/1.2.0", base="nope", title="t", body="b", marker="m"
            )
        )
