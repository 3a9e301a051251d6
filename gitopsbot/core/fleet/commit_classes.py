"""What each new commit on the watched branch means: a change, a bot proposal merged, a revert.

Pure. The caller reads, for every commit, the bytes of each cluster's *desired files*
(``clusters/<name>/{release,values,rollout,credentials}.yaml``) and passes them in as a
``CommitSnapshot``; this module fingerprints them with Git blob ids, finds which clusters each
commit touched, and classifies the commit.

Conventions (documented in docs/git.md):

* A bot proposal lives on branch ``gitopsbot/<cluster>/<version>``; its commits carry the
  trailer ``Gitopsbot-Proposal: <cluster>/<version>``. A commit is a *proposal merge* when its
  message names such a branch (GitHub, GitLab, Gitea and ``git merge`` all write the source
  branch into the merge message) or carries the trailer (which survives squash merges).
* A commit is a *revert* when either (a) its message has git's line
  ``This reverts commit <sha>.`` or (b) — independently, so a hand-made undo counts too — a
  cluster it touched now has exactly the desired files it had at an earlier commit (other
  than the state just before) **and the same chart version as just before**. (b) is decided
  per cluster. A chart version set back by hand is a downgrade, not an undo
  (``restore_is_undo``, issue #28): an upgrade to an older version, judged as any chart
  change (plan, policies), and no rollback that would mark the version it left failed.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from gitopsbot.core.fleet.observed_git import CommitInfo

DESIRED_FILES = ("release.yaml", "values.yaml", "rollout.yaml", "credentials.yaml")
CLUSTERS_DIR = "clusters"
PROPOSAL_PREFIX = "gitopsbot/"
PROPOSAL_TRAILER = "Gitopsbot-Proposal"

# Cluster names are DNS-label-like (as the fleet loader requires); versions are SemVer with
# an optional leading "v", pre-release and build parts.
_CLUSTER = r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?"
_VERSION = r"v?\d+\.\d+\.\d+(?:-[0-9A-Za-z.-]+)?(?:\+[0-9A-Za-z.-]+)?"
_PROPOSAL = rf"gitopsbot/(?P<cluster>{_CLUSTER})/(?P<version>{_VERSION})(?![\w+])"
# A "/" may precede: GitHub writes "from <owner>/<branch>", git "'origin/<branch>'".
_BRANCH_RE = re.compile(rf"(?<![\w.-]){_PROPOSAL}")
_TRAILER_RE = re.compile(
    rf"^{PROPOSAL_TRAILER}:\s*(?P<cluster>{_CLUSTER})/(?P<version>{_VERSION})\s*$",
    re.MULTILINE | re.IGNORECASE,
)
_REVERT_RE = re.compile(r"This reverts commit (?P<sha>[0-9a-f]{7,40})\b")


class CommitKind(StrEnum):
    CHANGE = "change"
    PROPOSAL_MERGE = "proposal-merge"
    REVERT = "revert"


@dataclass(frozen=True, slots=True, order=True)
class ProposalId:
    """One proposal: a cluster and the chart version it proposes."""

    cluster: str
    version: str

    def __str__(self) -> str:
        return f"{self.cluster}/{self.version}"

    @property
    def branch(self) -> str:
        return f"{PROPOSAL_PREFIX}{self.cluster}/{self.version}"

    @property
    def trailer(self) -> str:
        return f"{PROPOSAL_TRAILER}: {self}"


def proposal_branch(cluster: str, version: str) -> str:
    """``gitopsbot/<cluster>/<version>``; ValueError when either part breaks the convention."""
    branch = ProposalId(cluster, version).branch
    if parse_proposal_branch(branch) is None:
        raise ValueError(f"not a valid proposal branch: {branch!r}")
    return branch


def parse_proposal_branch(branch: str) -> ProposalId | None:
    """The proposal a branch name stands for (``refs/heads/`` allowed), else None."""
    name = branch.removeprefix("refs/heads/")
    m = _BRANCH_RE.fullmatch(name)
    return ProposalId(m["cluster"], m["version"]) if m else None


def proposals_in_message(message: str) -> tuple[ProposalId, ...]:
    """Proposals a commit message names, by trailer or by branch name; sorted, unique."""
    found = {ProposalId(m["cluster"], m["version"]) for m in _TRAILER_RE.finditer(message)}
    found |= {ProposalId(m["cluster"], m["version"]) for m in _BRANCH_RE.finditer(message)}
    return tuple(sorted(found))


def reverted_shas(message: str) -> tuple[str, ...]:
    """Shas named by git's ``This reverts commit <sha>.`` lines, in order."""
    return tuple(dict.fromkeys(m["sha"] for m in _REVERT_RE.finditer(message)))


def git_blob_id(data: bytes) -> str:
    """The id Git gives a blob with these bytes (SHA-1 object format)."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data, usedforsecurity=False).hexdigest()


# Per desired file name: its blob id, or None when the file is absent.
DesiredFiles = tuple[tuple[str, str | None], ...]


def desired_files(files: Mapping[str, bytes | None]) -> DesiredFiles:
    """Fingerprint of one cluster's desired files (file name → bytes or None)."""
    return tuple(
        (name, None if files.get(name) is None else git_blob_id(files[name] or b""))
        for name in DESIRED_FILES
    )


