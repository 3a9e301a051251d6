"""The pull-request mirror: passes do not wait on the forge, the newest state of an operation
is what gets posted (a burst of transitions costs one comment edit and one status, not one
per transition), a forge failure does not stop it, and after a restart the running
operation is posted again."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field, replace
from typing import Any

from gitopsbot.bot.pr_mirror import PullRequestMirror
from gitopsbot.core.forge.forge_types import CommitState
from gitopsbot.core.records.journal import OperationStatus
from gitopsbot.errors import ForgeServerError
from gitopsbot.testing import FakeForge
from tests.executor.conftest import Env, fleet_files
from tests.executor.test_reconciler_upgrade import drive


@dataclass
class GatedForge(FakeForge):
    """Holds the first comment write until ``gate`` is set; counts writes; may fail once."""

    gate: threading.Event = field(default_factory=threading.Event)
    entered: threading.Event = field(default_factory=threading.Event)
    writes: list[str] = field(default_factory=list)
    fail_next: bool = False

    def upsert_comment(self, number: int, *, marker: str, body: str) -> Any:
        self.entered.set()
        self.gate.wait(10)
        self.writes.append(body)
        if self.fail_next:
            self.fail_next = False
            raise ForgeServerError("forge down (test)")
        return super().upsert_comment(number, marker=marker, body=body)


def _started(env: Env) -> Any:
    """A real journal: the reconciler takes a merged change in (its first transition)."""
    rec = env.reconciler()
    rec.forge = None  # nothing posted here: the test posts through the mirror
    rec.reconcile("lab")
    env.merge_pr(5, "lab: hv:2", fleet_files("1.1.0", "hv:2"))
    rec.reconcile("lab")
    journal = rec.store.current("lab")
    assert journal is not None and journal.pr_number == 5
    return journal


def test_a_burst_of_transitions_is_posted_once_newest_last(env: Env) -> None:
    journal = _started(env)
    forge = GatedForge(pulls=env.forge.pulls)
    mirror = PullRequestMirror(forge)
    try:
        mirror.publish(replace(journal, failure="first"))
        assert forge.entered.wait(10)  # the first state is being posted (held at the gate)
        for n in range(2, 6):
            mirror.publish(replace(journal, failure=f"state {n}"))
        forge.gate.set()
        assert mirror.flush(10)
    finally:
        mirror.close()
    assert len(forge.writes) == 2, forge.writes  # the first, then only the newest
    assert "state 5" in forge.writes[-1]
    assert any("state 5" in c for c in forge.comments_on(5))
    status = forge.statuses[(journal.desired_sha, "gitopsbot/apply")]
    assert status.state is CommitState.PENDING


def test_a_forge_failure_is_logged_and_the_next_state_posted(env: Env, caplog: Any) -> None:
    journal = _started(env)
    forge = GatedForge(pulls=env.forge.pulls, fail_next=True)
    forge.gate.set()
    mirror = PullRequestMirror(forge)
    try:
        mirror.publish(replace(journal, failure="lost"))
        assert mirror.flush(10)
        mirror.publish(replace(journal, status=OperationStatus.SUCCEEDED))
        assert mirror.flush(10)
    finally:
        mirror.close()
    assert "could not mirror on PR #5" in caplog.text
    assert forge.statuses[(journal.desired_sha, "gitopsbot/apply")].state is CommitState.SUCCESS


def test_the_loop_posts_through_the_mirror_and_the_pass_does_not_wait(env: Env) -> None:
    forge = GatedForge(pulls=env.forge.pulls)  # held: a pass that waited would never end
    mirror = PullRequestMirror(forge)
    rec = env.reconciler()
    rec.forge = forge
    rec.publish = mirror.publish
    try:
        rec.reconcile("lab")
        env.merge_pr(6, "lab: hv:2", fleet_files("1.1.0", "hv:2"))
        journal = drive(env, rec)
        assert journal.status is OperationStatus.SUCCEEDED, journal.failure
        assert forge.comments_on(6) == []  # nothing posted yet: the gate is closed
        forge.gate.set()
        assert mirror.flush(10)
    finally:
        forge.gate.set()
        mirror.close()
    assert len(forge.writes) < 5  # many transitions, coalesced while the gate was closed
    (body,) = forge.comments_on(6)
    assert "succeeded" in body.lower()
    assert forge.statuses[(journal.desired_sha, "gitopsbot/apply")].state is CommitState.SUCCESS


def test_a_restarted_bot_posts_the_running_operation_again(env: Env) -> None:
    journal = _started(env)
    assert journal.active
    assert env.forge.comments_on(5) == []  # killed before it was posted
    rec = env.reconciler(name="restarted")
    rec.reconcile("lab")
    assert any(journal.op_id in c for c in env.forge.comments_on(5))
