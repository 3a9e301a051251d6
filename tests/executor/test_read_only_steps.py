"""Issue #13: transitions that buy no safety are gone.

- A read-only step (backup, controller-ready, verify) runs from PENDING without a "started"
  commit: its start is recorded with its outcome, or with its first RUNNING save. A kill
  before that save just runs the read again, once.
- A pool phase that finishes lets the next pool open in the same pass, one save for both;
  the Lease is asked before that second round of switch changes.

Real Git (bare remote, the bot's pygit2 mirror); FakeHelm / FakeCluster at the edge."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from datetime import timedelta
from typing import ClassVar

import pytest

from gitopsbot.bot.driving import Drive
from gitopsbot.bot.journal_store import JournalStore
from gitopsbot.bot.reconciler import Reconciler
from gitopsbot.bot.steps.executor import Executor
from gitopsbot.bot.steps.outcome import StepOutcome
from gitopsbot.core.operations import operation
from gitopsbot.core.records.journal import Journal, OperationStatus, StepKind, StepState
from tests.executor.conftest import Env, fleet_files
from tests.executor.test_reconciler_upgrade import Killed, drive, upgrades
from tests.executor.test_state_commits import state_log


def test_only_the_steps_that_change_the_cluster_need_a_recorded_start() -> None:
    needs = {kind for kind in StepKind if operation.start_must_be_recorded(kind)}
    assert {StepKind.CRDS, StepKind.HELM_UPGRADE, StepKind.CONTROLLER_RESTART} <= needs
    assert StepKind.ROLLBACK in needs
    # A rotation's Secret write and hypervisor deletions change the cluster; its agent check
    # reads logs (the step's start is only its timeout's origin).
    assert {StepKind.VENDOR_SECRET, StepKind.HYPERVISOR_RESTART} <= needs
    read_only = {
        StepKind.BACKUP, StepKind.CONTROLLER_READY, StepKind.VERIFY, StepKind.AGENT_RECONNECT
    }  # fmt: skip
    assert read_only == operation.READ_ONLY_STEPS
    assert not needs & operation.READ_ONLY_STEPS


class SaveLog(JournalStore):
    """Remembers every journal write's message (class-wide: restarts share it); dies before
    the first write whose message contains ``kill_before``."""

    messages: ClassVar[list[str]] = []
    kill_before: ClassVar[str | None] = None

    def save(self, journal, message, **kw):  # type: ignore[no-untyped-def]
        cls = type(self)
        if cls.kill_before is not None and cls.kill_before in message:
            cls.kill_before = None
            raise Killed(message)
        cls.messages.append(message)
        return super().save(journal, message, **kw)


@pytest.fixture
def save_log() -> Iterator[type[SaveLog]]:
    SaveLog.messages = []
    SaveLog.kill_before = None
    yield SaveLog
    SaveLog.kill_before = None


@pytest.fixture
def backup_as_its_own_step(monkeypatch: pytest.MonkeyPatch) -> None:
    """The backup runs as a step of its own, as it does when the attempt before the
    operation's first record did not succeed (tests/executor/test_backup_with_first_record.py
    covers that attempt)."""
    monkeypatch.setattr(Reconciler, "backed_up", lambda self, journal, spec, now: (journal, {}))


@pytest.fixture
def backups(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The op id of every backup the executor ran."""
    ran: list[str] = []
    real = Executor.backup

    def counting(self: Executor, journal: Journal, spec):  # type: ignore[no-untyped-def]
        ran.append(journal.op_id)
        return real(self, journal, spec)

    monkeypatch.setattr(Executor, "backup", counting)
    return ran


@pytest.mark.usefixtures("backup_as_its_own_step")
def test_killed_during_backup_it_runs_again_once_and_the_upgrade_finishes(
    env: Env, save_log: type[SaveLog], backups: list[str]
) -> None:
    rec = env.reconciler(store_cls=save_log)
    rec.reconcile("lab")
    before = len(state_log(env))
    env.merge_pr(7, "lab: chart 1.1.0", fleet_files("1.1.0", "hv:2"))
    assert rec.reconcile("lab").action == "started"
    # Dies after the backup read everything, before its outcome reached Git.
    save_log.kill_before = "backup succeeded"
    with pytest.raises(Killed):
        rec.reconcile("lab")
    assert len(backups) == 1
    dead = rec.store.current("lab")
    assert dead is not None and dead.step("backup").state is StepState.PENDING  # no start
    assert dead.step("backup").started_at is None
    upgraded = upgrades(env)

    fresh = env.reconciler(store_cls=save_log, name="restarted")
    done = drive(env, fresh)
    assert done.status is OperationStatus.SUCCEEDED, done.failure
    assert len(backups) == 2  # the read ran again, once
    assert upgrades(env) - upgraded == 1
    backup = done.step("backup")
    assert backup.state is StepState.SUCCEEDED and backup.attempts == 1
    assert backup.started_at is not None and backup.started_at <= backup.finished_at
    made = state_log(env)[before:]
    assert not any("backup started" in m for m in made)
    assert sum(m.startswith("lab: backup succeeded") for m in made) == 1
    assert done.rollback_point is not None and done.rollback_point.helm_revision == 1


