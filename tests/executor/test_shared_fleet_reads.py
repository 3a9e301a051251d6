"""Fleet-wide reads shared by every cluster's judgement (#29): the whole fleet parsed once
per head, however many passes ask for it at once, and the watched branch's commits diffed
once per head, not once per cluster."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import cast

import pytest

from gitopsbot.bot import waves
from gitopsbot.bot.journal_store import JournalStore
from gitopsbot.core.fleet.model import Fleet
from gitopsbot.core.fleet.observed_git import CommitInfo
from gitopsbot.errors import ConfigError
from gitopsbot.fleetrepo import load_fleet
from gitopsbot.ports.files import FileTree
from gitopsbot.ports.repo import Repo
from tests.executor.conftest import Env

PASSES = 8
T0 = datetime(2026, 12, 1, tzinfo=UTC)


def test_the_fleet_is_parsed_once_per_head_for_every_pass(env: Env) -> None:
    rec = env.reconciler()
    head = rec.repo.head("main")
    assert head is not None
    parses: list[str] = []
    entered = threading.Semaphore(0)
    arrived = threading.Event()

    def counting(tree: FileTree) -> Fleet:
        parses.append(tree.label)
        arrived.wait(10)  # every pass has asked before the first parse ends
        return load_fleet(tree)

    rec.load_fleet = counting
    found: list[Fleet] = []

    def one_pass() -> None:
        entered.release()
        found.append(rec.fleet_at(head))

    threads = [threading.Thread(target=one_pass) for _ in range(PASSES)]
    for t in threads:
        t.start()
    for _ in range(PASSES):
        entered.acquire()
    arrived.set()
    for t in threads:
        t.join()
    assert len(parses) == 1
    assert rec.fleet_parses == 1
    assert len(found) == PASSES and all(f is found[0] for f in found)


def test_fleet_files_that_do_not_load_are_parsed_once_too(env: Env) -> None:
    rec = env.reconciler()
    head = rec.repo.head("main")
    assert head is not None
    calls: list[str] = []

    def broken(tree: FileTree) -> Fleet:
        calls.append(tree.label)
        raise ConfigError("gitopsbot.yaml: broken")

    rec.load_fleet = broken
    for _ in range(3):
        with pytest.raises(ConfigError, match="broken"):
            rec.fleet_at(head)
    assert len(calls) == 1


# -- the watched branch's commits, diffed once per head ---------------------------------------

CLUSTERS = [f"c{i:02d}" for i in range(30)]


@dataclass
class _Branch:
    """A watched branch of one commit per cluster, after a commit every cluster has seen."""

    commits: list[CommitInfo] = field(default_factory=list)
    diffs: int = 0

    def __post_init__(self) -> None:
        parent = ""
        for i, name in enumerate(["root", "base", *CLUSTERS]):
            sha = f"{i:040x}"
            self.commits.append(CommitInfo(sha, (parent,) if parent else (), "t", name, T0))
            parent = sha

    def head(self, branch: str) -> str:
        return self.commits[-1].sha

    def log(self, branch: str, since_sha: str | None, limit: int) -> list[CommitInfo]:
        shas = [c.sha for c in self.commits]
        start = shas.index(since_sha) + 1 if since_sha in shas else 0
        return self.commits[start:][-limit:]

    def diff_paths(self, a: str, b: str) -> list[str]:
        self.diffs += 1
        name = next(c for c in self.commits if c.sha == b).summary
        return [f"clusters/{name}/release.yaml"]


@dataclass
class _Seen:
    seen_at: dict[str, str]

    def seen(self, cluster: str) -> str | None:
        return self.seen_at.get(cluster)

    def seen_reader(self) -> Callable[[str], str | None]:
        return self.seen


def test_pending_diffs_each_commit_once_for_the_fleet() -> None:
    branch = _Branch()
    base = branch.commits[1].sha
    # Half the fleet took in its own commit already; the other half has it pending.
    seen = {c: (branch.commits[i + 2].sha if i % 2 else base) for i, c in enumerate(CLUSTERS)}
    repo, store = cast(Repo, branch), cast(JournalStore, _Seen(seen))
    alone = waves.pending_reader(repo, store, "main")
    expected = {c: alone(c) for c in CLUSTERS}
    assert sorted(c for c, p in expected.items() if p) == CLUSTERS[::2]
    assert branch.diffs > len(CLUSTERS) * 2  # each cluster walked and diffed on its own

    branch.diffs = 0
    shared = waves.WatchedLog(repo, "main", branch.head("main"))
    pending = waves.pending_reader(repo, store, "main", shared)
    assert {c: pending(c) for c in CLUSTERS} == expected
    assert branch.diffs <= len(CLUSTERS)  # each commit diffed once for the whole fleet


def test_a_seen_commit_out_of_the_shared_log_walks_the_branch_as_before() -> None:
    branch = _Branch()
    repo = cast(Repo, branch)
    store = cast(JournalStore, _Seen({"c05": "f" * 40}))  # gone (a force push)
    shared = waves.WatchedLog(repo, "main", branch.head("main"))
    assert waves.pending_reader(repo, store, "main", shared)("c05") is True
