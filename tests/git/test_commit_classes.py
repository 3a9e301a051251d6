"""Commit classification: table tests on the pure core, then on real commits made with git."""

from __future__ import annotations

import subprocess
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gitopsbot.core.fleet.commit_classes import (
    CommitKind,
    CommitSnapshot,
    ProposalId,
    classify_commits,
    desired_files,
    git_blob_id,
    parse_proposal_branch,
    proposal_branch,
    proposals_in_message,
    restore_is_undo,
    reverted_shas,
    snapshot,
)
from gitopsbot.core.fleet.observed_git import CommitInfo

if TYPE_CHECKING:
    from tests.git.conftest import Fleet

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _snap(sha: str, message: str, clusters: dict[str, dict[str, bytes | None]]) -> CommitSnapshot:
    info = CommitInfo(sha=sha, parents=(), author="a <a@x>", message=message, time=T0)
    return CommitSnapshot(info, {k: desired_files(v) for k, v in clusters.items()})


V1 = {"release.yaml": b"version: 1\n", "values.yaml": b"a: 1\n"}
V2 = {"release.yaml": b"version: 2\n", "values.yaml": b"a: 1\n"}
V3 = {"release.yaml": b"version: 3\n", "values.yaml": b"a: 1\n"}
OTHER = {"release.yaml": b"version: 9\n"}


@pytest.mark.parametrize("data", [b"", b"hello\n", bytes(range(256)) * 10])
def test_git_blob_id_matches_git(data: bytes, tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(data)
    out = subprocess.run(
        ["git", "hash-object", str(tmp_path / "f")], capture_output=True, text=True, check=True
    )
    assert git_blob_id(data) == out.stdout.strip()


@pytest.mark.parametrize(
    ("branch", "expected"),
    [
        ("gitopsbot/prod-a/1.2.3", ProposalId("prod-a", "1.2.3")),
        ("refs/heads/gitopsbot/prod-a/v1.2.3-rc.1", ProposalId("prod-a", "v1.2.3-rc.1")),
        ("gitopsbot/prod-a/1.2.3+build.5", ProposalId("prod-a", "1.2.3+build.5")),
        ("gitopsbot/state", None),
        ("gitopsbot/prod-a/latest", None),
        ("gitopsbot/Prod/1.2.3", None),
        ("feature/gitopsbot/prod/1.2.3", None),
        ("gitopsbot/prod/1.2", None),
    ],
)
def test_proposal_branch_convention(branch: str, expected: ProposalId | None) -> None:
    assert parse_proposal_branch(branch) == expected
    if expected is not None:
        assert parse_proposal_branch(expected.branch) == expected


def test_proposal_branch_refuses_bad_parts() -> None:
    assert proposal_branch("prod-a", "1.2.3") == "gitopsbot/prod-a/1.2.3"
    with pytest.raises(ValueError, match="not a valid proposal branch"):
        proposal_branch("Prod A", "1.2.3")


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        # GitHub
        ("Merge pull request #12 from acme/gitopsbot/prod-a/1.2.3\n\nBump", ["prod-a/1.2.3"]),
        # GitLab
        (
            "Merge branch 'gitopsbot/prod-a/1.2.3' into 'main'\n\nSee merge request !4",
            ["prod-a/1.2.3"],
        ),
        # Gitea
        (
            "Merge pull request 'Upgrade' (#3) from gitopsbot/prod-a/1.2.3 into main",
            ["prod-a/1.2.3"],
        ),
        # git merge
        ("Merge branch 'gitopsbot/prod-a/1.2.3'", ["prod-a/1.2.3"]),
        # squash merge: only the trailer survives
        ("Upgrade prod-a to 1.2.3 (#12)\n\nGitopsbot-Proposal: prod-a/1.2.3\n", ["prod-a/1.2.3"]),
        # git merge of a remote-tracking branch
        ("Merge remote-tracking branch 'origin/gitopsbot/prod-a/1.2.3'", ["prod-a/1.2.3"]),
        ("Merge branch 'feature/x'", []),
        ("Merge branch 'gitopsbot/state'", []),
        ("mention of mygitopsbot/prod-a/1.2.3 inside a word", []),
        ("Merge gitopsbot/a/1.0.0 and gitopsbot/b/2.0.0", ["a/1.0.0", "b/2.0.0"]),
    ],
)
def test_proposals_in_merge_messages(message: str, expected: list[str]) -> None:
    assert [str(p) for p in proposals_in_message(message)] == expected


