"""The waves' evidence summary (#29): ``clusters/<name>/evidence.json`` on the state branch,
written with every record of the cluster's journals, read by a judgement instead of them.

On a real Git repository: the summary folded equals the evidence read from the journals
after every record of generated histories; a missing, stale or corrupt summary falls back to
the journals and is rebuilt by the cluster's next record; the summary and the record it
digests are one commit."""

from __future__ import annotations

import random
import subprocess
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from gitopsbot import app
from gitopsbot.bot import waves
from gitopsbot.bot.journal_store import JournalStore
from gitopsbot.core.records import journal as journal_mod
from gitopsbot.core.records.journal import (
    Journal,
    OperationKind,
    OperationStatus,
    PhaseProgress,
    PhaseState,
    RollbackPoint,
    Step,
    StepKind,
    StepState,
)
from gitopsbot.core.waves import promotion_gate, wave_evidence
from gitopsbot.core.waves.promotion import ClusterEvidence
from gitopsbot.ports.files import DirIds, FileTree

T0 = datetime(2026, 12, 1, tzinfo=UTC)
VERSIONS = {f"{i:040x}": v for i, v in enumerate(["1.8.6", "1.8.7", "1.9.0", ""])}
SHAS = sorted(VERSIONS)


def _git(*args: str, cwd: Path) -> None:
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args],
        cwd=cwd,
        check=True,
        capture_output=True,
    )


@pytest.fixture
def store(tmp_path: Path) -> JournalStore:
    work = tmp_path / "work"
    work.mkdir()
    _git("init", "-q", "-b", "main", cwd=work)
    (work / "README").write_text("fleet\n")
    _git("add", "README", cwd=work)
    _git("commit", "-q", "-m", "init", cwd=work)
    _git("clone", "-q", "--bare", str(work), str(tmp_path / "fleet.git"), cwd=tmp_path)
    repo = app.open_repo((tmp_path / "fleet.git").as_uri(), tmp_path / "cache")
    found = JournalStore(repo, branch="gitopsbot/state", push=False)
    found.version_of = version_of
    return found


def version_of(j: Journal) -> str:
    return VERSIONS.get(j.desired_sha, "")


def from_journals(store: JournalStore, cluster: str) -> ClusterEvidence:
    return promotion_gate.evidence_from(cluster, waves.journals(store, cluster), version_of)


def from_summary(store: JournalStore, cluster: str) -> ClusterEvidence | None:
    head = store.head()
    assert head is not None
    return store.summaries.read(store.repo.tree(head), [cluster]).get(cluster)


def _operation(rng: random.Random, cluster: str, i: int, previous: Journal | None) -> Journal:
    rollback = previous is not None and rng.random() < 0.25
    # Mostly in order; sometimes created before the one before it (a queued one superseded).
    at = T0 + timedelta(hours=i) - timedelta(minutes=rng.choice([0, 0, 0, 90]))
    point = RollbackPoint(3, rng.choice(["1.8.5", "1.8.6", ""])) if rng.random() < 0.7 else None
    return Journal(
        op_id=f"{cluster}-{i:03d}",
        kind=OperationKind.ROLLBACK if rollback else OperationKind.UPGRADE,
        cluster=cluster,
        desired_sha=rng.choice(SHAS),
        created_at=at,
        status=OperationStatus.QUEUED,
        rollback_point=point,
        reverts_op=previous.op_id if rollback and previous is not None else "",
    )


def _progress(rng: random.Random, j: Journal) -> Journal:
    """``j`` running with its release step and verify in some state."""
    at = j.created_at + timedelta(minutes=rng.randint(1, 50))
    helm = rng.choice([StepState.SUCCEEDED, StepState.FAILED, StepState.RUNNING])
    steps = [Step("helm-upgrade", StepKind.HELM_UPGRADE, helm, at, at if helm.finished else None)]
    if rng.random() < 0.8:
        verify = rng.choice([StepState.SUCCEEDED, StepState.PENDING, StepState.FAILED])
        done = at + timedelta(minutes=5) if verify.finished else None
        steps.append(Step("verify", StepKind.VERIFY, verify, done, done))
    phases = ()
    if rng.random() < 0.2:
        phases = (PhaseProgress("pool", PhaseState.HALTED, at, last_progress_at=at),)
    return replace(j, status=OperationStatus.RUNNING, steps=tuple(steps), phases=phases)


def _end(rng: random.Random, j: Journal) -> Journal:
    status = rng.choice(
        [OperationStatus.SUCCEEDED] * 3 + [OperationStatus.FAILED, OperationStatus.BLOCKED]
    )
    return replace(j, status=status)


