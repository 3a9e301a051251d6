"""The bot itself keeps the comparison of a rehearsal with the real operation (issue 15): when
an operation finishes, succeeded or failed, and its desired commit was rehearsed with
``--record``, ``rehearsals/<cluster>/<sha>.compared.yaml`` appears on the state branch, once.
Through the Reconciler on a real Git fleet repository (tests/executor/conftest.py): a commit
never rehearsed costs one read and writes nothing; a comparison that raises is logged and
leaves the operation's outcome as it was."""

from __future__ import annotations

import logging
from datetime import timedelta
from pathlib import Path

import pytest

from gitopsbot.bot import rehearsal_store
from gitopsbot.bot.reconciler import Reconciler
from gitopsbot.core import rehearsal as rh
from gitopsbot.core.records.journal import Journal, OperationStatus
from tests.executor.conftest import Env, fleet_files, make_env


def _rehearsal(sha: str, env: Env) -> rh.Rehearsal:
    t0 = env.clock.t
    pools = tuple(
        rh.PoolRun(name, 2, ("hypervisor",), rh.Outcome.DONE, t0, t0 + timedelta(seconds=120))
        for name in ("a", "b")
    )
    return rh.Rehearsal(
        "lab", "tensor-fusion 1.1.0", sha, t0, t0 + timedelta(seconds=240), pools,
        (), (), (), "rollback",
    )  # fmt: skip


def _drive(env: Env, rec: Reconciler, passes: int = 60) -> Journal:
    for _ in range(passes):
        rec.reconcile("lab")
        env.world.tick()
        env.clock.t += timedelta(minutes=1)
        current = rec.store.current("lab")
        if current is not None and not current.active and rec.store.queued("lab") is None:
            return current
    raise AssertionError(f"not finished: {rec.store.current('lab')}")


def _kept(env: Env, sha: str) -> dict[str, object] | None:
    """The comparison as the remote has it (a fresh mirror: what was pushed)."""
    repo = env.repo("reader")
    head = repo.head("gitopsbot/state")
    data = None if head is None else repo.read(head, rh.comparison_path("lab", sha))
    return None if data is None else rh.loads(data.decode())


def _comparisons_committed(env: Env) -> int:
    log = env.repo("counter").log("gitopsbot/state", None, 500)
    return sum("rehearsal vs" in c.message for c in log)


@pytest.fixture
def env(tmp_path: Path) -> Env:
    return make_env(tmp_path)


def test_a_rehearsed_commit_gets_its_comparison_once(env: Env) -> None:
    rec = env.reconciler()
    rec.reconcile("lab")
    sha = env.merge_pr(7, "lab: chart 1.1.0, hv:2", fleet_files("1.1.0", "hv:2"))
    rehearsal_store.save(rec.store, _rehearsal(sha, env))

    done = _drive(env, rec)

    assert done.status is OperationStatus.SUCCEEDED, done.failure
    kept = _kept(env, sha)  # pushed by the pass, with no push of its own
    assert kept is not None and kept["operation"] == done.op_id
    pools = kept["pools"]
    assert isinstance(pools, dict) and set(pools) == {"a", "b"}
    assert all(row["predicted_seconds"] == 120 for row in pools.values())
    assert rehearsal_store.load(rec.store, "lab", sha) is not None  # the predictions stay
    # A restart (a new mirror, a new reconciler) and more passes: never written again.
    again = env.reconciler(name="restarted")
    for _ in range(3):
        again.reconcile("lab")
        env.clock.t += timedelta(minutes=1)
    again.compare_rehearsal(done)  # the finish recorded once more: still nothing new
    again.store.flush()
    assert _comparisons_committed(env) == 1


def test_a_failed_operation_is_compared_too(env: Env) -> None:
    env.world.pending.add("a-gpu-1")  # pool a never finishes (F4): the operation fails
    rec = env.reconciler()
    rec.reconcile("lab")
    sha = env.merge_pr(5, "lab: hv:2", fleet_files("1.0.0", "hv:2", stall="2m", on_failure="halt"))
    rehearsal_store.save(rec.store, _rehearsal(sha, env))

    done = _drive(env, rec, passes=30)

    assert done.status is OperationStatus.FAILED and done.remediation == "halt"
    kept = _kept(env, sha)
    assert kept is not None and kept["operation"] == done.op_id
    assert _comparisons_committed(env) == 1


def test_a_commit_never_rehearsed_costs_one_read_and_writes_nothing(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    rec = env.reconciler()
    rec.reconcile("lab")
    sha = env.merge_pr(7, "lab: chart 1.1.0, hv:2", fleet_files("1.1.0", "hv:2"))
    reads: list[str] = []
    read = rec.store.repo.read

    def counted(commit: str, path: str) -> bytes | None:
        if path.startswith("rehearsals/"):
            reads.append(path)
        return read(commit, path)

    monkeypatch.setattr(rec.store.repo, "read", counted)

    done = _drive(env, rec)

    assert done.status is OperationStatus.SUCCEEDED, done.failure
    assert reads == [rh.record_path("lab", sha)]
    assert _kept(env, sha) is None and _comparisons_committed(env) == 0
    repo = env.repo("reader2")
    head = repo.head("gitopsbot/state")
    assert head is not None and repo.tree(head).list("rehearsals") == []


def test_a_comparison_that_raises_leaves_the_outcome_alone(
    env: Env, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(*args: object, **kw: object) -> None:
        raise RuntimeError("token=s3cr3t-value")

    monkeypatch.setattr(rehearsal_store, "compare_finished", broken)
    rec = env.reconciler()
    rec.reconcile("lab")
    sha = env.merge_pr(7, "lab: chart 1.1.0, hv:2", fleet_files("1.1.0", "hv:2"))
    rehearsal_store.save(rec.store, _rehearsal(sha, env))
    actions: list[str] = []
    with caplog.at_level(logging.WARNING):
        for _ in range(60):
            actions.append(rec.reconcile("lab").action)
            env.world.tick()
            env.clock.t += timedelta(minutes=1)
            current = rec.store.current("lab")
            if current is not None and not current.active:
                break

    assert current is not None and current.status is OperationStatus.SUCCEEDED
    assert actions[-1] == "succeeded"
    assert env.repo("reader").head("gitopsbot/state") is not None
    assert _kept(env, sha) is None
    warned = [r.getMessage() for r in caplog.records if "not compared" in r.getMessage()]
    assert len(warned) == 1 and current.op_id in warned[0] and "RuntimeError" in warned[0]
    assert "s3cr3t" not in caplog.text
