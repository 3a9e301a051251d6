"""``ReviewedCharts.admit`` renders the manifests only when a plan of these very files
recorded a manifests digest to compare with (#29: rendering for nothing was a helm child,
0.1 s, on the way to every merge's first action at 1,000 clusters); the comparison itself is
``core.planning.reviewed_chart.check``'s, tested in tests/core/test_reviewed_chart.py."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gitopsbot.bot.reviewed_chart import ReviewedCharts, render_files
from gitopsbot.core.fleet.model import ClusterSpec, Environment, ReleaseSpec, RolloutPolicy
from gitopsbot.core.planning import reviewed_chart as rc
from gitopsbot.core.planning.provenance import Provenance
from gitopsbot.core.records.journal import Journal, OperationKind, OperationStatus
from gitopsbot.ports.charts import ChartArchive

A = "sha256:" + "a" * 64
M1 = "sha256:" + "1" * 64
STATE = "gitopsbot-state"


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
    """The two commits admit reads: the merge (the cluster's files) and the state head."""

    def __init__(self, fleet: Tree, state: Tree) -> None:
        self.trees = {"merge": fleet, "state": state}

    def head(self, branch: str) -> str | None:
        return "state" if branch == STATE else None

    def tree(self, sha: str) -> Tree:
        return self.trees[sha]

    def read(self, sha: str, path: str) -> bytes | None:
        return self.trees[sha].read(path)


class Archives:
    def __init__(self, path: Path) -> None:
        self.path = path

    def fetch(self, repo_url: str, name: str, version: str) -> ChartArchive:
        return ChartArchive(self.path, A, f"{repo_url}/{name}-{version}.tgz")


class Renderer:
    def __init__(self, text: str) -> None:
        self.text = text
        self.calls = 0

    def template(self, chart: Path, **_kw: Any) -> str:
        self.calls += 1
        return self.text


MANIFESTS = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\ndata: {k: v}\n"
FILES = {"clusters/staging/release.yaml": b"chart: {version: 1.8.7}\n"}


def spec() -> ClusterSpec:
    release = ReleaseSpec("https://charts.example", "tensor-fusion", "1.8.7", "tf", "tf-sys")
    return ClusterSpec("staging", Environment("staging"), release, {}, RolloutPolicy())


def journal() -> Journal:
    return Journal(
        op_id="op1", cluster="staging", kind=OperationKind.UPGRADE, desired_sha="merge",
        created_at=datetime(2026, 12, 6, tzinfo=UTC),
    )  # fmt: skip


def admit(tmp_path: Path, records: Mapping[str, rc.Reviewed]) -> tuple[Journal, Renderer]:
    state = Tree({rc.record_path("staging", k): r.dumps().encode() for k, r in records.items()})
    renderer = Renderer(MANIFESTS)
    charts = ReviewedCharts(
        Archives(tmp_path / "c.tgz"), renderer, repo=Repo(Tree(FILES), state), state_branch=STATE
    )  # type: ignore[arg-type]
    return charts.admit(journal(), spec()), renderer


def key() -> str:
    return rc.files_key(render_files(Tree(FILES), "staging"))


def test_no_plan_recorded_renders_nothing(tmp_path: Path) -> None:
    admitted, renderer = admit(tmp_path, {})
    assert admitted.status is OperationStatus.RUNNING and admitted.chart_archive == A
    assert renderer.calls == 0


def test_a_plan_of_other_files_compares_the_archive_only_and_renders_nothing(
    tmp_path: Path,
) -> None:
    seen = rc.ChartDigests("tensor-fusion", "1.8.7", "src", A, M1)
    admitted, renderer = admit(tmp_path, {"other": rc.Reviewed("staging", "other", seen)})
    assert admitted.status is OperationStatus.RUNNING and renderer.calls == 0


def test_a_plan_of_these_files_renders_and_compares_the_manifests(tmp_path: Path) -> None:
    same = rc.manifests_digest(MANIFESTS, source="test")
    seen = rc.ChartDigests("tensor-fusion", "1.8.7", "src", A, same)
    admitted, renderer = admit(tmp_path, {key(): rc.Reviewed("staging", key(), seen)})
    assert renderer.calls == 1 and admitted.status is OperationStatus.RUNNING
    assert "archive and rendered manifests" in admitted.verdicts[-1]
    other = rc.ChartDigests("tensor-fusion", "1.8.7", "src", A, M1)
    blocked, _ = admit(tmp_path, {key(): rc.Reviewed("staging", key(), other)})
    assert blocked.status is OperationStatus.BLOCKED and "rendered manifests" in blocked.failure


def test_an_oci_archives_manifest_digest_is_kept_in_the_applys_journal(tmp_path: Path) -> None:
    """The apply's record carries the OCI manifest digest beside the archive's (#30)."""
    from gitopsbot.core.records import journal as journal_mod

    manifest = "sha256:" + "e" * 64

    class OciArchives(Archives):
        def fetch(self, repo_url: str, name: str, version: str) -> ChartArchive:
            return ChartArchive(self.path, A, f"oci://r/{name}:{version}@{manifest}", manifest)

    state = Tree({})
    charts = ReviewedCharts(
        OciArchives(tmp_path / "c.tgz"), None, repo=Repo(Tree(FILES), state), state_branch=STATE
    )  # type: ignore[arg-type]
    admitted = charts.admit(journal(), spec())
    assert (admitted.chart_archive, admitted.chart_manifest) == (A, manifest)
    text = journal_mod.dumps(admitted)
    assert f"chart_manifest: {manifest}" in text or f"chart_manifest: '{manifest}'" in text
    assert journal_mod.loads(text).chart_manifest == manifest


UNSIGNED = Provenance(
    required=True, where="chartKeyrings[0] (https://charts.example)", keyring="/k.gpg",
    problem="https://charts.example/tensor-fusion-1.8.7.tgz has no provenance file (.prov)",
)  # fmt: skip


class UnsignedArchives(Archives):
    """Serves an archive whose verification failed; counts the fetches."""

    fetches = 0

    def fetch(self, repo_url: str, name: str, version: str) -> ChartArchive:
        self.fetches += 1
        return replace(super().fetch(repo_url, name, version), provenance=UNSIGNED)


def test_an_archive_failing_verification_is_blocked_and_a_rollback_is_not_verified(
    tmp_path: Path,
) -> None:
    archives = UnsignedArchives(tmp_path / "c.tgz")
    charts = ReviewedCharts(
        archives, Renderer(MANIFESTS), repo=Repo(Tree(FILES), Tree({})), state_branch=STATE
    )  # type: ignore[arg-type]
    blocked = charts.admit(journal(), spec())
    assert blocked.status is OperationStatus.BLOCKED and blocked.chart_archive == ""
    assert "provenance not verified" in blocked.failure and "has no provenance" in blocked.failure
    rollback = replace(journal(), kind=OperationKind.ROLLBACK)
    assert charts.admit(rollback, spec()) == rollback and archives.fetches == 1