def test_reverted_shas() -> None:
    sha = "a" * 40
    assert reverted_shas(f'Revert "x"\n\nThis reverts commit {sha}.\n') == (sha,)
    assert reverted_shas("Revert nothing") == ()


@pytest.mark.parametrize(
    ("name", "history", "new", "expected"),
    [
        (
            "ordinary change",
            [("c0", "init", {"a": V1})],
            [("c1", "bump a", {"a": V2})],
            [("c1", CommitKind.CHANGE, ("a",), (), {})],
        ),
        (
            "untouched cluster is not listed",
            [("c0", "init", {"a": V1, "b": OTHER})],
            [("c1", "bump a", {"a": V2, "b": OTHER})],
            [("c1", CommitKind.CHANGE, ("a",), (), {})],
        ),
        (
            "manual re-edit back to an earlier state is a revert",
            [("c0", "init", {"a": V1})],
            [("c1", "bump", {"a": V2}), ("c2", "oops, back", {"a": V1})],
            [
                ("c1", CommitKind.CHANGE, ("a",), (), {}),
                ("c2", CommitKind.REVERT, ("a",), (), {"a": "c0"}),
            ],
        ),
        (
            "back two steps restores the newest equal state",
            [("c0", "init", {"a": V1}), ("c1", "v2", {"a": V2})],
            [("c2", "v3", {"a": V3}), ("c3", "v1 again", {"a": V1})],
            [
                ("c2", CommitKind.CHANGE, ("a",), (), {}),
                ("c3", CommitKind.REVERT, ("a",), (), {"a": "c0"}),
            ],
        ),
        (
            "git revert line alone",
            [("c0", "init", {"a": V1})],
            [("c1", "Revert\n\nThis reverts commit " + "b" * 40 + ".", {"a": V2})],
            [("c1", CommitKind.REVERT, ("a",), ("b" * 40,), {})],
        ),
        (
            "proposal merge",
            [("c0", "init", {"a": V1})],
            [("c1", "Merge branch 'gitopsbot/a/2.0.0'", {"a": V2})],
            [("c1", CommitKind.PROPOSAL_MERGE, ("a",), (), {})],
        ),
        (
            "a new cluster is touched; deleting one is not a revert",
            [("c0", "init", {"a": V1})],
            [("c1", "add b", {"a": V1, "b": OTHER}), ("c2", "drop b", {"a": V1})],
            [
                ("c1", CommitKind.CHANGE, ("b",), (), {}),
                ("c2", CommitKind.CHANGE, ("b",), (), {}),
            ],
        ),
        (
            "per cluster: one restored, one changed",
            [("c0", "init", {"a": V1, "b": V1}), ("c1", "v2", {"a": V2, "b": V1})],
            [("c2", "mixed", {"a": V1, "b": V3})],
            [("c2", CommitKind.REVERT, ("a", "b"), (), {"a": "c0"})],
        ),
        (
            "a commit touching no desired file",
            [("c0", "init", {"a": V1})],
            [("c1", "docs", {"a": V1})],
            [("c1", CommitKind.CHANGE, (), (), {})],
        ),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_classification_table(
    name: str,
    history: list[tuple[str, str, dict[str, dict[str, bytes | None]]]],
    new: list[tuple[str, str, dict[str, dict[str, bytes | None]]]],
    expected: list[tuple[str, CommitKind, tuple[str, ...], tuple[str, ...], dict[str, str]]],
) -> None:
    snaps = [_snap(*h) for h in history]
    result = classify_commits([_snap(*n) for n in new], baseline=snaps[-1], history=snaps[:-1])
    got = [(c.commit.sha, c.kind, c.clusters, c.reverts, dict(c.restores)) for c in result.commits]
    assert got == expected, name
    for cluster, commits in result.by_cluster.items():
        assert all(cluster in c.clusters for c in commits)
    assert sum(len(v) for v in result.by_cluster.values()) == sum(
        len(c.clusters) for c in result.commits
    )


def test_without_baseline_everything_present_is_touched() -> None:
    result = classify_commits([_snap("c0", "init", {"a": V1, "b": V2})], baseline=None)
    assert result.commits[0].clusters == ("a", "b")
    assert set(result.by_cluster) == {"a", "b"}


def _charted(sha: str, message: str, files: dict[str, bytes | None], chart: str) -> CommitSnapshot:
    info = CommitInfo(sha=sha, parents=(), author="a <a@x>", message=message, time=T0)
    return snapshot(info, lambda p: files.get(p.rsplit("/", 1)[-1]), ["a"], lambda _c: chart)


def test_a_chart_version_set_back_by_hand_is_a_downgrade_not_a_revert() -> None:
    """#28 item 10: the same bytes as an earlier commit, but the chart version moved back: a
    person chose an older version (a change, judged as an upgrade), not an undo. Values
    written back under the same chart stay a hand-made undo; ``git revert`` stays a revert."""
    c0 = _charted("c0", "init", {"release.yaml": b"version: 1.0.0\n"}, "1.0.0")
    c1 = _charted("c1", "bump", {"release.yaml": b"version: 1.1.0\n"}, "1.1.0")
    back = _charted("c2", "back to 1.0.0", {"release.yaml": b"version: 1.0.0\n"}, "1.0.0")
    got = classify_commits([back], baseline=c1, history=[c0]).commits[0]
    assert (got.kind, got.clusters, dict(got.restores)) == (CommitKind.CHANGE, ("a",), {})
    line = "Revert\n\nThis reverts commit " + "b" * 40 + "."
    reverted = _charted("c2", line, {"release.yaml": b"version: 1.0.0\n"}, "1.0.0")
    assert classify_commits([reverted], baseline=c1, history=[c0]).commits[0].kind == (
        CommitKind.REVERT
    )
    v0 = _charted(
        "v0", "init", {"release.yaml": b"version: 1.0.0\n", "values.yaml": b"a\n"}, "1.0.0"
    )
    v1 = _charted(
        "v1", "values", {"release.yaml": b"version: 1.0.0\n", "values.yaml": b"b\n"}, "1.0.0"
    )
    undo = _charted(
        "v2", "undo", {"release.yaml": b"version: 1.0.0\n", "values.yaml": b"a\n"}, "1.0.0"
    )
    got = classify_commits([undo], baseline=v1, history=[v0]).commits[0]
    assert (got.kind, dict(got.restores)) == (CommitKind.REVERT, {"a": "v0"})


def test_restore_is_undo_only_when_the_chart_stays() -> None:
    assert restore_is_undo("1.0.0", "1.0.0")
    assert not restore_is_undo("1.1.0", "1.0.0")  # set back by hand: a downgrade
    assert not restore_is_undo("1.0.0", "1.1.0")
    assert not restore_is_undo("", "")  # unknown: judged as a change


# -- on real commits ----------------------------------------------------------------------


def _classify_since(fleet: Fleet, repo: object, since: str) -> list[tuple[str, CommitKind]]:
    from gitopsbot.adapters.git import GitRepo

    assert isinstance(repo, GitRepo)
    repo.fetch()

    def snap(info: CommitInfo) -> CommitSnapshot:
        tree = repo.tree(info.sha)
        return snapshot(info, tree.read, tree.list("clusters"))

    older = [snap(c) for c in repo.log("main", None, 50) if repo.is_ancestor(c.sha, since)]
    new = [snap(c) for c in repo.log("main", since, 50)]
    result = classify_commits(new, baseline=older[-1], history=older[:-1])
    return [(c.commit.summary, c.kind) for c in result.commits], result  # type: ignore[return-value]


def test_real_git_revert_is_classified(fleet: Fleet) -> None:
    human = fleet.human()
    repo = fleet.bot()
    start = repo.head("main")
    assert start is not None
    bump = human.commit("bump alpha", {"clusters/alpha/release.yaml": "version: 2.0.0\n"})
    human.commit("tune beta", {"clusters/beta/values.yaml": "x: 1\n"})
    human.git("revert", "--no-edit", bump)
    human.push()
    kinds, result = _classify_since(fleet, repo, start)
    assert kinds == [
        ("bump alpha", CommitKind.CHANGE),
        ("tune beta", CommitKind.CHANGE),
        ('Revert "bump alpha"', CommitKind.REVERT),
    ]
    revert = result.commits[-1]
    assert revert.reverts == (bump,)  # git's line
    assert dict(revert.restores) == {"alpha": start}  # and, independently, the files
    assert revert.clusters == ("alpha",)
    assert [c.commit.summary for c in result.by_cluster["alpha"]] == [
        "bump alpha",
        'Revert "bump alpha"',
    ]


def test_manual_reedit_is_classified_as_revert(fleet: Fleet) -> None:
    human = fleet.human()
    repo = fleet.bot()
    start = repo.head("main")
    assert start is not None
    human.commit("bump", {"clusters/alpha/values.yaml": "hypervisor:\n  image: hv:2.0.0\n"})
    human.push()
    repo.fetch()
    mid = repo.head("main")
    assert mid is not None
    # A person types the old values back by hand: no revert line, same bytes as before.
    human.commit("go back", {"clusters/alpha/values.yaml": "hypervisor:\n  image: hv:1.0.0\n"})
    human.push()
    kinds, result = _classify_since(fleet, repo, mid)
    assert kinds == [("go back", CommitKind.REVERT)]
    assert result.commits[0].reverts == ()
    assert dict(result.commits[0].restores) == {"alpha": start}


def test_merge_of_a_bot_branch_is_a_proposal_merge(fleet: Fleet) -> None:
    human = fleet.human()
    repo = fleet.bot()
    start = repo.head("main")
    assert start is not None
    human.git("checkout", "--quiet", "-b", "gitopsbot/alpha/2.0.0")
    human.commit(
        "Upgrade alpha to 2.0.0\n\nGitopsbot-Proposal: alpha/2.0.0",
        {"clusters/alpha/release.yaml": "version: 2.0.0\n"},
    )
    human.git("checkout", "--quiet", "main")
    human.git("merge", "--quiet", "--no-ff", "--no-edit", "gitopsbot/alpha/2.0.0")
    human.push()
    kinds, result = _classify_since(fleet, repo, start)
    # First-parent history: the merge is one landed commit.
    assert kinds == [("Merge branch 'gitopsbot/alpha/2.0.0'", CommitKind.PROPOSAL_MERGE)]
    assert result.commits[0].proposals == (ProposalId("alpha", "2.0.0"),)
    assert result.commits[0].clusters == ("alpha",)


# -- properties -----------------------------------------------------------------------------

_STATES = [V1, V2, V3, OTHER, None]


@given(
    st.lists(
        st.lists(st.integers(0, len(_STATES) - 1), min_size=2, max_size=2), min_size=2, max_size=12
    )
)
@settings(max_examples=200, deadline=None)
def test_revert_by_files_means_an_earlier_state_came_back(walk: list[list[int]]) -> None:
    """For any history of two clusters: a cluster is 'restored' exactly when the commit changed
    it to a (present) state it had at some earlier commit, and then to the newest such."""
    snaps = []
    for i, pair in enumerate(walk):
        clusters = {
            name: _STATES[k] for name, k in zip(("a", "b"), pair, strict=True) if _STATES[k]
        }
        snaps.append(_snap(f"c{i}", f"commit {i}", clusters))  # type: ignore[arg-type]
    result = classify_commits(snaps[1:], baseline=snaps[0])
    for offset, item in enumerate(result.commits, start=1):
        for name in ("a", "b"):
            now = snaps[offset].clusters.get(name)
            before = snaps[offset - 1].clusters.get(name)
            assert (name in item.clusters) == (now != before)
            earlier = [s.commit.sha for s in snaps[:offset] if s.clusters.get(name) == now]
            expected = earlier[-1] if now is not None and now != before and earlier else None
            assert item.restores.get(name) == expected
        assert (item.kind is CommitKind.REVERT) == bool(item.restores)
