"""Intake off the critical path (issue 13 part 5): a merge is recorded on the state branch
before the forge is asked which pull request merged it; the forge's answer reaches the
journal (a follow-up save when the commit message did not name it) before the operation is
mirrored on its pull request and announced."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from gitopsbot.core.forge.forge_types import PullRequestDraft, PullRequestInfo, PullRequestState
from gitopsbot.core.records.journal import Journal, OperationStatus
from gitopsbot.errors import ForgeFailed
from gitopsbot.testing import FakeForge
from tests.executor.conftest import Env, fleet_files, git


def state_subjects(env: Env) -> list[str]:
    git("fetch", "--quiet", "origin", cwd=env.human.path)
    log = git("log", "--format=%s", "origin/gitopsbot/state", cwd=env.human.path)
    return log.splitlines()


def merged_on_the_forge(env: Env, number: int, sha: str) -> None:
    """Pull request ``number`` merged as ``sha`` (now: within the lookup's week)."""
    opened = env.forge.open_or_update_pull_request(
        PullRequestDraft(
            branch=f"change-{number}", base="main", title="lab: hv:2", body="", marker=f"t{number}"
        )
    )
    del env.forge.pulls[opened.number]
    env.forge.pulls[number] = replace(
        opened,
        number=number,
        state=PullRequestState.MERGED,
        merged_at=datetime.now(UTC),
        merge_commit_sha=sha,
    )


class Asked:
    """The env's forge, with ``list_merged_since`` answered by ``lookup``."""

    def __init__(self, forge: FakeForge, lookup: Callable[[datetime], list[PullRequestInfo]]):
        self._forge = forge
        self.list_merged_since = lookup

    def __getattr__(self, name: str) -> Any:
        return getattr(self._forge, name)


def test_the_operation_is_recorded_before_the_forge_is_asked(env: Env) -> None:
    rec = env.reconciler()
    rec.reconcile("lab")
    sha = env.merge_pr(7, "lab: hv:2", fleet_files("1.0.0", "hv:2"))
    recorded: list[Journal | None] = []
    lookup = env.forge.list_merged_since

    def asked(since: datetime) -> list[PullRequestInfo]:
        recorded.append(rec.store.current("lab"))  # what the state branch holds by then
        return lookup(since)

    rec.forge = Asked(env.forge, asked)

    assert rec.reconcile("lab").action == "started"

    (journal,) = recorded
    assert journal is not None and journal.desired_sha == sha
    assert journal.pr_number == 7  # the number the squash message "(#7)" names
    assert env.forge.comments_on(7)  # mirrored all the same


def test_a_rebase_merge_gets_its_pull_request_in_a_follow_up_save_then_the_mirror(
    env: Env,
) -> None:
    rec = env.reconciler()
    rec.reconcile("lab")
    sha = env.human.commit("lab: hv:2", fleet_files("1.0.0", "hv:2"))  # no "(#n)"
    merged_on_the_forge(env, 12, sha)

    assert rec.reconcile("lab").action == "started"

    journal = rec.store.current("lab")
    assert journal is not None and journal.pr_number == 12
    subjects = state_subjects(env)
    assert subjects[0] == f"lab: {journal.op_id}: merged by pull request #12"
    assert f"{journal.op_id} started" in subjects[1]  # recorded first
    (comment,) = env.forge.comments_on(12)  # mirrored once, on the right pull request
    assert journal.op_id in comment


def test_a_number_the_forge_confirms_costs_no_second_commit(env: Env) -> None:
    rec = env.reconciler()
    rec.reconcile("lab")
    sha = env.human.commit("lab: hv:2 (#9)", fleet_files("1.0.0", "hv:2"))
    merged_on_the_forge(env, 9, sha)
    before = len(state_subjects(env))

    assert rec.reconcile("lab").action == "started"

    assert len(state_subjects(env)) == before + 1
    journal = rec.store.current("lab")
    assert journal is not None and journal.pr_number == 9
    assert env.forge.comments_on(9)


def test_the_forge_wins_over_a_number_the_message_names(env: Env) -> None:
    rec = env.reconciler()
    rec.reconcile("lab")
    sha = env.human.commit("lab: hv:2, follow-up of (#3)", fleet_files("1.0.0", "hv:2"))
    merged_on_the_forge(env, 14, sha)
    env.forge.open_or_update_pull_request(
        PullRequestDraft(branch="old", base="main", title="old", body="", marker="old")
    )  # pull request #3 exists: nothing may be posted there

    rec.reconcile("lab")

    journal = rec.store.current("lab")
    assert journal is not None and journal.pr_number == 14
    assert env.forge.comments_on(14) and not env.forge.comments_on(3)


def test_with_the_forge_down_the_message_number_stays(env: Env) -> None:
    rec = env.reconciler()
    rec.reconcile("lab")
    env.merge_pr(7, "lab: hv:2", fleet_files("1.0.0", "hv:2"))

    def down(since: datetime) -> list[PullRequestInfo]:
        raise ForgeFailed("502 Bad Gateway")

    rec.forge = Asked(env.forge, down)

    assert rec.reconcile("lab").action == "started"

    journal = rec.store.current("lab")
    assert journal is not None and journal.pr_number == 7
    assert journal.status is OperationStatus.RUNNING