def desired_paths(cluster: str) -> tuple[str, ...]:
    return tuple(f"{CLUSTERS_DIR}/{cluster}/{name}" for name in DESIRED_FILES)


@dataclass(frozen=True, slots=True)
class CommitSnapshot:
    """A commit and, per cluster present at it, the fingerprint of its desired files and
    its chart version (``release.yaml``'s; "" when unknown or not given)."""

    commit: CommitInfo
    clusters: Mapping[str, DesiredFiles]
    charts: Mapping[str, str] = field(default_factory=dict)


def snapshot(
    commit: CommitInfo,
    read: Callable[[str], bytes | None],
    clusters: Iterable[str],
    chart: Callable[[str], str] | None = None,
) -> CommitSnapshot:
    """Fingerprint ``clusters`` at ``commit``; ``read`` reads a path at that commit (for
    instance ``repo.tree(sha).read``, with ``clusters`` from ``tree.list("clusters")``);
    ``chart`` names a cluster's chart version at that commit (the fleet loader's)."""
    names = sorted(clusters)
    return CommitSnapshot(
        commit=commit,
        clusters={
            name: desired_files({f: read(f"{CLUSTERS_DIR}/{name}/{f}") for f in DESIRED_FILES})
            for name in names
        },
        charts={name: chart(name) for name in names} if chart is not None else {},
    )


def restore_is_undo(chart_before: str, chart_after: str) -> bool:
    """Whether a commit that restores a cluster's earlier desired files undoes the change
    before it (a hand-made rollback): only when it leaves the chart version alone. A chart
    version set back by hand is a person choosing an older version, a downgrade judged as an
    upgrade; an explicit undo of a version is ``git revert`` (or the bot's own rollback).
    An unknown version ("") is no undo: judged as a change, never waved through."""
    return bool(chart_before) and chart_before == chart_after


@dataclass(frozen=True, slots=True)
class ClassifiedCommit:
    """One commit's meaning. ``restores`` maps a touched cluster to the earlier commit whose
    desired files it now equals (the newest such), unless its chart version changed (a
    downgrade by hand, ``restore_is_undo``); ``reverts`` are the shas git's revert line
    names; ``proposals`` are the bot proposals the message names."""

    commit: CommitInfo
    kind: CommitKind
    clusters: tuple[str, ...]
    reverts: tuple[str, ...] = ()
    restores: Mapping[str, str] = field(default_factory=dict)
    proposals: tuple[ProposalId, ...] = ()


@dataclass(frozen=True, slots=True)
class Classification:
    commits: tuple[ClassifiedCommit, ...]
    by_cluster: Mapping[str, tuple[ClassifiedCommit, ...]]


def classify_commits(
    new: Sequence[CommitSnapshot],
    *,
    baseline: CommitSnapshot | None,
    history: Sequence[CommitSnapshot] = (),
) -> Classification:
    """Classify ``new`` (oldest first) against ``baseline`` (the last commit already seen;
    None for an empty start) and ``history`` (older commits before the baseline, oldest
    first: how far back a hand-made revert is recognised).

    A commit touches a cluster when the cluster's fingerprint differs from the one just before
    it (a cluster appearing or disappearing counts). Kind precedence: REVERT over
    PROPOSAL_MERGE over CHANGE, since undoing is what the bot must act on first.
    """
    seen: list[CommitSnapshot] = [*history, *([baseline] if baseline is not None else [])]
    previous: Mapping[str, DesiredFiles] = baseline.clusters if baseline is not None else {}
    charts: Mapping[str, str] = baseline.charts if baseline is not None else {}
    out: list[ClassifiedCommit] = []
    for snap in new:
        touched = sorted(
            name
            for name in set(previous) | set(snap.clusters)
            if previous.get(name) != snap.clusters.get(name)
        )
        restores: dict[str, str] = {}
        for name in touched:
            now = snap.clusters.get(name)
            if (name in charts or name in snap.charts) and not restore_is_undo(
                charts.get(name, ""), snap.charts.get(name, "")
            ):
                continue  # a chart version set back by hand: a downgrade, not an undo
            # The state just before differs (the cluster was touched), so any match is older.
            for earlier in reversed(seen):
                if earlier.clusters.get(name) == now and now is not None:
                    restores[name] = earlier.commit.sha
                    break
        reverts = reverted_shas(snap.commit.message)
        proposals = proposals_in_message(snap.commit.message)
        if reverts or restores:
            kind = CommitKind.REVERT
        elif proposals:
            kind = CommitKind.PROPOSAL_MERGE
        else:
            kind = CommitKind.CHANGE
        out.append(
            ClassifiedCommit(
                commit=snap.commit,
                kind=kind,
                clusters=tuple(touched),
                reverts=reverts,
                restores=restores,
                proposals=proposals,
            )
        )
        seen.append(snap)
        previous, charts = snap.clusters, snap.charts
    by_cluster: dict[str, list[ClassifiedCommit]] = {}
    for item in out:
        for name in item.clusters:
            by_cluster.setdefault(name, []).append(item)
    return Classification(
        commits=tuple(out), by_cluster={k: tuple(v) for k, v in sorted(by_cluster.items())}
    )
