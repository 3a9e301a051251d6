"""``gitopsbot run`` proposes (issue 29; issue 28 item 10): the in-cluster bot makes a proposal
pass every ``proposals.interval`` (``bot.proposal_watch``), wired by ``app.bot`` through the
bot's serialised repository and its forge, so new chart versions and failed-version requests
no longer need a separately run ``gitopsbot propose``."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from gitopsbot.app.bot import proposal_watch
from gitopsbot.app.options import RunOptions
from gitopsbot.bot.proposal_report import PassReport
from gitopsbot.bot.proposal_watch import ProposalWatch
from gitopsbot.bot.shared_repo import SharedRepo
from gitopsbot.core.fleet.model import BotSettings, ProposalSettings
from tests.proposals.conftest import World


@pytest.mark.slow
def test_runs_proposal_pass_opens_the_request_through_the_bots_repository(
    world_factory: Callable[..., World], tmp_path: Path
) -> None:
    world = world_factory(versions={"staging": "1.8.0"}, max_open=3)
    repo = world.repo()
    repo.fetch()
    options = RunOptions(fleet_url=world.remote_url, cache=tmp_path / "cache")
    watch = proposal_watch(
        options, SharedRepo(repo), BotSettings(), world.forge(), None, ("staging",)
    )
    assert watch is not None
    report = watch.pass_once()
    assert report is not None and report.problems == []
    assert [(p.cluster, p.version, p.opened) for p in report.proposals] == [
        ("staging", "1.8.3", True)
    ]
    (pr,) = world.forge_server.pulls.values()
    assert pr.head == "gitopsbot/staging/1.8.3" and pr.state == "open"
    again = watch.pass_once()  # the next interval: nothing new, nothing opened twice
    assert again is not None and not any(p.opened for p in again.proposals)
    assert len(world.forge_server.pulls) == 1


def test_no_proposals_with_no_propose_or_proposals_disabled(tmp_path: Path) -> None:
    options = RunOptions(fleet_url="file:///nowhere", cache=tmp_path)
    off = BotSettings(proposals=ProposalSettings(enabled=False))
    assert proposal_watch(options, None, off, None, None) is None  # type: ignore[arg-type]
    no = RunOptions(fleet_url="file:///nowhere", cache=tmp_path, propose=False)
    assert proposal_watch(no, None, BotSettings(), None, None) is None  # type: ignore[arg-type]


def test_only_the_replica_holding_the_first_cluster_proposes() -> None:
    ran: list[int] = []
    leading = {"now": False}

    def run_once() -> PassReport:
        ran.append(1)
        return PassReport(head="a" * 40)

    watch = ProposalWatch(interval_seconds=3600, run_once=run_once, leader=lambda: leading["now"])
    assert watch.pass_once() is None and ran == []
    leading["now"] = True
    assert watch.pass_once() is not None and ran == [1]


def test_a_failing_pass_is_tried_again_at_the_next_interval_and_close_stops_it() -> None:
    calls: list[int] = []
    second = threading.Event()

    def run_once() -> PassReport:
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("the forge is down")
        second.set()
        return PassReport(head="b" * 40)

    watch = ProposalWatch(interval_seconds=0.05, run_once=run_once)
    watch.start(first_after=0.0)
    try:
        assert second.wait(30), calls
    finally:
        watch.close(10)
    stopped = len(calls)
    time.sleep(0.2)
    assert len(calls) == stopped  # closed: no pass after