class Waiting:
    """An executor whose every step answers RUNNING with the same empty detail."""

    def run(self, step, journal, spec, *, now, rollback_to=None):  # type: ignore[no-untyped-def]
        return StepOutcome(StepState.RUNNING, "", retry_after=1)


def _started(env: Env, rec: Reconciler) -> Journal:
    rec.reconcile("lab")
    env.merge_pr(7, "lab: chart 1.1.0", fleet_files("1.1.0", "hv:2"))
    assert rec.reconcile("lab").action == "started"
    journal = rec.store.current("lab")
    assert journal is not None and journal.step("backup").state is StepState.PENDING
    return journal


@pytest.mark.usefixtures("backup_as_its_own_step")
def test_a_read_only_step_still_running_records_its_start_once(
    env: Env, save_log: type[SaveLog]
) -> None:
    rec = env.reconciler(store_cls=save_log)
    journal = _started(env, rec)
    spec = rec.spec_at(journal.desired_sha, "lab")
    assert spec is not None
    now = env.clock.now()
    save_log.messages.clear()
    # RUNNING with a detail that did not change: saved anyway, since the start is not on the
    # state branch yet (a timeout counts from it across restarts).
    waiting = Drive(spec, Waiting())  # type: ignore[arg-type]
    rec.driver.run_step(journal.step("backup"), journal, waiting, now)
    assert save_log.messages == ["backup: "]
    recorded = env.reconciler(name="reader").store.current("lab")
    assert recorded is not None
    step = recorded.step("backup")
    assert (step.state, step.started_at, step.attempts) == (StepState.RUNNING, now, 1)
    # The next pass (a restart, even) keeps that start and saves nothing new.
    later = now + timedelta(minutes=2)
    rec.driver.run_step(step, recorded, waiting, later)
    assert save_log.messages == ["backup: "]
    again = env.reconciler(name="reader-2").store.current("lab")
    assert again is not None and again.step("backup").started_at == now


@pytest.mark.usefixtures("backup_as_its_own_step")
def test_a_step_that_changes_the_cluster_still_pushes_its_start_first(
    env: Env, save_log: type[SaveLog]
) -> None:
    rec = env.reconciler(store_cls=save_log)
    journal = _started(env, rec)
    journal = journal.with_step(replace(journal.step("backup"), state=StepState.SUCCEEDED))
    spec = rec.spec_at(journal.desired_sha, "lab")
    assert spec is not None
    save_log.messages.clear()
    crds = journal.step("crds")
    waiting = Drive(spec, Waiting())  # type: ignore[arg-type]
    rec.driver.run_step(crds, journal, waiting, env.clock.now())
    assert save_log.messages == ["crds started"]  # before it acted; RUNNING "" adds none


def _until_pool_a_is_about_to_finish(env: Env, rec: Reconciler) -> Journal:
    """Passes until pool a's last batch moved (synced at 100 in the cluster, 50 % recorded):
    the next pass finds its phase done."""
    rec.reconcile("lab")
    env.merge_pr(7, "lab: chart 1.1.0, hypervisor hv:2", fleet_files("1.1.0", "hv:2"))
    for _ in range(30):
        rec.reconcile("lab")
        env.world.tick()
        env.clock.t += timedelta(minutes=1)
        journal = rec.store.current("lab")
        assert journal is not None and journal.active
        if journal.phase("pool/a/hypervisor").progress == 50:
            assert env.world.switch("a") and not env.world.switch("b")
            return journal
    raise AssertionError("pool a never reached 50 %")


