"""A pass that crashes (a bug: an exception outside the bot's error tree) is told as a failing
pass, not only logged: ``pass-failure.yaml`` for ``status``, the pass listeners (metrics,
``/readyz``) with an error, then raised to the scheduler. Only the exception's type is told:
its message may hold anything (a canary in it reaches neither Git nor the listeners). Found
at 1,000 clusters (#29): a ValueError in every helm step showed nowhere but the log."""

from __future__ import annotations

import pytest

from gitopsbot.core.records.journal import OperationStatus
from tests.executor.conftest import Env, fleet_files

CANARY = "canary-8e1f0c-not-for-git"


class Told:
    def __init__(self) -> None:
        self.errors: list[str] = []

    def pass_started(self, cluster: str) -> None:
        pass

    def pass_finished(
        self, cluster: str, *, action: str, detail: str, error: str, seconds: float
    ) -> None:
        self.errors.append(error)


def test_a_crashing_pass_is_recorded_and_told_without_its_message(env: Env) -> None:
    rec = env.reconciler()
    told = Told()
    rec.announcer.pass_listeners.append(told)
    rec.reconcile("lab")
    env.merge_pr(12, "lab: hv:2", fleet_files("1.0.0", "hv:2"))
    env.helm.fail("upgrade", ValueError(f"filedescriptor out of range {CANARY}"), times=5)
    with pytest.raises(ValueError):
        for _ in range(5):  # started, then the helm step's pass crashes
            rec.reconcile("lab")
    failure = rec.store.pass_failure("lab")
    assert failure is not None and "internal error (ValueError)" in failure.error
    assert told.errors[-1] == "internal error (ValueError); see the bot's log"
    assert not any(CANARY in e for e in told.errors)
    head = rec.store.head()
    assert head is not None
    everything = env.repo("reader")
    everything.fetch()
    for commit in everything.log("gitopsbot/state", None, 100):
        assert CANARY not in commit.message
    assert rec.store.current("lab").status is OperationStatus.RUNNING  # nothing ended
