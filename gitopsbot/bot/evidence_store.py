"""The waves' evidence summaries on the state branch (#29): written with the journals, read
instead of them.

``JournalStore.commit`` asks ``with_summaries`` for the ``clusters/<name>/evidence.json``
of every cluster whose ``journal.yaml``, ``queued.yaml`` or ``history/`` the commit changes,
and writes them in that same commit: a kill cannot fall between a record and its summary,
and no commit or push is added. The summary is updated from the one it replaces when that
one is fresh (its fingerprint is the branch's), else rebuilt from the cluster's journals
(written by an older bot, edited by hand, missing). Should that fail, the summary is
removed: a reader then reads the journals, as it does for any missing or stale summary
(``read``). The digests and the fold are ``core.waves.wave_evidence``'s.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from gitopsbot.core.records.journal import Journal
from gitopsbot.core.waves import wave_evidence
from gitopsbot.core.waves.promotion import ClusterEvidence
from gitopsbot.core.waves.wave_evidence import OpDigest, Summary
from gitopsbot.errors import GitOpsBotError
from gitopsbot.fleetrepo import find_cluster
from gitopsbot.ports.files import FileTree
from gitopsbot.ports.repo import Repo


class JournalStore(Protocol):
    """What the summaries read of ``bot.journal_store.JournalStore`` (which keeps a
    ``Summaries`` and asks ``with_summaries`` at each commit: a Protocol, so the two modules
    do not import each other)."""

    @property
    def repo(self) -> Repo: ...

    @property
    def summaries(self) -> Summaries: ...

    @property
    def version_of(self) -> Callable[[Journal], str]: ...

    def head(self) -> str | None: ...

    def parse(self, data: bytes, path: str) -> Journal: ...


log = logging.getLogger(__name__)
VERSIONS_KEPT = 4096  # chart versions by (commit, cluster): a commit's files never change
SUMMARIES_KEPT = 4096  # summaries kept parsed, by their bytes (about one per cluster)


def _base(cluster: str) -> str:
    return f"clusters/{cluster}"


def _cluster_of(path: str) -> str | None:
    """The cluster whose summary a write of ``path`` changes (None: none)."""
    parts = path.strip("/").split("/")
    if len(parts) < 2 or parts[0] != "clusters":
        return None
    if len(parts) == 2:  # the whole directory removed
        return parts[1]
    if parts[2] in ("journal.yaml", "queued.yaml", "history"):
        return parts[1]
    return None


class VersionReader:
    """The chart version an operation's desired commit names in ``repo`` ("" when that
    commit or its files cannot be read; then not kept: Git may answer later)."""

    def __init__(self, repo: Repo) -> None:
        self._repo = repo
        self._known: dict[tuple[str, str], str] = {}
        self._lock = threading.Lock()

    def __call__(self, journal: Journal) -> str:
        key = (journal.desired_sha, journal.cluster)
        with self._lock:
            if key in self._known:
                return self._known[key]
        try:
            spec = find_cluster(self._repo.tree(journal.desired_sha), journal.cluster)
        except GitOpsBotError:
            return ""
        version = spec.release.version if spec is not None else ""
        with self._lock:
            if len(self._known) >= VERSIONS_KEPT:
                self._known.pop(next(iter(self._known)))
            self._known[key] = version
        return version


@dataclass
class SummaryReads:
    """What ``read`` found, for tests and the benchmark: clusters read from their summary,
    and those whose summary was missing, stale or unreadable."""

    summary: list[str] = field(default_factory=list)
    fallback: list[str] = field(default_factory=list)


_UNKNOWN = object()


class Summaries:
    """Summaries parsed, by their bytes (shared by every judgement of the process), and what
    a judgement derived from a cluster's directory on the state branch by that directory's
    id (``ports.files.DirIds``): an idle cluster's files are not read again at the next
    judgement, only those of the clusters whose records changed (#29)."""

    def __init__(self) -> None:
        self._parsed: dict[bytes, Summary] = {}
        self._folded: dict[tuple[str, str], ClusterEvidence] = {}
        # (cluster, its directory's id) → its evidence (None: no fresh summary), its seen.
        self._by_dir: dict[tuple[str, str, str], object] = {}
        self._lock = threading.Lock()
        self.last = SummaryReads()

    def _kept(self, tree: FileTree, cluster: str, what: str) -> tuple[object, str | None]:
        """What was derived as ``what`` from the cluster's directory at its id in ``tree``
        (``_UNKNOWN`` when nothing), and the key to keep a new one under (None: the tree
        cannot name directories; read every time)."""
        # Not isinstance(tree, DirIds): a runtime Protocol check costs tens of microseconds,
        # once per cluster per judgement (#29: a visible share of a 1,000-cluster one).
        dir_id: Callable[[str], str | None] | None = getattr(tree, "dir_id", None)
        if dir_id is None:
            return _UNKNOWN, None
        ident = dir_id(_base(cluster))
        if ident is None:
            return _UNKNOWN, None
        with self._lock:
            return self._by_dir.get((cluster, ident, what), _UNKNOWN), ident

    def _keep(self, cluster: str, ident: str | None, what: str, value: object) -> None:
        if ident is None:
            return
        with self._lock:
            if len(self._by_dir) >= 4 * SUMMARIES_KEPT:
                self._by_dir.pop(next(iter(self._by_dir)))
            self._by_dir[(cluster, ident, what)] = value

    def seen(self, tree: FileTree, cluster: str) -> str | None:
        """The cluster's ``seen`` at ``tree`` (``JournalStore.seen``'s, kept by directory)."""
        kept, ident = self._kept(tree, cluster, "seen")
        if kept is not _UNKNOWN:
            return kept if isinstance(kept, str) else None
        data = tree.read(f"{_base(cluster)}/seen")
        found = data.decode().strip() or None if data is not None else None
        self._keep(cluster, ident, "seen", found)
        return found

    def parse(self, data: bytes) -> Summary:
        with self._lock:
            found = self._parsed.get(data)
        if found is not None:
            return found
        summary = wave_evidence.loads(data.decode("utf-8", "replace"))
        with self._lock:
            if len(self._parsed) >= SUMMARIES_KEPT:
                self._parsed.pop(next(iter(self._parsed)))
            self._parsed[data] = summary
        return summary

    def read(self, tree: FileTree, clusters: Iterable[str]) -> dict[str, ClusterEvidence]:
        """The evidence of ``clusters`` from their fresh summaries at ``tree`` (the state
        branch's head); a cluster left out has none that can be trusted: read its
        journals."""
        out: dict[str, ClusterEvidence] = {}
        reads = SummaryReads()
        for name in clusters:
            kept, ident = self._kept(tree, name, "evidence")
            if kept is _UNKNOWN:
                fresh = self._fresh(tree, name)
                kept = self._evidence(name, fresh) if fresh is not None else None
                self._keep(name, ident, "evidence", kept)
            (reads.summary if kept is not None else reads.fallback).append(name)
            if isinstance(kept, ClusterEvidence):
                out[name] = kept
        self.last = reads
        return out

    def _evidence(self, cluster: str, summary: Summary) -> ClusterEvidence:
        # Folded once per summary: an idle cluster's evidence is the same every judgement.
        key = (cluster, summary.fingerprint)
        with self._lock:
            found = self._folded.get(key)
        if found is None:
            found = summary.evidence(cluster)
            with self._lock:
                if len(self._folded) >= SUMMARIES_KEPT:
                    self._folded.pop(next(iter(self._folded)))
                self._folded[key] = found
        return found

    def _fresh(self, tree: FileTree, cluster: str) -> Summary | None:
        base = _base(cluster)
        data = tree.read(f"{base}/{wave_evidence.FILE}")
        if data is None:
            return None
        try:
            summary = self.parse(data)
        except ValueError as e:
            log.info("%s: %s unreadable, the journals are read: %s", cluster, base, e)
            return None
        now = wave_evidence.fingerprint(
            tree.read(f"{base}/journal.yaml"),
            tree.read(f"{base}/queued.yaml"),
            tree.list(f"{base}/history"),
        )
        return summary if summary.fingerprint == now else None


def with_summaries(
    store: JournalStore, files: Mapping[str, bytes | None]
) -> dict[str, bytes | None]:
    """``files`` plus the summaries of the clusters whose journals they change."""
    clusters = sorted({c for path in files if (c := _cluster_of(path)) is not None})
    if not clusters:
        return dict(files)
    head = store.head()
    tree = store.repo.tree(head) if head is not None else None
    out = dict(files)
    for cluster in clusters:
        path = f"{_base(cluster)}/{wave_evidence.FILE}"
        if path in files:
            continue  # written by the caller (a test, a rebuild)
        try:
            summary = _summary_after(store, tree, cluster, files)
        except (ValueError, GitOpsBotError) as e:
            # The record goes on; the summary goes: readers fall back to the journals.
            log.warning("%s: waves evidence summary not kept: %s", cluster, e)
            summary = None
        out[path] = None if summary is None else wave_evidence.dumps(summary).encode()
    return out


def _summary_after(
    store: JournalStore, tree: FileTree | None, cluster: str, files: Mapping[str, bytes | None]
) -> Summary | None:
    base = _base(cluster)
    if files.get(base, b"") is None:
        return None  # the cluster's records removed

    def before(path: str) -> bytes | None:
        return tree.read(path) if tree is not None else None

    def after(path: str) -> bytes | None:
        return files[path] if path in files else before(path)

    names_before = set(tree.list(f"{base}/history")) if tree is not None else set()
    names_after = set(names_before)
    if files.get(f"{base}/history", b"") is None:
        names_after = set()
    prefix = f"{base}/history/"
    for path, data in files.items():
        if path.startswith(prefix) and "/" not in path[len(prefix) :]:
            name = path[len(prefix) :]
            (names_after.discard if data is None else names_after.add)(name)

    old: Summary | None = None
    if tree is not None and (data := tree.read(f"{base}/{wave_evidence.FILE}")) is not None:
        try:
            old = store.summaries.parse(data)
        except ValueError:
            old = None
        fingerprint = wave_evidence.fingerprint(
            before(f"{base}/journal.yaml"), before(f"{base}/queued.yaml"), names_before
        )
        if old is not None and old.fingerprint != fingerprint:
            old = None  # stale: rebuilt from the journals

    def digest(path: str) -> OpDigest | None:
        data = after(path)
        if data is None:
            return None
        journal = store.parse(data, path)
        return wave_evidence.digest(journal, store.version_of(journal))

    history: dict[str, OpDigest] = {}
    for name in sorted(names_after):
        kept = old.history.get(name) if old is not None else None
        if kept is None or f"{prefix}{name}" in files:
            found = digest(f"{prefix}{name}")
            if found is None:
                continue
            kept = found
        history[name] = kept
    current_path, queued_path = f"{base}/journal.yaml", f"{base}/queued.yaml"
    fresh = old is not None
    current = old.current if old is not None and current_path not in files else None
    if not fresh or current_path in files:
        current = digest(current_path)
    queued = old.queued if old is not None and queued_path not in files else None
    if not fresh or queued_path in files:
        queued = digest(queued_path)
    if current is None and queued is None and not history:
        return None
    return Summary(
        fingerprint=wave_evidence.fingerprint(
            after(f"{base}/journal.yaml"), after(f"{base}/queued.yaml"), names_after
        ),
        history=history,
        current=current,
        queued=queued,
    )
