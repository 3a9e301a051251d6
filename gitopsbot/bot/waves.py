"""Waves at apply time and on the plan (issue 14): the evidence read from the state branch.

The decision is ``core.waves.promotion`` (through ``core.waves.promotion_gate``); here each
cluster's
evidence is read from the state branch: its summary ``evidence.json`` (``bot.evidence_store``,
#29), or, where that is missing, stale or unreadable, its journals (``JournalStore``:
``journal.yaml``, ``queued.yaml``, ``history/``) with each operation's chart version from
the fleet repository at its desired commit (``version_of``). The result is turned into
verdicts.

Fail closed: a state branch that is missing or a journal that does not parse gives no
evidence, and a change that needs evidence (a later wave's chart change) is denied with the
reason; a change that needs none (the first wave, an unwaved cluster, a revert, a downgrade)
passes as it would anyway.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime

from gitopsbot.bot import canary_marks_store
from gitopsbot.bot.journal_store import JournalStore
from gitopsbot.core.fleet.model import BotSettings, ClusterSpec, Fleet
from gitopsbot.core.policy import Verdict
from gitopsbot.core.records.journal import Journal
from gitopsbot.core.waves import canary_marks, promotion, promotion_gate
from gitopsbot.core.waves.promotion import ClusterEvidence, PromotionDecision
from gitopsbot.errors import GitOpsBotError
from gitopsbot.fleetrepo import find_cluster
from gitopsbot.ports.repo import Repo

log = logging.getLogger(__name__)
LOG_LIMIT = 200  # watched-branch commits looked at for a cluster's pending change


class EvidenceUnreadable(Exception):
    """The state branch cannot say what the earlier waves run."""


def journals(store: JournalStore, cluster: str) -> list[Journal]:
    """Every recorded operation of ``cluster``: history, the current one, the queued one."""
    found: list[Journal] = []
    head = store.head()
    if head is None:
        return found
    for name in store.history_names(cluster):
        if name.endswith(".yaml"):
            j = store.history(cluster, name.removesuffix(".yaml"))
            if j is not None:
                found.append(j)
    for j in (store.current(cluster), store.queued(cluster)):
        if j is not None:
            found.append(j)
    return found


def read_evidence(
    store: JournalStore,
    clusters: Iterable[str],
    version_of: Callable[[Journal], str],
    pending: Callable[[str], bool] | None = None,
) -> dict[str, ClusterEvidence]:
    """Evidence per cluster; ``pending(cluster)``: a watched-branch commit for it is not
    taken in yet (then it is in flight). Raises EvidenceUnreadable (the branch is missing, a
    journal does not parse, Git fails)."""
    try:
        head = store.head()
        if head is None:
            raise EvidenceUnreadable(f"no {store.branch} branch: the bot has recorded nothing")
        names = list(clusters)
        # One small file per cluster (bot.evidence_store); the journals only where it is
        # missing, stale or unreadable.
        summarised = store.summaries.read(store.repo.tree(head), names)
        out: dict[str, ClusterEvidence] = {}
        for name in names:
            e = summarised.get(name) or promotion_gate.evidence_from(
                name, journals(store, name), version_of
            )
            if pending is not None and not e.in_flight and pending(name):
                e = replace(e, in_flight=True)
            out[name] = e
        return out
    except (ValueError, GitOpsBotError) as e:
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise EvidenceUnreadable(f"{store.branch}: {first}") from None


class LazyEvidence(Mapping[str, ClusterEvidence]):
    """``read_evidence``'s answer, each cluster read when the decision first asks for it: a
    judgement reads only the clusters of the earlier waves, and none for a revert or a
    change its wave does not gate (#29: a values change at 1,000 clusters read every
    cluster's evidence, 0.1–0.2 s of a merge's first action, to use none of it). Raises
    EvidenceUnreadable as ``read_evidence`` does, from the read that fails."""

    def __init__(
        self,
        store: JournalStore,
        clusters: Iterable[str],
        version_of: Callable[[Journal], str],
        pending: Callable[[str], bool] | None = None,
    ) -> None:
        self._names = list(clusters)
        self._known = set(self._names)
        self._read: dict[str, ClusterEvidence] = {}
        self._store, self._version_of, self._pending = store, version_of, pending
        self._head = store.head()
        if self._head is None:
            raise EvidenceUnreadable(f"no {store.branch} branch: the bot has recorded nothing")

    def __getitem__(self, name: str) -> ClusterEvidence:
        if name not in self._known:
            raise KeyError(name)
        if name not in self._read:
            assert self._head is not None
            self._read[name] = _evidence_of(
                self._store, self._head, name, self._version_of, self._pending
            )
        return self._read[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)

    @property
    def read(self) -> list[str]:
        """The clusters read so far (for tests and logs)."""
        return list(self._read)


def _evidence_of(
    store: JournalStore,
    head: str,
    name: str,
    version_of: Callable[[Journal], str],
    pending: Callable[[str], bool] | None,
) -> ClusterEvidence:
    try:
        summarised = store.summaries.read(store.repo.tree(head), [name])
        e = summarised.get(name) or promotion_gate.evidence_from(
            name, journals(store, name), version_of
        )
        if pending is not None and not e.in_flight and pending(name):
            e = replace(e, in_flight=True)
        return e
    except (ValueError, GitOpsBotError) as err:
        first = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise EvidenceUnreadable(f"{store.branch}: {first}") from None


@dataclass(frozen=True, slots=True)
class WaveJudgement:
    decision: PromotionDecision | None  # None: waves not configured
    verdicts: tuple[Verdict, ...]

    @property
    def soak_ends_at(self) -> datetime | None:
        return self.decision.soak_ends_at if self.decision is not None else None


def judge(
    *,
    store: JournalStore,
    settings: BotSettings,
    clusters: Mapping[str, ClusterSpec],
    spec: ClusterSpec,
    before: str,
    now: datetime,
    version_of: Callable[[Journal], str],
    revert: bool = False,
    pending: Callable[[str], bool] | None = None,
) -> WaveJudgement:
    """The ``WAVES`` verdict for ``spec``'s change (none when it may go). Versions a GPU
    canary marked failed on the state branch (issue 18) hold like failedVersions entries."""
    marks, unreadable = canary_marks_store.read_canary_marks(store.repo, store.branch)
    settings = canary_marks.with_canary_marks(settings, marks, settings.cleared_versions)
    chart_change = before != spec.release.version
    if unreadable and chart_change and not revert:
        # Fail closed: a record that cannot be read may hold this very version.
        held = promotion_gate.unreadable("GPU canary record: " + "; ".join(unreadable))
        return WaveJudgement(None, (held,))
    if not promotion_gate.applies(settings):
        return WaveJudgement(None, ())
    problem = ""

    def decide(evidence: Mapping[str, ClusterEvidence]) -> PromotionDecision:
        return promotion_gate.decide_change(
            settings=settings,
            clusters=clusters.values(),
            evidence=evidence,
            spec=spec,
            before=before,
            now=now,
            revert=revert,
        )

    try:  # only the evidence the decision asks for is read (``LazyEvidence``)
        decision = decide(LazyEvidence(store, clusters, version_of, pending))
    except EvidenceUnreadable as e:
        decision, problem = decide({}), str(e)
    if problem and not decision.allowed and decision.failed is None:
        log.warning("%s: waves: %s", spec.name, problem)
        held = promotion_gate.unreadable(problem, decision)
        return WaveJudgement(decision, (held,))
    found = promotion_gate.verdict(decision, spec)
    return WaveJudgement(decision, (found,) if found is not None else ())


def judge_plan(
    repo: Repo, fleet: Fleet, desired: ClusterSpec, *, before: str, now: datetime | None = None
) -> WaveJudgement:
    """The waves' verdict for a request's plan: ``fleet`` is the watched branch's (its
    settings and clusters decide), ``desired`` the cluster as the request leaves it,
    ``before`` the chart version the watched branch names. The evidence is read from the
    fleet repository's state branch as fetched; each operation's version from ``repo``."""
    store = JournalStore(repo, branch=fleet.settings.state_branch, push=False)
    return judge(
        store=store,
        settings=fleet.settings,
        clusters=fleet.clusters,
        spec=desired,
        before=before,
        now=now or datetime.now(UTC),
        version_of=version_reader(repo),
        pending=pending_reader(repo, store, fleet.settings.watched_branch),
    )


class WatchedLog:
    """The watched branch's last ``LOG_LIMIT`` commits at one head, with the clusters each
    touches, worked out once for every cluster's ``pending`` (#29): a judgement asks for
    each cluster of the fleet, and each would walk and diff the same commits."""

    def __init__(self, repo: Repo, watched: str, head: str) -> None:
        self.head = head
        self._repo = repo
        self._commits = repo.log(watched, None, LOG_LIMIT) if head else []
        self._index = {c.sha: i for i, c in enumerate(self._commits)}
        self._touched: dict[int, frozenset[str] | None] = {}
        self.diffs = 0  # commits diffed (tests)

    def after(self, seen: str) -> range | None:
        """The positions of the commits after ``seen`` (None: ``seen`` is not among them,
        and the branch must be walked from it)."""
        if self._commits and self._commits[-1].sha != self.head:
            return None
        i = self._index.get(seen)
        return None if i is None else range(i + 1, len(self._commits))

    def touched(self, i: int) -> frozenset[str] | None:
        """The clusters commit ``i`` changes files of (None: a root commit, every one)."""
        if i not in self._touched:
            commit = self._commits[i]
            parent = commit.parents[0] if commit.parents else None
            found: frozenset[str] | None = None
            if parent is not None:
                self.diffs += 1
                paths = self._repo.diff_paths(parent, commit.sha)
                found = frozenset(
                    p.split("/")[1] for p in paths if p.startswith("clusters/") and p.count("/") > 1
                )
            self._touched[i] = found
        return self._touched[i]


def pending_reader(
    repo: Repo, store: JournalStore, watched: str, known: WatchedLog | None = None
) -> Callable[[str], bool]:
    """Whether the watched branch has a commit touching ``clusters/<name>/`` after the last
    one the bot took in for that cluster (its ``seen``). A cluster the bot has not taken in
    at all has nothing pending: it has no evidence either. ``known``: the branch's log at
    its head, shared by the judgements of that head (``WatchedLog``)."""
    head = repo.head(watched)
    shared = known if known is not None and known.head == head else None
    # The state branch read at one commit for every cluster of the judgement: not a ref
    # lookup per cluster (#29: 1,000 of them were a visible share of a judgement).
    seen_of = store.seen_reader()

    def pending(cluster: str) -> bool:
        seen = seen_of(cluster)
        if head is None or seen is None or seen == head:
            return False
        positions = shared.after(seen) if shared is not None else None
        if shared is not None and positions is not None:
            return any((t := shared.touched(i)) is None or cluster in t for i in positions)
        prefix = f"clusters/{cluster}/"
        for commit in repo.log(watched, seen, LOG_LIMIT):
            parent = commit.parents[0] if commit.parents else None
            if parent is None or any(
                p.startswith(prefix) for p in repo.diff_paths(parent, commit.sha)
            ):
                return True
        return False

    return pending


def version_reader(repo: Repo) -> Callable[[Journal], str]:
    """The chart version an operation's desired commit names in ``repo`` ("" when that
    commit or its files cannot be read)."""

    known: dict[tuple[str, str], str] = {}  # a commit's files never change

    def version_of(journal: Journal) -> str:
        key = (journal.desired_sha, journal.cluster)
        if key not in known:
            try:
                spec = find_cluster(repo.tree(journal.desired_sha), journal.cluster)
            except GitOpsBotError:
                return ""  # not cached: Git may answer later
            known[key] = spec.release.version if spec is not None else ""
        return known[key]

    return version_of


def for_proposal(
    repo: Repo, fleet: Fleet, spec: ClusterSpec, version: str, *, now: datetime | None = None
) -> tuple[str, str]:
    """Proposals follow the waves: (why a new proposal of ``version`` for ``spec``'s cluster
    waits, "" when it may be opened; the evidence of the earlier waves for its description,
    "" when none)."""
    settings = fleet.settings
    if not promotion_gate.applies(settings):
        return "", ""
    desired = replace(spec, release=replace(spec.release, version=version))
    found = judge_plan(repo, fleet, desired, before=spec.release.version, now=now)
    if found.verdicts:
        return found.verdicts[0].message, ""
    wave = promotion.wave_of(settings.waves, spec)
    if wave is None:
        return "", ""
    groups = promotion.fleet_by_wave(settings.waves, fleet.clusters.values())
    earlier = [c for g in groups[: settings.waves.index(wave)] for c in g.clusters]
    if not earlier:
        return "", ""
    store = JournalStore(repo, branch=settings.state_branch, push=False)
    try:
        evidence = read_evidence(store, earlier, version_reader(repo))
    except EvidenceUnreadable:
        return "", ""
    lines = [f"Earlier waves ran {version}, verified and soaked (records on `{store.branch}`):", ""]
    for name in earlier:
        e = evidence.get(name)
        if e is None or not e.op_id:
            continue
        since = f" since {e.verified_at:%Y-%m-%d %H:%M} UTC" if e.verified_at else ""
        lines.append(f"- `{name}`: verified{since}: `clusters/{name}/history/{e.op_id}.yaml`")
    return "", "\n".join(lines) + "\n"