def _history(store: JournalStore, rng: random.Random, cluster: str, ops: int) -> None:
    """Record ``ops`` generated operations of ``cluster`` as the bot does, checking the
    summary against the journals after every record."""
    previous: Journal | None = None
    for i in range(ops):
        j = _operation(rng, cluster, i, previous)
        steps: list[tuple[str, Journal, dict[str, bytes | None]]] = []
        if rng.random() < 0.3:
            steps.append(("queued", j, {}))
            if rng.random() < 0.3:  # a newer merge replaces it while queued
                steps.append(("superseded", replace(j, status=OperationStatus.SUPERSEDED), {}))
                for _what, journal, files in steps:
                    store.save(journal, _what, files=files)
                    assert from_summary(store, cluster) == from_journals(store, cluster)
                continue
        running = _progress(rng, j)
        steps.append(("running", running, {}))
        ended = _end(rng, running)
        if (
            previous is not None
            and ended.kind is OperationKind.ROLLBACK
            and previous.status is OperationStatus.RUNNING
        ):
            # bot.reverts: the failed operation's last record rides on the rollback's.
            failed = replace(previous, status=OperationStatus.FAILED)
            text = journal_mod.dumps(failed).encode()
            path = f"clusters/{cluster}/history/{failed.op_id}.yaml"
            steps.append(("rollback", running, {path: text}))
        if rng.random() < 0.85:  # else: left running (in flight)
            steps.append(("ended", ended, {}))
        for what, journal, files in steps:
            if what == "running" and steps[0][0] == "queued":
                store.start(journal, "started")
            else:
                store.save(journal, what, files=files)
            assert from_summary(store, cluster) == from_journals(store, cluster), (what, i)
        previous = steps[-1][1]


@pytest.mark.parametrize("seed", range(12))
def test_the_summary_folded_is_the_evidence_read_from_the_journals(
    store: JournalStore, seed: int
) -> None:
    rng = random.Random(seed)
    _history(store, rng, "staging", 8)
    assert from_summary(store, "staging") is not None


def _write(store: JournalStore, files: dict[str, bytes | None]) -> None:
    """A commit the summary is not kept in: an older bot, a person's edit."""
    store.repo.commit_files(store.branch, files, "by hand", parent=None)


def _succeeded(cluster: str, i: int, sha: str) -> Journal:
    at = T0 + timedelta(hours=i)
    verify = Step("verify", StepKind.VERIFY, StepState.SUCCEEDED, at, at)
    return Journal(
        op_id=f"{cluster}-{i}",
        kind=OperationKind.UPGRADE,
        cluster=cluster,
        desired_sha=sha,
        created_at=at,
        status=OperationStatus.SUCCEEDED,
        steps=(verify,),
    )


@pytest.mark.parametrize("how", ["missing", "stale", "corrupt"])
def test_a_summary_that_cannot_be_trusted_falls_back_and_is_rebuilt(
    store: JournalStore, how: str
) -> None:
    for name in ("staging", "canary"):
        store.save(_succeeded(name, 1, SHAS[0]), "ok")
    summary = "clusters/staging/evidence.json"
    if how == "missing":
        _write(store, {summary: None})
    elif how == "corrupt":
        _write(store, {summary: b"{ not json"})
    else:  # journals changed without their summary: it digests an older journal.yaml
        newer = _succeeded("staging", 2, SHAS[1])
        text = journal_mod.dumps(newer).encode()
        _write(
            store,
            {
                "clusters/staging/journal.yaml": text,
                "clusters/staging/history/staging-2.yaml": text,
            },
        )
    expected = from_journals(store, "staging")
    evidence = waves.read_evidence(store, ["staging", "canary"], version_of)
    assert evidence["staging"] == expected
    assert store.summaries.last.fallback == ["staging"]
    assert store.summaries.last.summary == ["canary"]
    if how == "stale":
        assert expected.chart_version == "1.8.7"  # the newer journal counts, not the summary

    # The cluster's next record rebuilds it, in that record's commit.
    store.save(_succeeded("staging", 3, SHAS[2]), "ok again")
    assert from_summary(store, "staging") == from_journals(store, "staging")
    waves.read_evidence(store, ["staging", "canary"], version_of)
    assert store.summaries.last.fallback == []


def test_unreadable_journals_without_a_summary_fail_closed(store: JournalStore) -> None:
    store.save(_succeeded("staging", 1, SHAS[0]), "ok")
    _write(store, {"clusters/staging/evidence.json": None, "clusters/staging/queued.yaml": b"["})
    with pytest.raises(waves.EvidenceUnreadable):
        waves.read_evidence(store, ["staging"], version_of)


