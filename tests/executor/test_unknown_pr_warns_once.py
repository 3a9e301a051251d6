"""Issue 17 item 7b: a "#3" in a merge commit's message that the forge does not know is
warned about once per operation, then only at DEBUG: the bot posts every transition of the
operation to its pull request, and a warning per pass (15 in 15 s) was noise."""

from __future__ import annotations

import logging
from dataclasses import replace

import pytest

from gitopsbot.bot.pr_mirror import PullRequestMirror
from tests.executor.conftest import Env, fleet_files


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.levelno >= logging.WARNING and "PR #3" in r.getMessage()
    ]


def _debugs(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.levelno == logging.DEBUG and "PR #3" in r.getMessage()
    ]


def test_an_unknown_pull_request_warns_once(env: Env, caplog: pytest.LogCaptureFixture) -> None:
    rec = env.reconciler()
    rec.reconcile("lab")
    env.human.commit("lab: hv:2 (#3)", fleet_files("1.1.0", "hv:2"))  # #3: not on the forge
    assert 3 not in env.forge.pulls
    with caplog.at_level(logging.DEBUG, logger="gitopsbot"):
        for _ in range(8):
            rec.reconcile("lab")
            env.clock.sleep(1)
            env.world.tick()
    journal = rec.store.current("lab")
    assert journal is not None and journal.pr_number == 3
    [warning] = _warnings(caplog)
    assert "does not know it" in warning and journal.op_id in warning
    assert _debugs(caplog), "the later attempts are still logged, at DEBUG"
    # The merge commit's status is still set: the forge knows the commit, not the number.
    assert any(sha == journal.desired_sha for sha, _ in env.forge.statuses), env.forge.statuses


def test_the_background_mirror_warns_once_too(env: Env, caplog: pytest.LogCaptureFixture) -> None:
    rec = env.reconciler()
    rec.forge = None  # the test posts through the mirror
    rec.reconcile("lab")
    env.human.commit("lab: hv:2 (#3)", fleet_files("1.1.0", "hv:2"))
    rec.reconcile("lab")
    journal = rec.store.current("lab")
    assert journal is not None and journal.pr_number == 3
    mirror = PullRequestMirror(env.forge)
    try:
        with caplog.at_level(logging.DEBUG, logger="gitopsbot"):
            for n in range(5):
                mirror.publish(replace(journal, failure=f"state {n}"))
                assert mirror.flush(10)
    finally:
        mirror.close()
    assert len(_warnings(caplog)) == 1 and len(_debugs(caplog)) == 4
