"""The backup runs before a new operation's first record and is recorded with it (#13): one
commit carries the operation, its backup (files and rollback point) and the next step's
start, so the first change comes one pass and one push sooner.

It only reads the cluster, so: an API error there records the operation without it (the
step then runs as usual, with its retries); killed before the record, the next pass records
the operation afresh, once, with a backup taken then."""

from __future__ import annotations

from typing import Any

import pytest

from gitopsbot.bot.journal_store import JournalStore
from gitopsbot.core.records.journal import OperationStatus, StepState
from gitopsbot.errors import KubeServerError
from tests.executor.conftest import Env, fleet_files, git


class Killed(BaseException):  # a kill: no `except Exception` of the bot sees it
    """The process died here."""


def state_subjects(env: Env) -> list[str]:
    git("fetch", "--quiet", "origin", cwd=env.human.path)
    log = git("log", "--format=%s", "origin/gitopsbot/state", cwd=env.human.path)
    return log.splitlines()


def backup_files(env: Env, op_id: str) -> list[str]:
    git("fetch", "--quiet", "origin", cwd=env.human.path)
    out = git(
        "ls-tree",
        "-r",
        "--name-only",
        "origin/gitopsbot/state",
        f"clusters/lab/backups/{op_id}",
        cwd=env.human.path,
    )
    return sorted(p.rsplit("/", 1)[-1] for p in out.splitlines())


def test_the_first_record_carries_the_backup_and_the_next_start(env: Env) -> None:
    rec = env.reconciler()
    rec.reconcile("lab")
    before = len(state_subjects(env))
    env.merge_pr(7, "lab: chart 1.1.0, hypervisor hv:2", fleet_files("1.1.0", "hv:2"))
    result = rec.reconcile("lab")
    assert result.action == "started", result
    journal = rec.store.current("lab")
    assert journal is not None and journal.status is OperationStatus.RUNNING
    made = state_subjects(env)[: len(state_subjects(env)) - before]
    assert made == [f"lab: upgrade {journal.op_id} started; backup succeeded; crds started"]
    backup, crds = journal.step("backup"), journal.step("crds")
    assert backup.state is StepState.SUCCEEDED and backup.started_at is not None
    assert journal.rollback_point is not None and journal.rollback_point.helm_revision >= 1
    assert backup_files(env, journal.op_id) == ["tf-state.yaml", "values.yaml"]
    assert crds.state is StepState.RUNNING and crds.started_at is not None
    # The next pass applies the CRDs at once: their start is already pushed.
    assert rec.reconcile("lab").action == "succeeded"
    assert state_subjects(env)[0] == "lab: crds succeeded; helm-upgrade started"


def test_an_api_error_during_the_backup_records_the_operation_without_it(env: Env) -> None:
    rec = env.reconciler()
    rec.reconcile("lab")
    env.merge_pr(7, "lab: chart 1.1.0, hypervisor hv:2", fleet_files("1.1.0", "hv:2"))
    env.cluster.fail("list", KubeServerError("etcd is slow"))
    assert rec.reconcile("lab").action == "started"
    journal = rec.store.current("lab")
    assert journal is not None and journal.status is OperationStatus.RUNNING
    assert journal.step("backup").state is StepState.PENDING
    assert journal.rollback_point is None
    assert state_subjects(env)[0] == f"lab: upgrade {journal.op_id} started"
    # The step runs as usual on the next pass.
    assert rec.reconcile("lab").action == "succeeded"
    journal = rec.store.current("lab")
    assert journal is not None and journal.step("backup").state is StepState.SUCCEEDED
    assert journal.rollback_point is not None
    assert backup_files(env, journal.op_id) == ["tf-state.yaml", "values.yaml"]


class DiesBeforeTheFirstRecord(JournalStore):
    """Dies in the save of the operation's first record, before anything is committed."""

    armed = True

    def save(self, journal: Any, message: str, **kw: Any) -> str:
        cls = type(self)
        if cls.armed and "started" in message:
            cls.armed = False
            raise Killed(message)
        return super().save(journal, message, **kw)


def test_killed_after_the_backup_before_the_record(env: Env) -> None:
    rec = env.reconciler()
    rec.reconcile("lab")
    before = len(state_subjects(env))
    env.merge_pr(7, "lab: chart 1.1.0, hypervisor hv:2", fleet_files("1.1.0", "hv:2"))
    dying = env.reconciler(store_cls=DiesBeforeTheFirstRecord, name="dying")
    with pytest.raises(Killed):
        dying.reconcile("lab")
    assert len(state_subjects(env)) == before  # nothing recorded, nothing changed
    again = env.reconciler(name="restarted")
    assert again.reconcile("lab").action == "started"
    journal = again.store.current("lab")
    assert journal is not None and journal.step("backup").state is StepState.SUCCEEDED
    made = state_subjects(env)[: len(state_subjects(env)) - before]
    assert made == [f"lab: upgrade {journal.op_id} started; backup succeeded; crds started"]