def test_the_summary_is_in_the_commit_of_the_record_it_digests(store: JournalStore) -> None:
    """A kill cannot fall between a record and its summary: they are one commit."""
    store.save(_succeeded("staging", 1, SHAS[0]), "ok")
    before = store.head()
    assert before is not None
    sha = store.save(_succeeded("staging", 2, SHAS[1]), "ok")
    changed = store.repo.diff_paths(before, sha)
    assert "clusters/staging/journal.yaml" in changed
    assert "clusters/staging/evidence.json" in changed
    assert store.repo.log(store.branch, before, 10)[-1].sha == sha  # one commit
    summary = store.repo.read(sha, "clusters/staging/evidence.json")
    assert summary is not None
    assert wave_evidence.loads(summary.decode()).current is not None
    assert from_summary(store, "staging") == from_journals(store, "staging")


class _Counting:
    """The state branch's tree, counting the files read through it."""

    def __init__(self, tree: FileTree) -> None:
        assert isinstance(tree, DirIds)
        self._tree, self._ids = tree, tree
        self.reads: list[str] = []

    @property
    def label(self) -> str:
        return self._tree.label

    def read(self, path: str) -> bytes | None:
        self.reads.append(path)
        return self._tree.read(path)

    def list(self, directory: str) -> list[str]:
        self.reads.append(directory + "/")
        return self._tree.list(directory)

    def dir_id(self, path: str) -> str | None:
        return self._ids.dir_id(path)


def test_a_judgement_reads_again_only_the_clusters_whose_directory_changed(
    store: JournalStore,
) -> None:
    """#29: an idle cluster's files are read once, then kept by its directory's id."""
    for name in ("staging", "canary"):
        store.save(_succeeded(name, 1, SHAS[0]), "ok")

    def judged() -> tuple[dict[str, ClusterEvidence], list[str]]:
        head = store.head()
        assert head is not None
        tree = _Counting(store.repo.tree(head))
        found = store.summaries.read(tree, ["staging", "canary"])
        return found, tree.reads

    first, reads = judged()
    assert {p.split("/")[1] for p in reads} == {"staging", "canary"}
    again, reads = judged()
    assert (again, reads) == (first, [])  # same heads: nothing read
    store.save(_succeeded("staging", 2, SHAS[1]), "ok")
    after, reads = judged()
    assert reads and {p.split("/")[1] for p in reads} == {"staging"}
    assert after["canary"] == first["canary"]
    assert after["staging"] == from_journals(store, "staging") != first["staging"]


def test_a_judgement_reads_only_the_evidence_its_decision_needs(store: JournalStore) -> None:
    """#29: a chart change reads the earlier waves' clusters only; a values change its wave
    does not gate, and a revert, read none (they were read for the whole fleet, unused)."""
    from gitopsbot.core.fleet.model import (
        BotSettings,
        ClusterSpec,
        Environment,
        ReleaseSpec,
        RolloutPolicy,
        Wave,
        WaveSelector,
    )

    def spec(name: str, env: Environment, version: str = "1.8.7") -> ClusterSpec:
        release = ReleaseSpec("https://charts.example", "tensor-fusion", version, "tf", "tf")
        return ClusterSpec(name, env, release, {}, RolloutPolicy())

    clusters = {
        "dev": spec("dev", Environment.DEVELOPMENT),
        "stage-a": spec("stage-a", Environment.STAGING),
        "stage-b": spec("stage-b", Environment.STAGING),
        "prod": spec("prod", Environment.PRODUCTION),
    }
    for name in clusters:
        store.save(_succeeded(name, 1, SHAS[0]), "ok")  # each ran 1.8.6
    settings = BotSettings(
        waves=(
            Wave("dev", WaveSelector(environment=Environment.DEVELOPMENT)),
            Wave("staging", WaveSelector(environment=Environment.STAGING)),
            Wave("production", WaveSelector(environment=Environment.PRODUCTION)),
        )
    )
    seen: list[list[str]] = []
    real = store.summaries.read

    def counting(tree: FileTree, names: list[str]) -> dict[str, ClusterEvidence]:
        seen.append(list(names))
        return real(tree, names)

    store.summaries.read = counting  # type: ignore[method-assign]

    def judged(target: str, before: str, **kw: bool) -> tuple[bool, set[str]]:
        seen.clear()
        found = waves.judge(
            store=store, settings=settings, clusters=clusters, spec=clusters[target],
            before=before, now=T0 + timedelta(days=1), version_of=version_of, **kw,
        )  # fmt: skip
        assert found.decision is not None
        return found.decision.allowed, {n for names in seen for n in names}

    held, read = judged("stage-a", before="1.8.6")  # a chart change: dev has not run 1.8.7
    assert not held and read == {"dev"}
    held, read = judged("prod", before="1.8.6")
    assert not held and read == {"dev", "stage-a", "stage-b"}
    assert judged("prod", before="1.8.7") == (True, set())  # values only, not gated
    assert judged("prod", before="1.8.6", revert=True) == (True, set())