def test_a_pool_boundary_opens_the_next_pool_in_the_same_pass_with_one_save(
    env: Env, save_log: type[SaveLog]
) -> None:
    rec = env.reconciler(store_cls=save_log)
    _until_pool_a_is_about_to_finish(env, rec)
    commits = len(state_log(env))
    save_log.messages.clear()

    result = rec.reconcile("lab")

    assert result.action == "pools"
    assert save_log.messages == [
        "pool/a/hypervisor close-switch 100%; pool/b/hypervisor open-switch 0%"
    ]
    assert len(state_log(env)) == commits + 1  # one commit, one push
    assert not env.world.switch("a") and env.world.switch("b")
    journal = rec.store.current("lab")
    assert journal is not None
    a, b = journal.step("pool/a/hypervisor"), journal.step("pool/b/hypervisor")
    assert a.state is StepState.SUCCEEDED and b.state is StepState.RUNNING
    assert a.finished_at is not None and b.started_at is not None
    assert a.finished_at <= b.started_at


def test_a_lease_lost_between_pool_rounds_stops_before_the_switch_change(
    env: Env, save_log: type[SaveLog]
) -> None:
    rec = env.reconciler(store_cls=save_log)
    recorded = _until_pool_a_is_about_to_finish(env, rec)
    commits = len(state_log(env))
    save_log.messages.clear()
    asked: list[str] = []

    def held_once(cluster: str) -> bool:  # held for the pass's first decision only
        asked.append(cluster)
        return len(asked) == 1

    rec.may_act = held_once
    result = rec.reconcile("lab")

    assert len(asked) == 2  # asked again before the next pool's round
    assert result.action == "paused" and "lease not held" in result.detail
    assert not env.world.switch("b")  # the next pool was not opened
    assert not env.world.switch("a")  # the first round (held) closed a's switch
    assert save_log.messages == [] and len(state_log(env)) == commits  # recorded nothing
    assert rec.store.current("lab") == recorded
    # The replica taking over observes what was done and carries on.
    other = env.reconciler(store_cls=save_log, name="other-replica")
    done = drive(env, other)
    assert done.status is OperationStatus.SUCCEEDED, done.failure
    assert env.world.images() == {"hv:2"}
    assert not env.world.switch("a") and not env.world.switch("b")


PARALLEL = (
    "order: [a, b, c]\nmaxParallelPools: 2\nonFailure: rollback\ncontrollerReadyTimeout: 180s\n"
    "pools:\n"
    "  a:\n    autoUpdateHypervisor: true\n    batchPercentage: 50\n    phases: [hypervisor]\n"
    "  b:\n    autoUpdateHypervisor: true\n    batchPercentage: 25\n    phases: [hypervisor]\n"
    "  c:\n    autoUpdateHypervisor: true\n    batchPercentage: 50\n    phases: [hypervisor]\n"
)


def test_pools_in_parallel_a_boundary_pass_decides_again_and_names_each_pool_once(
    env: Env, save_log: type[SaveLog]
) -> None:
    # a (2 batches) and b (4 batches) roll side by side; when a finishes, c may open. c's
    # nodes come up already on the new image, so c is done at once and its round finishes
    # too: three rounds in the pass, b still rolling in each.
    env.world.nodes["b"] = 4
    env.world.nodes["c"] = 2
    rec = env.reconciler(store_cls=save_log)
    rec.reconcile("lab")
    files = fleet_files("1.1.0", "hv:2")
    files["clusters/lab/rollout.yaml"] = PARALLEL
    env.merge_pr(7, "lab: chart 1.1.0, three pools", files)
    boundary: list[str] = []
    for _ in range(40):
        save_log.messages.clear()
        rec.reconcile("lab")
        if any("pool/a/hypervisor close-switch" in m for m in save_log.messages):
            boundary = list(save_log.messages)
            break
        env.world.tick()
        env.clock.t += timedelta(minutes=1)
    assert len(boundary) == 1, boundary  # one save for every round of the pass
    notes = boundary[0].split("; ")
    assert notes[0] == "pool/a/hypervisor close-switch 100%"
    assert "pool/c/hypervisor done 100%" in notes
    steps = [n.split()[0] for n in notes]
    assert len(steps) == len(set(steps)) == 3, notes  # b's wait said once, not per round
    journal = rec.store.current("lab")
    assert journal is not None
    assert journal.step("pool/a/hypervisor").state is StepState.SUCCEEDED
    assert journal.step("pool/c/hypervisor").state is StepState.SUCCEEDED
    assert journal.step("pool/b/hypervisor").state is StepState.RUNNING
    assert env.world.switch("b") and not env.world.switch("a") and not env.world.switch("c")
    done = drive(env, rec)
    assert done.status is OperationStatus.SUCCEEDED, done.failure
    assert env.world.images() == {"hv:2"}
