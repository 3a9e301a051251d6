"""The forge contract: the same behaviour from FakeForge and from each provider over HTTP.

Aspects: idempotent open (retry, restart, foreign request), one plan comment edited in place,
long comments split into marked parts, the policy status, labels, state/approvals, merged-since
listing across pages, closing.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from gitopsbot.core.forge.forge_types import (
    COMMENT_LIMIT,
    CommitState,
    CommitStatus,
    PullRequestDraft,
    PullRequestInfo,
    PullRequestState,
    find_marker,
)
from gitopsbot.errors import ForgeFailed, ForgeNotFound
from tests.forge.forge_harness import Harness

MARKER = "cluster-a/tensor-fusion-1.2.3"


def _open(
    h: Harness, *, branch: str = "gitopsbot/a-1.2.3", title: str = "Upgrade a", body: str = "plan"
) -> PullRequestInfo:
    return h.forge.open_or_update_pull_request(
        PullRequestDraft(
            branch=branch, base="main", title=title, body=body, marker=MARKER, labels=("gitopsbot",)
        )
    )


def test_open_twice_gives_one_request_updated_in_place(harness: Harness) -> None:
    first = _open(harness)
    second = _open(harness, title="Upgrade a (updated)", body="plan v2")
    assert second.number == first.number
    assert harness.open_count("gitopsbot/a-1.2.3") == 1
    got = harness.forge.get_pull_request(first.number)
    assert got.title == "Upgrade a (updated)"
    assert got.body.startswith("plan v2")
    assert got.marker == MARKER
    assert got.state is PullRequestState.OPEN


def test_restart_finds_the_request_by_branch_and_marker(harness: Harness) -> None:
    first = _open(harness)
    after_restart = harness.reconnect()
    found = after_restart.find_pull_request("gitopsbot/a-1.2.3", MARKER)
    assert found is not None and found.number == first.number
    again = after_restart.open_or_update_pull_request(
        PullRequestDraft(
            branch="gitopsbot/a-1.2.3", base="main", title="Upgrade a", body="plan", marker=MARKER
        )
    )
    assert again.number == first.number
    assert harness.open_count("gitopsbot/a-1.2.3") == 1


def test_other_marker_or_branch_is_not_found(harness: Harness) -> None:
    _open(harness)
    assert harness.forge.find_pull_request("gitopsbot/a-1.2.3", "cluster-b/x") is None
    assert harness.forge.find_pull_request("gitopsbot/other", MARKER) is None


def test_a_foreign_request_on_the_branch_is_refused_not_duplicated(harness: Harness) -> None:
    harness.foreign_pull("gitopsbot/a-1.2.3")
    with pytest.raises(ForgeFailed, match=r"without (the gitopsbot|our) marker"):
        _open(harness)
    assert harness.open_count("gitopsbot/a-1.2.3") == 1


def test_one_plan_comment_edited_in_place(harness: Harness) -> None:
    pr = _open(harness)
    first = harness.forge.upsert_comment(pr.number, marker="plan", body="plan one")
    harness.forge.upsert_comment(pr.number, marker="status", body="another bot comment")
    second = harness.forge.upsert_comment(pr.number, marker="plan", body="plan two")
    third = harness.forge.upsert_comment(pr.number, marker="plan", body="plan two")
    assert first.id == second.id == third.id
    bodies = harness.comments(pr.number)
    plans = [b for b in bodies if (t := find_marker(b)) and t.marker == "plan"]
    assert len(plans) == 1 and plans[0].startswith("plan two")
    assert len(bodies) == 2


def test_long_comment_is_split_into_marked_parts_and_shrinks_back(harness: Harness) -> None:
    pr = _open(harness)
    line = "| pool-a | node-%04d | hypervisor 1.2.3 -> 1.2.4 | ok |\n"
    long_body = "".join(line % i for i in range(3000))  # ~170,000 characters
    assert len(long_body) > 2 * COMMENT_LIMIT
    info = harness.forge.upsert_comment(pr.number, marker="plan", body=long_body)
    bodies = harness.comments(pr.number)
    assert info.parts == len(bodies) == 3
    tags = [find_marker(b) for b in bodies]
    assert [(t.marker, t.part, t.of) for t in tags if t] == [("plan", i, 3) for i in (1, 2, 3)]
    assert all(len(b) <= COMMENT_LIMIT for b in bodies)
    # Every table row survives the split, in order, none cut in half.
    rows = [r for b in bodies for r in b.splitlines() if r.startswith("| pool-a")]
    assert rows == long_body.splitlines()
    harness.forge.upsert_comment(pr.number, marker="plan", body="short again")
    bodies = harness.comments(pr.number)
    assert len(bodies) == 1 and bodies[0].startswith("short again")


def test_deny_sets_a_failing_policy_status(harness: Harness) -> None:
    pr = _open(harness)
    harness.forge.set_status(pr.head_sha, CommitStatus(CommitState.PENDING, "planning"))
    assert harness.status(pr.head_sha) == "pending"
    harness.forge.set_status(
        pr.head_sha, CommitStatus(CommitState.FAILURE, "denied: R7 " + "x" * 300)
    )
    # Setting the same state again is not an error (GitLab refuses the transition; we accept).
    harness.forge.set_status(pr.head_sha, CommitStatus(CommitState.FAILURE, "denied"))
    assert harness.status(pr.head_sha) == "failure"
    harness.forge.set_status(pr.head_sha, CommitStatus(CommitState.SUCCESS, "allowed"))
    assert harness.status(pr.head_sha) == "success"


def test_labels_are_added_once(harness: Harness) -> None:
    pr = _open(harness)
    harness.forge.add_labels(pr.number, ["upgrade", "cluster:a"])
    harness.forge.add_labels(pr.number, ["upgrade"])
    labels = harness.forge.get_pull_request(pr.number).labels
    assert sorted(labels) == ["cluster:a", "gitopsbot", "upgrade"]


def test_state_mergeability_and_approvals(harness: Harness) -> None:
    pr = _open(harness)
    harness.wait_checked(pr.number)
    got = harness.forge.get_pull_request(pr.number)
    assert got.approvals == 0 and got.mergeable is True and got.merge_commit_sha == ""
    harness.approve(pr.number, "alice")
    harness.approve(pr.number, "bob")
    assert harness.forge.get_pull_request(pr.number).approvals == 2
    when = datetime.now(UTC).replace(microsecond=0) + timedelta(minutes=5)
    when = harness.merge(pr.number, when)  # a real server's clock decides
    merged = harness.forge.get_pull_request(pr.number)
    assert merged.state is PullRequestState.MERGED
    assert merged.merged_at == when
    assert len(merged.merge_commit_sha) == 40
    # A merged request is no longer "the open one": a new proposal gets a new request.
    assert harness.forge.find_pull_request(pr.branch, MARKER) is None


def test_merged_since_lists_across_pages_oldest_first(harness: Harness) -> None:
    base = datetime.now(UTC).replace(microsecond=0) + timedelta(hours=1)
    numbers = [_open(harness, branch=f"gitopsbot/c{i}", title=f"c{i}").number for i in range(7)]
    # Merge five, out of number order, each later than the one before; leave two open.
    order = [numbers[i] for i in (1, 3, 2, 0, 4)]
    at = [harness.merge(n, base + timedelta(minutes=10 * k)) for k, n in enumerate(order, 1)]
    since = at[1]  # numbers[3]'s merge: "since" includes it
    found = harness.forge.list_merged_since(since)
    assert [p.number for p in found] == [numbers[3], numbers[2], numbers[0], numbers[4]]
    assert all(p.state is PullRequestState.MERGED and p.merge_commit_sha for p in found)
    log = harness.request_log
    if log is not None:  # lists were really paginated (page size 2)
        assert len([r for r in log if r.method == "GET"]) >= 3


def test_close_leaves_a_comment(harness: Harness) -> None:
    pr = _open(harness)
    harness.forge.close_pull_request(pr.number, "superseded by 1.2.4")
    got = harness.forge.get_pull_request(pr.number)
    assert got.state is PullRequestState.CLOSED
    assert any("superseded by 1.2.4" in b for b in harness.comments(pr.number))


def test_unknown_request_is_not_found(harness: Harness) -> None:
    with pytest.raises(ForgeNotFound):
        harness.forge.get_pull_request(999)
