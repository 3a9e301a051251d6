"""One real mirror shared by worker threads (``bot/shared_repo.py``): concurrent commits,
reads and pushes from many threads all land, and a burst of fetches costs one round trip
while a fetch asked for after a push still sees it. Over file:// and smart HTTP."""

from __future__ import annotations

import threading

from gitopsbot.bot.journal_store import JournalStore
from gitopsbot.bot.shared_repo import SharedRepo
from gitopsbot.ports.repo import Repo
from tests.git.conftest import Fleet

STATE = "gitopsbot/state"


def test_threads_commit_read_and_push_without_losing_anything(fleet: Fleet) -> None:
    shared = SharedRepo(fleet.bot())
    store = JournalStore(shared.as_repo(), branch=STATE)
    errors: list[BaseException] = []
    rounds = 6

    def work(n: int) -> None:
        try:
            for i in range(rounds):
                shared.fetch()
                tree = shared.tree("main")
                assert tree.list("clusters")  # reads through the shared lock
                store.commit({f"clusters/c{n}/round-{i}": f"{n}.{i}\n".encode()}, f"c{n} {i}")
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    human = fleet.human()
    human.git("fetch", "--quiet", "origin", STATE)
    listed = human.git("ls-tree", "-r", "--name-only", f"origin/{STATE}").split()
    assert len([p for p in listed if "/round-" in p]) == 6 * rounds
    count = human.git("rev-list", "--count", f"origin/{STATE}").strip()
    assert int(count) == 6 * rounds  # one commit per record, none lost or duplicated


class GatedRepo:
    """A real mirror whose first fetch waits at a gate, counting the fetches made."""

    def __init__(self, repo: Repo) -> None:
        self.repo = repo
        self.gate = threading.Event()
        self.inside = threading.Event()
        self.fetches = 0

    def __getattr__(self, name: str) -> object:
        return getattr(self.repo, name)

    def fetch(self) -> None:
        self.fetches += 1
        if self.fetches == 1:
            self.inside.set()
            self.gate.wait(30)
        self.repo.fetch()


def test_a_burst_of_fetches_costs_one_more_round_trip(fleet: Fleet) -> None:
    gated = GatedRepo(fleet.bot())
    shared = SharedRepo(gated)  # type: ignore[arg-type]
    first = threading.Thread(target=shared.fetch)
    first.start()
    assert gated.inside.wait(30)  # fetch 1 is under way
    asked = [threading.Event() for _ in range(5)]

    def ask(n: int) -> None:
        asked[n].set()
        shared.fetch()

    later = [threading.Thread(target=ask, args=(n,)) for n in range(5)]
    for t in later:
        t.start()
    for e in asked:
        assert e.wait(30)
    # Each asked after fetch 1 began, so fetch 1 cannot serve them: exactly one more fetch
    # (begun after they asked) serves all five.
    threading.Event().wait(0.2)  # let them queue on the lock (not an assertion on time)
    gated.gate.set()
    for t in [first, *later]:
        t.join(60)
    assert gated.fetches == 2


def test_a_fetch_asked_for_after_a_push_sees_it(fleet: Fleet) -> None:
    shared = SharedRepo(fleet.bot())
    human = fleet.human()
    for i in range(3):
        sha = human.commit(f"change {i}", {f"notes/{i}.txt": f"{i}\n"})
        human.push()
        shared.fetch()
        assert shared.head("main") == sha
    assert shared.fetches == 3


class Counted:
    """A mirror that counts its fetches."""

    def __init__(self) -> None:
        self.fetched = 0

    def fetch(self) -> None:
        self.fetched += 1


def test_a_fetch_within_the_poll_interval_serves_every_pass_until_a_webhook() -> None:
    """Issue 29: N clusters polling cost one fetch per poll interval for the whole fleet, not
    one per pass; a push announced by a webhook (``invalidate``) is fetched at once."""
    clock = {"now": 1000.0}
    inner = Counted()
    shared = SharedRepo(inner, fresh_seconds=30.0, monotonic=lambda: clock["now"])  # type: ignore[arg-type]
    for _ in range(50):  # fifty clusters' passes within the interval
        shared.fetch()
        clock["now"] += 0.5
    assert inner.fetched == 1
    clock["now"] += 10.0  # 35 s after the first fetch: stale
    shared.fetch()
    assert inner.fetched == 2
    shared.invalidate()  # a webhook: the remote moved
    shared.fetch()
    assert inner.fetched == 3
    assert shared.fetches == 3


def test_without_a_fresh_interval_every_fetch_goes_to_the_remote() -> None:
    inner = Counted()
    shared = SharedRepo(inner)  # type: ignore[arg-type]
    shared.fetch()
    shared.fetch()
    assert inner.fetched == 2


class GatedCounted(Counted):
    """Counts its fetches; the first waits at a gate (a fetch under way)."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = threading.Event()
        self.inside = threading.Event()

    def fetch(self) -> None:
        super().fetch()
        if self.fetched == 1:
            self.inside.set()
            assert self.gate.wait(30)


def test_a_fetch_under_way_serves_the_passes_that_ask_while_it_runs() -> None:
    """Issue 29: an idle fleet's poll round made two fetches, not one: passes that asked while
    the round's first fetch was on the wire (milliseconds apart) each fetched again after it."""
    inner = GatedCounted()
    shared = SharedRepo(inner, fresh_seconds=15.0, monotonic=lambda: 1000.0)  # type: ignore[arg-type]
    first = threading.Thread(target=shared.fetch)
    first.start()
    assert inner.inside.wait(30)  # the round's first fetch is under way
    asked = [threading.Event() for _ in range(5)]

    def ask(n: int) -> None:
        asked[n].set()
        shared.fetch()

    later = [threading.Thread(target=ask, args=(n,)) for n in range(5)]
    for t in later:
        t.start()
    for e in asked:
        assert e.wait(30)
    threading.Event().wait(0.2)  # let them queue on the lock (not an assertion on time)
    inner.gate.set()
    for t in [first, *later]:
        t.join(60)
    assert inner.fetched == 1
    assert shared.fetches == 1


def test_a_fetch_under_way_when_a_webhook_comes_serves_no_pass_after_it() -> None:
    """What the webhook announced may have been pushed after that fetch read the remote: the
    next pass fetches, even though a fetch completed since (a cluster taken over alike)."""
    inner = GatedCounted()
    shared = SharedRepo(inner, fresh_seconds=15.0, monotonic=lambda: 1000.0)  # type: ignore[arg-type]
    first = threading.Thread(target=shared.fetch)
    first.start()
    assert inner.inside.wait(30)
    shared.invalidate()  # the push router's (or the shard keeper's) while it is on the wire
    inner.gate.set()
    first.join(60)
    shared.fetch()  # a pass after it: goes to the remote
    assert inner.fetched == 2
    shared.fetch()  # and that one serves the passes after it
    assert inner.fetched == 2
