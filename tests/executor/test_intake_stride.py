"""A merge for another cluster costs this cluster nothing on the state branch (issue 29).

Every cluster's intake used to record "nothing new up to <head>" whenever the watched branch
moved: at N clusters, one merge was N state-branch commits and N pushes. Now a cluster whose
files no commit touched remembers where it looked, and records its ``seen`` only once every
``SEEN_STRIDE`` commits, so a restart walks back at most that far."""

from __future__ import annotations

from gitopsbot.bot.intake import SEEN_STRIDE
from gitopsbot.core.records.journal import OperationStatus
from tests.executor.conftest import Env, fleet_files
from tests.executor.test_reconciler_upgrade import drive


def _others(env: Env, n: int, start: int = 0) -> str:
    head = ""
    for i in range(start, start + n):
        head = env.human.commit(f"another team's change {i}", {"README.md": f"change {i}\n"})
    return head


def test_commits_for_others_record_nothing_until_the_stride_then_once(env: Env) -> None:
    rec = env.reconciler()
    assert rec.reconcile("lab").action == "baseline"
    baseline = rec.store.seen("lab")
    state = rec.store.head()
    _others(env, 3)
    for _ in range(3):
        assert rec.reconcile("lab").action == "idle"
    assert rec.store.head() == state  # no commit, so no push
    assert rec.store.seen("lab") == baseline
    head = _others(env, SEEN_STRIDE, start=3)
    assert rec.reconcile("lab").action == "idle"
    assert rec.store.seen("lab") == head  # walked SEEN_STRIDE or more: recorded, once
    after = rec.store.head()
    rec.reconcile("lab")
    assert rec.store.head() == after


def test_a_restart_walks_back_to_the_recorded_seen_and_misses_nothing(env: Env) -> None:
    rec = env.reconciler()
    rec.reconcile("lab")
    _others(env, 2)
    rec.reconcile("lab")
    # A change for lab lands between other teams' changes; a new bot (a restart) takes it in.
    sha = env.merge_pr(7, "lab: hv:2", fleet_files("1.0.0", "hv:2"))
    _others(env, 2, start=2)
    again = env.reconciler()
    done = drive(env, again)
    assert (done.desired_sha, done.status) == (sha, OperationStatus.SUCCEEDED), done.failure
