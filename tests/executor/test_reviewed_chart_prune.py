"""Pruning the plans' records on the state branch (``reviewed/<cluster>/<key>.json``, #30):
done in the commit that records a plan (never a push of its own), keeping the newest
``KEEP_PER_CLUSTER`` of the cluster and, whatever their age, the records of the merges still
to be applied (the cluster's running and queued operations); nothing pruned when those cannot
be read. The policy is ``core.planning.reviewed_chart.prunable``; docs/plan.md, "Pruning the
records"."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from datetime import UTC, datetime

from gitopsbot.bot.reviewed_chart import ReviewedCharts, render_files
from gitopsbot.core.planning import reviewed_chart as rc
from gitopsbot.core.records import journal as journal_mod
from gitopsbot.core.records.journal import Journal, OperationKind, OperationStatus

STATE = "gitopsbot-state"
A = "sha256:" + "a" * 64


class Tree:
    def __init__(self, files: Mapping[str, bytes]) -> None:
        self.files = dict(files)
        self.label = "test"

    def read(self, path: str) -> bytes | None:
        return self.files.get(path)

    def list(self, directory: str) -> list[str]:
        prefix = directory.rstrip("/") + "/"
        return sorted({p[len(prefix) :].split("/")[0] for p in self.files if p.startswith(prefix)})


class Repo:
    """Fleet commits by sha, and the state branch as a list of commits (one per call)."""

    def __init__(self, fleet: Mapping[str, Mapping[str, bytes]]) -> None:
        self.trees = {sha: Tree(files) for sha, files in fleet.items()}
        self.state: list[dict[str, bytes]] = [{}]
        self.pushes = 0

    def head(self, branch: str) -> str | None:
        return f"state{len(self.state) - 1}" if branch == STATE else None

    def tree(self, sha: str) -> Tree:
        if sha.startswith("state"):
            return Tree(self.state[int(sha[5:])])
        return self.trees[sha]

    def read(self, sha: str, path: str) -> bytes | None:
        return self.tree(sha).read(path)

    def commit_files(
        self, branch: str, files: Mapping[str, bytes | None], message: str, *, parent: None
    ) -> str:
        new = dict(self.state[-1])
        for path, data in files.items():
            if data is None:
                new.pop(path, None)
            else:
                new[path] = data
        self.state.append(new)
        return f"state{len(self.state) - 1}"

    def push(self, branch: str) -> None:
        self.pushes += 1

    def records(self) -> list[str]:
        return sorted(p for p in self.state[-1] if p.startswith("reviewed/staging/"))


def files(version: str) -> dict[str, bytes]:
    return {"clusters/staging/release.yaml": f"chart: {{version: {version}}}\n".encode()}


def key_at(repo: Repo, sha: str) -> str:
    return rc.files_key(render_files(repo.tree(sha), "staging"))


def plan(repo: Repo, sha: str, request: int) -> rc.Reviewed:
    digests = rc.ChartDigests("tensor-fusion", "1.8.7", "src", A)
    return rc.Reviewed("staging", key_at(repo, sha), digests, planned_at=sha, request=request)


def queued(sha: str) -> bytes:
    j = Journal(
        op_id="op-q", kind=OperationKind.UPGRADE, cluster="staging", desired_sha=sha,
        created_at=datetime(2026, 12, 6, tzinfo=UTC), status=OperationStatus.QUEUED,
    )  # fmt: skip
    return journal_mod.dumps(j).encode()


def test_the_newest_records_are_kept_and_older_ones_pruned_in_the_record_commit() -> None:
    shas = {f"c{i}": files(f"1.8.{i}") for i in range(rc.KEEP_PER_CLUSTER + 5)}
    repo = Repo(shas)
    charts = ReviewedCharts(None, None, repo=repo, state_branch=STATE)  # type: ignore[arg-type]
    for i in range(rc.KEEP_PER_CLUSTER + 5):
        assert charts.record(plan(repo, f"c{i}", i))
    # One commit and one push per plan recorded, pruning included.
    assert repo.pushes == rc.KEEP_PER_CLUSTER + 5 and len(repo.state) == repo.pushes + 1
    kept = repo.records()
    assert len(kept) == rc.KEEP_PER_CLUSTER
    newest = {rc.record_path("staging", key_at(repo, f"c{i}")) for i in range(5, 25)}
    assert set(kept) == newest


def test_a_record_a_queued_merge_needs_is_never_pruned() -> None:
    """The merge of the oldest plan waits its turn (queued behind a running operation or a
    window): its record outlives any number of newer plans, and the apply finds it."""
    shas = {f"c{i}": files(f"1.8.{i}") for i in range(rc.KEEP_PER_CLUSTER + 5)}
    shas["merge"] = files("1.8.0")  # the merge commit of request #0: the same files
    repo = Repo(shas)
    charts = ReviewedCharts(None, None, repo=repo, state_branch=STATE)  # type: ignore[arg-type]
    assert charts.record(plan(repo, "c0", 0))
    repo.state[-1]["clusters/staging/queued.yaml"] = queued("merge")
    for i in range(1, rc.KEEP_PER_CLUSTER + 5):
        assert charts.record(plan(repo, f"c{i}", i))
    needed = rc.record_path("staging", key_at(repo, "merge"))
    assert needed in repo.records()
    assert len(repo.records()) == rc.KEEP_PER_CLUSTER + 1
    exact, _ = charts.planned("staging", key_at(repo, "merge"))
    assert exact is not None and exact.request == 0


def test_nothing_is_pruned_when_a_pending_operation_cannot_be_read() -> None:
    shas = {f"c{i}": files(f"1.8.{i}") for i in range(rc.KEEP_PER_CLUSTER + 2)}
    repo = Repo(shas)
    charts = ReviewedCharts(None, None, repo=repo, state_branch=STATE)  # type: ignore[arg-type]
    assert charts.record(plan(repo, "c0", 0))
    # Queued for a commit this clone does not have (not fetched yet): prune nothing.
    repo.state[-1]["clusters/staging/queued.yaml"] = queued("f" * 40)
    for i in range(1, rc.KEEP_PER_CLUSTER + 2):
        assert charts.record(plan(repo, f"c{i}", i))
    assert len(repo.records()) == rc.KEEP_PER_CLUSTER + 2


def test_prunable_keeps_the_newest_and_the_needed() -> None:
    digests = rc.ChartDigests("c", "1", "s", A)
    records = [rc.Reviewed("x", f"k{i}", digests, seq=i) for i in range(1, 6)]
    old = replace(records[0], key="k0", seq=0)  # written before records were numbered
    assert rc.prunable([old, *records], needed=(), keep=3) == ["k0", "k1", "k2"]
    assert rc.prunable([old, *records], needed=("k0", "k2"), keep=3) == ["k1"]
    assert rc.next_seq([old, *records]) == 6 and rc.next_seq([]) == 1
