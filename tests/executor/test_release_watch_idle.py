"""#29: the idle check with a release watch (``Reconciler.release_watch``, docs/executor.md
"The idle check"). While the watch is healthy the release is looked at every
MANUAL_CHECK_WATCHED, not every minute; a change the watch reports is looked at in the very
next pass; a watch that is not healthy leaves the look at every MANUAL_CHECK, so an
unreachable cluster fails its pass as soon as without a watch. Fake clock, fake watch."""

from __future__ import annotations

from datetime import timedelta

import pytest

from gitopsbot.bot.reconciler import MANUAL_CHECK, MANUAL_CHECK_WATCHED, Reconciler
from gitopsbot.core.records.journal import OperationStatus
from gitopsbot.errors import GitOpsBotError, TransientError
from gitopsbot.ports.helm import ChartRef, UpgradeRequest
from gitopsbot.testing import FakeReleaseWatch
from tests.executor.conftest import NS, RELEASE, Env, fleet_files
from tests.executor.test_reconciler_upgrade import drive


def idle_after_an_upgrade(env: Env, watch: FakeReleaseWatch) -> Reconciler:
    rec = env.reconciler()
    rec.release_watch = watch
    rec.reconcile("lab")
    env.merge_pr(14, "lab: hv:2", fleet_files("1.0.0", "hv:2"))
    assert drive(env, rec).status is OperationStatus.SUCCEEDED
    env.clock.t += timedelta(minutes=5)
    assert rec.reconcile("lab").action == "idle"  # the first look: the watch is started
    assert watch.followed == ["lab"]
    env.helm.calls.clear()
    return rec


def break_glass(env: Env) -> None:
    env.helm.upgrade(
        UpgradeRequest(
            release=RELEASE,
            namespace=NS,
            chart=ChartRef(name="tensor-fusion", repo_url="https://charts.example.invalid"),
            version="1.1.0",
            values={"cluster": {"name": "lab-tfc", "hypervisorImage": "hv:9"}},
            description="break-glass by carol",
        )
    )


def looks(env: Env, rec: Reconciler, passes: int, every: timedelta) -> int:
    """Idle passes ``every`` apart; how many looked at the release."""
    env.helm.calls.clear()
    for _ in range(passes):
        env.clock.t += every
        assert rec.reconcile("lab").action == "idle"
    return env.helm.calls.count("release_mark")


def test_a_healthy_watch_stretches_the_look_and_its_change_is_read_at_once(env: Env) -> None:
    watch = FakeReleaseWatch(healthy=True)
    rec = idle_after_an_upgrade(env, watch)
    # 9 minutes of passes every 30 s: no look at all (the watch would say)
    assert looks(env, rec, 18, timedelta(seconds=30)) == 0
    break_glass(env)  # a person's helm upgrade while idle; the watch reports it
    watch.change("lab")
    env.clock.t += timedelta(seconds=1)  # the nudged pass, long before a minute
    assert rec.reconcile("lab").action == "idle"
    assert env.helm.calls.count("status") == 1
    found = rec.store.manual_revision("lab")
    assert found is not None and found.description == "break-glass by carol"
    # the safety net: a look every MANUAL_CHECK_WATCHED even if the watch says nothing
    assert looks(env, rec, 2, MANUAL_CHECK_WATCHED) == 2


def test_an_unhealthy_watch_leaves_the_look_every_minute(env: Env) -> None:
    watch = FakeReleaseWatch(healthy=True)
    rec = idle_after_an_upgrade(env, watch)
    assert looks(env, rec, 2, timedelta(seconds=30)) == 0
    watch.is_healthy = False  # the watch broke: the next pass past a minute looks
    assert looks(env, rec, 4, MANUAL_CHECK) == 4
    # ... so an unreachable cluster fails its pass at the next look, as without a watch
    env.helm.fail("status", TransientError("connection refused"), times=10)
    env.clock.t += MANUAL_CHECK
    with pytest.raises(GitOpsBotError):
        rec.reconcile("lab")
    assert rec.store.pass_failure("lab") is not None


def test_a_change_whose_look_failed_is_looked_at_again_by_the_next_pass(env: Env) -> None:
    watch = FakeReleaseWatch(healthy=True)
    rec = idle_after_an_upgrade(env, watch)
    break_glass(env)
    watch.change("lab")  # taken by the next pass, whose look fails
    env.helm.fail("status", TransientError("connection reset"))
    env.clock.t += timedelta(seconds=1)
    with pytest.raises(GitOpsBotError):
        rec.reconcile("lab")
    env.clock.t += timedelta(seconds=30)  # the next poll: the change is still to look at
    assert rec.reconcile("lab").action == "idle"
    found = rec.store.manual_revision("lab")
    assert found is not None and found.description == "break-glass by carol"
