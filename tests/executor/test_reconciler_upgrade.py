"""A whole upgrade through FakeCluster/FakeHelm/FakeForge and a real Git repository: baseline,
merge → operation, every step in order, pools one at a time with switches opened only by the
bot and closed at the end, verification, journal and backups on the state branch, the PR
mirrored (one comment, a status); and kill-and-resume at every step boundary with exactly one
helm upgrade."""

from __future__ import annotations

from datetime import timedelta

import pytest

from gitopsbot.bot.journal_store import JournalStore
from gitopsbot.bot.reconciler import Reconciler
from gitopsbot.core.forge.forge_types import CommitState
from gitopsbot.core.records.journal import OperationStatus, StepState
from tests.executor.conftest import Env, fleet_files


class Killed(BaseException):  # a kill: no `except Exception` of the bot sees it
    """The process died here."""


def drive(env: Env, rec: Reconciler, *, passes: int = 60, step: timedelta = timedelta(minutes=1)):
    """Run passes (one controller beat each) until the cluster's operation is finished."""
    for _ in range(passes):
        rec.reconcile("lab")
        env.world.tick()
        env.clock.t += step
        current = rec.store.current("lab")
        if current is not None and not current.active and rec.store.queued("lab") is None:
            return current
    raise AssertionError(f"not finished after {passes} passes: {rec.store.current('lab')}")


def upgrades(env: Env) -> int:
    return env.helm.calls.count("upgrade")


def test_whole_upgrade(env: Env) -> None:
    rec = env.reconciler()
    assert rec.reconcile("lab").action == "baseline"
    assert rec.reconcile("lab").action == "idle"
    sha = env.merge_pr(7, "lab: chart 1.1.0, hypervisor hv:2", fleet_files("1.1.0", "hv:2"))
    before = upgrades(env)

    journal = drive(env, rec)

    assert journal.status is OperationStatus.SUCCEEDED, journal.failure
    assert journal.desired_sha == sha and journal.pr_number == 7
    assert [s.name for s in journal.steps] == [
        "backup",
        "crds",
        "helm-upgrade",
        "controller-ready",
        "pool/a/hypervisor",
        "pool/b/hypervisor",
        "verify",
    ]
    assert all(s.state is StepState.SUCCEEDED for s in journal.steps)
    assert upgrades(env) - before == 1
    assert env.world.images() == {"hv:2"}
    assert not env.world.switch("a") and not env.world.switch("b")  # closed again
    # Pools went one after another: b's phase opened after a's finished.
    a, b = journal.step("pool/a/hypervisor"), journal.step("pool/b/hypervisor")
    assert a.finished_at is not None and b.started_at is not None and a.finished_at <= b.started_at
    # The rollback point is the revision before ours.
    assert journal.rollback_point is not None
    assert (journal.rollback_point.helm_revision, journal.rollback_point.chart_version) == (
        1,
        "1.0.0",
    )
    assert journal.rollback_point.images == {
        "a": {"hypervisor": "hv:1"},
        "b": {"hypervisor": "hv:1"},
    }
    latest = env.helm.history("tf", "tf-system")[-1]
    assert latest.description == f"gitopsbot op={journal.op_id} step=helm-upgrade"
    assert latest.chart_version == "1.1.0"
    # The state branch has the journal and the backups (read back through a fresh mirror).
    repo = env.repo("reader")
    head = repo.head("gitopsbot/state")
    assert repo.read(head, "clusters/lab/journal.yaml") is not None
    assert repo.read(head, f"clusters/lab/backups/{journal.op_id}/values.yaml") is not None
    assert b"hv:1" in repo.read(head, f"clusters/lab/backups/{journal.op_id}/tf-state.yaml")
    log = repo.log("gitopsbot/state", None, 200)
    assert sum("helm-upgrade started" in c.message for c in log) == 1
    # The PR shows the operation: one comment, edited in place, and a final success status.
    comments = [c for c in env.forge.comments_on(7) if journal.op_id in c]
    assert len(comments) == 1 and "succeeded" in comments[0]
    assert env.forge.status_of(sha, "gitopsbot/apply") is CommitState.SUCCESS


class KillingStore(JournalStore):
    """Dies right before the N-th journal write: the step ran, its record did not happen."""

    kill_at = -1
    kill_message: str | None = None
    writes = 0

    def save(self, journal, message, **kw):  # type: ignore[no-untyped-def]
        cls = type(self)
        cls.writes += 1
        if cls.writes == cls.kill_at or (cls.kill_message and cls.kill_message in message):
            cls.kill_message = None
            raise Killed(message)
        return super().save(journal, message, **kw)


def _run_with_kill(env: Env, kill: str | int) -> tuple[bool, object]:
    """Upgrade with one kill: before the journal write whose message contains ``kill`` (a
    string) or before the ``kill``-th write (an int). Returns (killed, final journal)."""
    KillingStore.writes = 0
    KillingStore.kill_at = kill if isinstance(kill, int) else -1
    KillingStore.kill_message = kill if isinstance(kill, str) else None
    rec = env.reconciler(store_cls=KillingStore)
    rec.reconcile("lab")
    env.merge_pr(7, "lab: chart 1.1.0", fleet_files("1.1.0", "hv:2"))
    killed = False
    for i in range(80):
        try:
            rec.reconcile("lab")
        except Killed:
            killed = True
            # A fresh process: a new mirror of the same remote, state from Git only.
            rec = env.reconciler(store_cls=KillingStore, name=f"restart-{i}")
        env.world.tick()
        env.clock.t += timedelta(minutes=1)
        current = rec.store.current("lab")
        if current is not None and not current.active:
            return killed, current
    raise AssertionError("did not finish")


def test_killed_after_helm_upgrade_before_recording_it(env: Env) -> None:
    before = upgrades(env)
    killed, current = _run_with_kill(env, "helm-upgrade succeeded")
    assert killed
    assert current.status is OperationStatus.SUCCEEDED
    assert upgrades(env) - before == 1  # recognised by its description, not repeated
    assert "already made by this operation" in current.step("helm-upgrade").detail


@pytest.mark.slow
def test_kill_and_resume_at_every_journal_write(tmp_path_factory, request) -> None:
    """For k = 1, 2, ...: die before the k-th write, restart from Git; until an operation
    completes without reaching k (every boundary has been tried)."""
    from tests.executor.conftest import make_env

    k = 0
    while True:
        k += 1
        env = make_env(tmp_path_factory.mktemp(f"kill{k}"))
        before = upgrades(env)
        killed, current = _run_with_kill(env, k)
        assert current.status is OperationStatus.SUCCEEDED, (k, current)
        assert upgrades(env) - before == 1, k
        assert env.world.images() == {"hv:2"}, k
        if not killed:
            break
    assert k > 10  # the operation really has that many transitions
