"""A step's record waits in the bot's mirror for the next push when only reads or pool
changes follow (#13, ``operation.push_may_wait``): the bot goes on without waiting for the
remote, and the next transition's push (or the pass's end, when it does not come back at
once, or ``gitopsbot run``'s stop) carries it. A step that changes the cluster still has its
start pushed before it acts. Killed with a record unpushed, a restarted bot repeats only the
read the lost record covered.

Real Git (bare remote, the bot's pygit2 mirror); FakeHelm / FakeCluster at the edge."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from gitopsbot.bot.steps import controller as controller_steps
from gitopsbot.bot.steps.outcome import StepOutcome
from gitopsbot.core.operations import operation
from gitopsbot.core.records.journal import Journal, OperationStatus, StepKind, StepState
from gitopsbot.errors import GitUnavailable
from tests.executor.conftest import Env, fleet_files, git
from tests.executor.test_reconciler_upgrade import upgrades
from tests.executor.test_state_commits import _upgrade


def remote_subjects(env: Env) -> list[str]:
    git("fetch", "--quiet", "origin", cwd=env.human.path)
    out = git("log", "--format=%s", "origin/gitopsbot/state", cwd=env.human.path)
    return out.splitlines()


def _next_started(journal: Journal, name: str) -> Journal:
    """``journal`` with every step before ``name`` done and ``name`` started."""
    for step in journal.steps:
        if step.name == name:
            return journal.with_step(replace(step, state=StepState.RUNNING))
        journal = journal.with_step(replace(step, state=StepState.SUCCEEDED))
    raise AssertionError(name)


def test_only_reads_and_pool_changes_may_wait_for_the_push() -> None:
    j = _upgrade("backup")
    assert operation.push_may_wait(_next_started(j, "controller-ready"))
    assert operation.push_may_wait(_next_started(j, "verify"))
    first_pool = next(s.name for s in j.steps if s.kind is StepKind.POOL_PHASE)
    assert operation.push_may_wait(_next_started(j, first_pool))
    # The next step changes the cluster: its start must be on the remote before it acts.
    assert not operation.push_may_wait(_next_started(j, "crds"))
    assert not operation.push_may_wait(_next_started(j, "helm-upgrade"))
    # Ended, failed, or not running: pushed at once.
    done = j
    for step in j.steps:
        done = done.with_step(replace(step, state=StepState.SUCCEEDED))
    assert not operation.push_may_wait(done)
    ready = _next_started(j, "controller-ready")
    failed = ready.with_step(replace(ready.step("controller-ready"), state=StepState.FAILED))
    assert not operation.push_may_wait(failed)
    assert not operation.push_may_wait(replace(ready, status=OperationStatus.QUEUED))


def _to_helm_upgrade(env: Env):  # type: ignore[no-untyped-def]
    rec = env.reconciler()
    rec.reconcile("lab")
    env.merge_pr(7, "lab: chart 1.1.0, hypervisor hv:2", fleet_files("1.1.0", "hv:2"))
    for _ in range(10):
        rec.reconcile("lab")
        current = rec.store.current("lab")
        assert current is not None
        if current.step("helm-upgrade").state is StepState.RUNNING:
            return rec
    raise AssertionError("helm-upgrade never started")


def test_the_helm_upgrade_record_rides_on_the_next_push(env: Env) -> None:
    rec = _to_helm_upgrade(env)
    result = rec.reconcile("lab")  # helm-upgrade runs; controller-ready (a read) follows
    assert result.action == "succeeded" and result.next_at == env.clock.now()
    local = rec.store.current("lab")
    assert local is not None and local.step("helm-upgrade").state is StepState.SUCCEEDED
    assert rec.store.unpushed
    assert remote_subjects(env)[0] == "lab: crds succeeded; helm-upgrade started"
    # controller-ready (a read) succeeds: its record waits too, the first pool follows.
    assert rec.reconcile("lab").action == "succeeded"
    assert rec.store.unpushed
    # The pool's opening is pushed before the pass goes on, and carries both.
    rec.reconcile("lab")
    assert not rec.store.unpushed
    made = remote_subjects(env)
    assert made[2:0:-1] == [
        "lab: helm-upgrade succeeded; controller-ready started",
        "lab: controller-ready succeeded",
    ]
    assert "open-switch" in made[0]


def not_ready(monkeypatch: pytest.MonkeyPatch) -> None:
    """The controller never becomes ready: controller-ready keeps coming back later."""

    def waiting(cluster, step, spec, now, *, wait_slice):  # type: ignore[no-untyped-def]
        return StepOutcome(StepState.RUNNING, "controller not ready", retry_after=5)

    monkeypatch.setattr(controller_steps, "controller_ready", waiting)


def test_a_pass_that_does_not_come_back_at_once_pushes_what_waited(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    rec = _to_helm_upgrade(env)
    not_ready(monkeypatch)
    assert rec.reconcile("lab").action == "succeeded"
    assert rec.store.unpushed
    # The pass ends asking to come back later: nothing may stay in the mirror until then.
    result = rec.reconcile("lab")
    assert result.action == "running" and result.next_at is not None
    assert result.next_at > env.clock.now(), result
    assert not rec.store.unpushed
    assert any("helm-upgrade succeeded" in s for s in remote_subjects(env))


def test_killed_with_the_record_unpushed_the_restart_repeats_only_the_read(env: Env) -> None:
    rec = _to_helm_upgrade(env)
    before = upgrades(env)
    assert rec.reconcile("lab").action == "succeeded"
    assert rec.store.unpushed
    # The process dies here: its mirror, with the unpushed record, is gone with it.
    fresh = env.reconciler(name="restarted")
    for _ in range(60):
        fresh.reconcile("lab")
        env.world.tick()
        env.clock.t += timedelta(minutes=1)
        current = fresh.store.current("lab")
        if current is not None and not current.active:
            break
    assert current is not None and current.status is OperationStatus.SUCCEEDED, current
    assert upgrades(env) - before == 1  # the upgrade that landed was adopted, not repeated
    assert env.world.images() == {"hv:2"}


def test_a_push_that_fails_transiently_keeps_the_record_for_the_next(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    rec = _to_helm_upgrade(env)
    assert rec.reconcile("lab").action == "succeeded"
    assert rec.store.unpushed
    real = rec.store._repo.push

    def unavailable(branch: str) -> str:
        raise GitUnavailable("the remote is down")

    monkeypatch.setattr(rec.store._repo, "push", unavailable)
    rec.store.flush()  # logged, not raised: the next transition pushes it
    assert rec.store.unpushed
    monkeypatch.setattr(rec.store._repo, "push", real)
    rec.store.flush()
    assert not rec.store.unpushed
    assert "lab: helm-upgrade succeeded; controller-ready started" in remote_subjects(env)


def test_run_once_pushes_what_its_last_pass_left(env: Env) -> None:
    """``gitopsbot run --once`` stops after its passes; a record its last pass left for the
    next push goes out before it exits."""
    from gitopsbot import app
    from gitopsbot.commands.run import run_once

    rec = _to_helm_upgrade(env)
    ran: list[str] = []
    real = rec.reconcile

    def one_pass_then_stop(cluster: str, **kw: object) -> object:
        result = real(cluster)  # helm-upgrade: its record waits for the next push
        ran.append(cluster)
        return replace(result, next_at=None)  # as if the loop ended here

    rec.reconcile = one_pass_then_stop  # type: ignore[method-assign]
    bot = app.Bot(reconciler=rec, scheduler=None, clusters=("lab",))  # type: ignore[arg-type]
    assert run_once(bot) == 0
    assert ran == ["lab"]
    assert not rec.store.unpushed
    assert "lab: helm-upgrade succeeded; controller-ready started" in remote_subjects(env)
