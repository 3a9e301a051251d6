"""A webhook's push wakes the clusters it touched (bot.push_router), over real Git: the
fleet's remote, a person's clone pushing, the bot's mirror fetching."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from gitopsbot.bot.push_router import PushRouter
from gitopsbot.bot.shared_repo import SharedRepo
from gitopsbot.errors import GitFailed
from gitopsbot.ports.repo import Repo

if TYPE_CHECKING:
    from tests.git.conftest import Fleet


def _router(repo: Repo, woken: list[str | None]) -> PushRouter:
    return PushRouter(
        repo, watched=lambda: "main", clusters=lambda: ("alpha", "beta"), nudge=woken.append
    )


def test_each_push_wakes_the_clusters_whose_files_it_changed(fleet: Fleet) -> None:
    human = fleet.human()
    woken: list[str | None] = []
    router = _router(fleet.bot(), woken)
    try:
        assert router.route() is None and woken == [None]  # the first push: everyone
        human.commit("alpha: tuning", {"clusters/alpha/values.yaml": "hypervisor: {}\n"})
        human.push()
        assert router.route() == {"alpha"} and woken[1:] == ["alpha"]
        human.commit("both", {"clusters/alpha/rollout.yaml": "paused: true\n",
                              "clusters/beta/values.yaml": "a: 1\n"})  # fmt: skip
        human.push()
        assert router.route() == {"alpha", "beta"} and woken[2:] == ["alpha", "beta"]
        human.commit("fleet-wide", {"gitopsbot.yaml": "watchedBranch: main\npollInterval: 1m\n"})
        human.push()
        assert router.route() is None and woken[4:] == [None]
        assert router.route() == frozenset() and woken[5:] == []  # the same head again
    finally:
        router.close()


class Broken:
    """A mirror whose fetch fails, as when the remote does not answer."""

    def fetch(self) -> None:
        raise GitFailed("fetch: the remote does not answer")


def test_when_git_fails_every_cluster_is_woken_and_polling_goes_on() -> None:
    woken: list[str | None] = []
    router = _router(Broken(), woken)  # type: ignore[arg-type]
    try:
        assert router.route() is None and woken == [None]
    finally:
        router.close()


def test_the_webhooks_thread_only_hands_the_push_over(fleet: Fleet) -> None:
    """``push`` returns at once; the routing thread does the fetch and the nudges."""
    done = threading.Event()
    woken: list[str | None] = []

    def nudge(name: str | None) -> None:
        woken.append(name)
        done.set()

    router = PushRouter(
        fleet.bot(), watched=lambda: "main", clusters=lambda: ("alpha",), nudge=nudge
    )
    try:
        router.push()
        assert done.wait(30)
        assert woken == [None]
    finally:
        router.close()


# -- the fleet poll: one fetch for the fleet, then the touched clusters woken -----------------


def test_the_poll_fetches_at_most_once_per_half_interval_and_wakes_the_touched(
    fleet: Fleet,
) -> None:
    human = fleet.human()
    mirror = SharedRepo(fleet.bot(), fresh_seconds=3600)
    woken: list[str | None] = []
    answered: list[bool] = []
    router = PushRouter(
        mirror, watched=lambda: "main", clusters=lambda: ("alpha", "beta"), nudge=woken.append,
        invalidate=mirror.invalidate, answered=answered.append,
        poll_fetch=lambda: mirror.fetch(fresh_seconds=0.0),
    )  # fmt: skip
    try:
        assert router.route(polled=True) is None  # the first poll: everyone
        fetched = mirror.fetches
        human.commit("alpha: tuning", {"clusters/alpha/values.yaml": "hypervisor: {}\n"})
        human.push()
        # The passes' own freshness (an hour here) would not fetch; the poll does.
        mirror.fetch()
        assert mirror.fetches == fetched
        assert router.route(polled=True) == {"alpha"} and woken[-1] == "alpha"
        assert mirror.fetches == fetched + 1
        assert router.route(polled=True) == frozenset()  # nothing new: nobody woken
        assert answered == [True, True, True] and router.polls == 3
    finally:
        router.close()


def test_a_poll_within_half_an_interval_of_a_fetch_reuses_it(fleet: Fleet) -> None:
    mirror = SharedRepo(fleet.bot(), fresh_seconds=3600)
    router = PushRouter(
        mirror, watched=lambda: "main", clusters=lambda: ("alpha",), nudge=lambda _: None,
        poll_fetch=lambda: mirror.fetch(fresh_seconds=3600),
    )  # fmt: skip
    try:
        router.route()  # a webhook's routing fetches
        fetched = mirror.fetches
        router.route(polled=True)
        assert mirror.fetches == fetched  # one fetch served both
    finally:
        router.close()
