"""Upstream version proposals, decided purely: which chart version to propose to which
clusters, one request per cluster or, with ``proposals.groupBy: wave``, one per wave.

Inputs are values: each cluster's current chart version and upgrade scope, its chart
repository's index, the waves and their members, the bot's earlier proposals (the ledger,
``ProposalRecord``) and the fleet-wide bound ``max_open``. Outputs are decisions (propose /
keep / close); ``core.proposing.request_texts`` writes a proposal's edits and request text and
the proposer (``gitopsbot.bot.proposer``) carries them out. Decisions (docs/proposals.md):

* The target is the newest released (non pre-release) chart version above the current one that
  the scope allows (patch: same major.minor; minor: same major; major: any; pinned: none).
* A version whose appVersion changes major (1.x → 2.x) is skipped with a note: R2 says this
  flow must not be used for it (F5: the app major decides, not the chart major). A version
  whose appVersion is lower than the current one's is skipped too (F5: not monotonic).
  Skipping beats proposing-with-a-flag: a pull request that must never be merged is noise.
* A proposal branch is named after its version (``gitopsbot/<cluster>/<version>``), so a newer
  target cannot reuse it: the older open request is *closed with a comment* naming the new one
  (superseded), never left to pile up. Replacing an open proposal is net zero for the bound.
* A version whose proposal was closed without merging (by a person, or by the bot when it was
  superseded), or merged and later reverted, is never proposed again. When the newest allowed
  version was declined nothing older is proposed in its place (as Renovate does).
* At most ``max_open`` proposals are open across the fleet; clusters are served in name order.

A wave's request (issue 14) bumps ``chart.version`` in every cluster of the wave that is below
the target and may take it, on one branch (``gitopsbot/upgrade/<wave>/<version>``), by the
same rules applied to the wave as one:

* The target is the newest version some member may take; the members bumped are those below
  it that may take it. A member already on it (or above) is left out, so is one whose scope or
  appVersion rules it out (a note says so).
* A declined wave request, or one merged and later reverted while a member is below it again,
  is not proposed again for that wave, and nothing older in its place.
* ``max_open`` bounds every open request (per wave and per cluster); waves are served first,
  in wave order, then the unwaved clusters in name order.
* An open per-cluster request of a cluster a wave now takes is closed: the wave's request
  carries its upgrade.

Whether the earlier waves have soaked is the gate's (``bot.waves.for_proposal``), as for a
per-cluster proposal; membership is ``core.waves.promotion``'s.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any

from gitopsbot.core.charts.chart import ChartVersion, semver_key
from gitopsbot.core.fleet.commit_classes import ProposalId
from gitopsbot.core.fleet.model import Fleet, UpgradeScope
from gitopsbot.core.waves import promotion

LEDGER_FILE = "proposals.json"  # on the bot's state branch
LEDGER_VERSION = 1


class ProposalState(StrEnum):
    OPEN = "open"
    CLOSED = "closed"  # closed without merging by a person: declined
    MERGED = "merged"
    SUPERSEDED = "superseded"  # closed by the bot (a newer version, or no longer wanted)


@dataclass(frozen=True, slots=True, order=True)
class ProposalRecord:
    """One proposal the bot opened, as the ledger remembers it."""

    cluster: str
    version: str
    number: int
    state: ProposalState = ProposalState.OPEN
    head: str = ""  # the branch head the policy status was last set on
    # A wave's request (proposals.groupBy: wave): ``cluster`` is "".
    wave: str = ""

    @property
    def branch(self) -> str:
        if self.wave:
            return wave_branch(self.wave, self.version)
        return ProposalId(self.cluster, self.version).branch


def wave_branch(wave: str, version: str) -> str:
    """``gitopsbot/upgrade/<wave>/<version>``: a wave's request (its name made branch-safe)."""
    safe = re.sub(r"[^a-z0-9-]+", "-", wave.lower()).strip("-") or "wave"
    return f"gitopsbot/upgrade/{safe}/{version}"


@dataclass(frozen=True, slots=True)
class ClusterInput:
    """What the decision needs to know about one cluster."""

    cluster: str
    current_version: str
    scope: UpgradeScope
    versions: tuple[ChartVersion, ...]  # the chart's index entries (any order)
    problem: str = ""  # why no index could be read ("" when it could)


@dataclass(frozen=True, slots=True)
class Skipped:
    version: str
    reason: str


@dataclass(frozen=True, slots=True)
class Closing:
    record: ProposalRecord
    reason: str
    superseded_by: str = ""  # the version replacing it, when one does


@dataclass(frozen=True, slots=True)
class WaveInput:
    """A wave (in the order of ``waves:``) and the clusters it takes."""

    wave: str
    members: tuple[ClusterInput, ...]


@dataclass(frozen=True, slots=True)
class ProposalDecision:
    """What to do about one request: a cluster's (``wave`` is "") or a wave's (``cluster`` is
    ""), as ``ProposalRecord`` names them; neither, for closings alone."""

    cluster: str
    target: ChartVersion | None  # propose (open or refresh) this version
    current: tuple[tuple[str, str], ...] = ()  # (cluster, its chart version) the request bumps
    existing: ProposalRecord | None = None  # the open request for ``target``, if any
    close: tuple[Closing, ...] = ()
    skipped: tuple[Skipped, ...] = ()
    notes: tuple[str, ...] = ()
    wave: str = ""

    @property
    def opens_new(self) -> bool:
        return self.target is not None and self.existing is None

    @property
    def replaces(self) -> bool:
        """Opens a request that supersedes an open one of its own: net zero for the bound."""
        return self.opens_new and any(c.superseded_by for c in self.close)

    @property
    def clusters(self) -> tuple[str, ...]:
        """The clusters the request bumps, by name."""
        return tuple(cluster for cluster, _ in self.current)

    @property
    def who(self) -> str:
        """The request's subject in reports and notes: the cluster, or ``wave <name>``."""
        return f"wave {self.wave}" if self.wave else self.cluster


# -- versions -----------------------------------------------------------------------------


def _norm(version: str) -> str:
    return version.strip().removeprefix("v")


def _key(version: str) -> tuple[Any, ...]:
    return semver_key(version)


def in_scope(current: str, candidate: str, scope: UpgradeScope) -> bool:
    """Whether ``scope`` allows moving from ``current`` to the higher ``candidate``."""
    cur, new = _key(current), _key(candidate)
    if scope == "pinned" or new <= cur:
        return False
    if scope == "patch":
        return bool(new[:2] == cur[:2])
    if scope == "minor":
        return bool(new[0] == cur[0])
    return True


def _app_key(app_version: str) -> tuple[Any, ...] | None:
    try:
        return _key(app_version)
    except ValueError:
        return None


def candidates(
    current: str, scope: UpgradeScope, versions: Sequence[ChartVersion]
) -> tuple[tuple[ChartVersion, ...], tuple[Skipped, ...], tuple[str, ...]]:
    """Allowed versions newest first, the skipped ones with their reason, and notes."""
    if scope == "pinned":
        return (), (), ("scope is pinned: no version is proposed",)
    by_version = {_norm(v.version): v for v in versions}
    deployed = by_version.get(_norm(current))
    if deployed is None:
        return (), (), (f"chart {current} is not in the repository index: R2/F5 cannot be checked",)
    cur_app = _app_key(deployed.app_version)
    allowed: list[ChartVersion] = []
    skipped: list[Skipped] = []
    for entry in sorted(versions, key=lambda v: _key(v.version), reverse=True):
        key = _key(entry.version)
        if key[3] == 0 or not in_scope(current, entry.version, scope):
            continue  # pre-releases are never proposed; out-of-scope ones silently ignored
        app = _app_key(entry.app_version)
        if app is None or cur_app is None:
            skipped.append(
                Skipped(entry.version, "appVersion missing or not a version: R2 cannot be checked")
            )
        elif app[0] != cur_app[0]:
            skipped.append(
                Skipped(
                    entry.version,
                    f"appVersion {deployed.app_version} → {entry.app_version} changes the product "
                    "major: R2 requires the dedicated migration guide, not this flow",
                )
            )
        elif app < cur_app:
            skipped.append(
                Skipped(
                    entry.version,
                    f"appVersion {entry.app_version} is lower than the current "
                    f"{deployed.app_version} (F5: appVersion is not monotonic)",
                )
            )
        else:
            allowed.append(entry)
    return tuple(allowed), tuple(skipped), ()


# -- decisions ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Settled:
    target: ChartVersion | None
    existing: ProposalRecord | None
    close: tuple[Closing, ...]
    notes: tuple[str, ...]


def _settle(
    mine: Sequence[ProposalRecord],
    *,
    newest: ChartVersion | None,
    allowed: Mapping[str, ChartVersion],
    lowest: tuple[Any, ...] | None,
    whose: str,
    obsolete: Callable[[ProposalRecord, ChartVersion | None], Closing],
) -> _Settled:
    """One request's target and what becomes of its open records, per cluster or per wave.

    ``mine``: the request's records; ``newest``: the newest version allowed; ``allowed``: the
    allowed versions by their plain number; ``lowest``: the lowest current version of the
    clusters it would bump (a merged record above it was reverted); ``whose``: how the
    declined note names the request; ``obsolete``: the closing of an open record that is not
    the target."""
    open_records = sorted(
        (r for r in mine if r.state is ProposalState.OPEN), key=lambda r: _key(r.version)
    )
    blocked = {
        _norm(r.version): r
        for r in mine
        if r.state in (ProposalState.CLOSED, ProposalState.SUPERSEDED)
        or (r.state is ProposalState.MERGED and lowest is not None and _key(r.version) > lowest)
    }
    notes: list[str] = []
    target = newest
    if target is not None and _norm(target.version) in blocked:
        rec = blocked[_norm(target.version)]
        how = "merged and later reverted" if rec.state is ProposalState.MERGED else "closed"
        notes.append(f"{target.version}: {whose} #{rec.number} was {how}; it is not proposed again")
        target = None
    if target is None:
        # An open request still allowed is kept (e.g. the newest one was declined meanwhile).
        still = [r for r in open_records if _norm(r.version) in allowed]
        if still:
            target = allowed[_norm(still[-1].version)]
    existing = None
    closing: list[Closing] = []
    for rec in open_records:
        if target is not None and _norm(rec.version) == _norm(target.version):
            existing = rec
        else:
            closing.append(obsolete(rec, target))
    return _Settled(target, existing, tuple(closing), tuple(notes))


def _superseded(rec: ProposalRecord, target: ChartVersion) -> Closing:
    return Closing(rec, f"superseded by chart {target.version}", target.version)


def _not_allowed(rec: ProposalRecord) -> Closing:
    return Closing(rec, f"chart {rec.version} is no longer an allowed upgrade")


def decide_cluster(inp: ClusterInput, records: Sequence[ProposalRecord]) -> ProposalDecision:
    """The decision for one cluster, before the fleet-wide bound is applied."""
    if inp.problem:
        # No index: keep whatever is open, decide nothing new.
        return ProposalDecision(inp.cluster, None, notes=(inp.problem,))
    allowed, skipped, notes = candidates(inp.current_version, inp.scope, inp.versions)
    current = _key(inp.current_version)

    def obsolete(rec: ProposalRecord, target: ChartVersion | None) -> Closing:
        if _key(rec.version) <= current:
            return Closing(
                rec, f"cluster `{inp.cluster}` is already at chart {inp.current_version}"
            )
        if target is not None:
            return _superseded(rec, target)
        if inp.scope == "pinned":
            return Closing(rec, f"cluster `{inp.cluster}` is pinned")
        return _not_allowed(rec)

    settled = _settle(
        [r for r in records if r.cluster == inp.cluster],
        newest=allowed[0] if allowed else None,
        allowed={_norm(v.version): v for v in allowed},
        lowest=current,
        whose="its proposal",
        obsolete=obsolete,
    )
    return ProposalDecision(
        cluster=inp.cluster,
        target=settled.target,
        current=((inp.cluster, inp.current_version),) if settled.target else (),
        existing=settled.existing,
        close=settled.close,
        skipped=skipped,
        notes=(*notes, *settled.notes),
    )


def decide_wave(inp: WaveInput, records: Sequence[ProposalRecord]) -> ProposalDecision:
    """The decision for one wave, before the fleet-wide bound is applied."""
    notes: list[str] = []
    allowed_by: dict[str, list[str]] = {}  # version → members that may take it
    entries: dict[str, ChartVersion] = {}
    skipped: dict[str, Skipped] = {}
    for m in inp.members:
        if m.problem:
            notes.append(f"{m.cluster}: {m.problem}")
            continue
        allowed, skip, member_notes = candidates(m.current_version, m.scope, m.versions)
        notes += [f"{m.cluster}: {n}" for n in member_notes]
        for s in skip:
            skipped.setdefault(_norm(s.version), s)
        for v in allowed:
            allowed_by.setdefault(_norm(v.version), []).append(m.cluster)
            entries.setdefault(_norm(v.version), v)
    if inp.members and all(m.problem for m in inp.members):
        # No member's index: keep whatever is open, decide nothing new (as for a cluster).
        return ProposalDecision(cluster="", wave=inp.wave, target=None, notes=tuple(notes))
    lowest = min((_key(m.current_version) for m in inp.members), default=None)

    def obsolete(rec: ProposalRecord, target: ChartVersion | None) -> Closing:
        if target is not None:
            return _superseded(rec, target)
        if lowest is not None and _key(rec.version) <= lowest:
            return Closing(rec, f"every cluster of wave `{inp.wave}` is at or above it")
        return _not_allowed(rec)

    newest = sorted(entries, key=_key, reverse=True)
    settled = _settle(
        [r for r in records if r.wave == inp.wave],
        newest=entries[newest[0]] if newest else None,
        allowed=entries,
        lowest=lowest,
        whose=f"wave {inp.wave}'s request",
        obsolete=obsolete,
    )
    notes += settled.notes
    target = settled.target
    current: tuple[tuple[str, str], ...] = ()
    if target is not None:
        taking = set(allowed_by.get(_norm(target.version), ()))
        versions = {m.cluster: m.current_version for m in inp.members}
        current = tuple((c, versions[c]) for c in sorted(taking))
        for m in inp.members:
            if m.cluster in taking or m.problem:
                continue
            if _key(m.current_version) >= _key(target.version):
                notes.append(f"{m.cluster}: already at chart {m.current_version}, left out")
            else:
                notes.append(f"{m.cluster}: {target.version} is not an allowed upgrade, left out")
    return ProposalDecision(
        cluster="",
        wave=inp.wave,
        target=target,
        current=current,
        existing=settled.existing,
        close=settled.close,
        skipped=tuple(
            s
            for v, s in sorted(skipped.items())
            if target is None or _key(v) > _key(target.version)
        ),
        notes=tuple(notes),
    )


def _bounded(
    decisions: Sequence[ProposalDecision], open_count: int, max_open: int
) -> list[ProposalDecision]:
    """``decisions`` in order, the new requests past ``max_open`` held back (with a note).
    ``open_count``: the requests open before, less those no decision of these accounts for
    that are closed. A request replacing its own open one keeps its slot."""
    for d in decisions:
        open_count -= len(d.close) - (1 if d.replaces else 0)
    out: list[ProposalDecision] = []
    for d in decisions:
        if d.opens_new and not d.replaces:
            assert d.target is not None
            if open_count >= max_open:
                note = (
                    f"{d.target.version}: not proposed now, {open_count} proposal(s) open "
                    f"and maxOpen is {max_open}"
                )
                d = replace(d, target=None, current=(), notes=(*d.notes, note))
            else:
                open_count += 1
        out.append(d)
    return out


def _open(records: Sequence[ProposalRecord]) -> int:
    return sum(1 for r in records if r.state is ProposalState.OPEN)


def decide_fleet(
    inputs: Sequence[ClusterInput],
    records: Sequence[ProposalRecord],
    *,
    max_open: int,
    also_open: int = 0,
) -> tuple[ProposalDecision, ...]:
    """Decisions for every cluster (name order) with at most ``max_open`` open proposals.

    Open proposals of clusters no longer in the fleet are closed. A cluster replacing its own
    open proposal keeps its slot; a cluster with none opens one only while slots remain.
    ``also_open``: requests open besides ``records``' (the waves', ``decide_waves``).
    """
    names = {i.cluster for i in inputs}
    decisions = [decide_cluster(i, records) for i in sorted(inputs, key=lambda i: i.cluster)]
    gone = sorted(r for r in records if r.state is ProposalState.OPEN and r.cluster not in names)
    out = _bounded(decisions, also_open + _open(records) - len(gone), max_open)
    for rec in gone:
        out.append(
            ProposalDecision(
                rec.cluster,
                None,
                close=(Closing(rec, f"cluster `{rec.cluster}` is no longer in the fleet"),),
            )
        )
    return tuple(out)


def decide_waves(
    inputs: Sequence[WaveInput],
    records: Sequence[ProposalRecord],
    *,
    max_open: int,
) -> tuple[ProposalDecision, ...]:
    """Decisions for every wave (in the order given), bounded by ``max_open`` over every open
    request of ``records`` (per cluster ones too). Open wave requests of a wave that takes no
    cluster any more (or of any wave when ``inputs`` is empty: ``groupBy: cluster``) are
    closed; so are open per-cluster requests of the clusters the waves take."""
    names = {i.wave for i in inputs}
    taken = {m.cluster for i in inputs for m in i.members}
    decisions = [decide_wave(i, records) for i in inputs]
    retired = tuple(
        Closing(r, f"cluster `{r.cluster}` is now proposed with its wave (proposals.groupBy)")
        for r in sorted(records)
        if r.state is ProposalState.OPEN and not r.wave and r.cluster in taken
    )
    gone = tuple(
        Closing(r, f"wave `{r.wave}` has no proposal here any more (waves or groupBy changed)")
        for r in sorted(records)
        if r.state is ProposalState.OPEN and r.wave and r.wave not in names
    )
    out = _bounded(decisions, _open(records) - len(retired) - len(gone), max_open)
    if retired or gone:
        out.append(ProposalDecision(cluster="", target=None, close=(*retired, *gone)))
    return tuple(out)


def wave_inputs(fleet: Fleet, inputs: Sequence[ClusterInput]) -> tuple[WaveInput, ...]:
    """The waves (in ``waves:`` order) that take clusters, with their members' inputs."""
    by_name = {i.cluster: i for i in inputs}
    return tuple(
        WaveInput(group.wave.name, tuple(by_name[c] for c in group.clusters))
        for group in promotion.fleet_by_wave(fleet.settings.waves, fleet.clusters.values())
        if group.wave is not None and group.clusters
    )


def decide(
    inputs: Sequence[ClusterInput],
    records: Sequence[ProposalRecord],
    *,
    max_open: int,
    waves: Sequence[WaveInput] = (),
) -> tuple[tuple[ProposalDecision, ...], tuple[ProposalDecision, ...]]:
    """The pass's decisions: ``(per cluster, per wave)``. With ``waves`` (``proposals.groupBy:
    wave``: ``wave_inputs``) their clusters are proposed per wave and served first; the other
    clusters get the rest of ``max_open``. Without, every cluster is proposed on its own (and
    any open wave request is closed)."""
    by_wave = decide_waves(waves, records, max_open=max_open)
    taken = {m.cluster for w in waves for m in w.members}
    by_cluster = decide_fleet(
        [i for i in inputs if i.cluster not in taken],
        [r for r in records if not r.wave and r.cluster not in taken],
        max_open=max_open,
        also_open=sum(1 for d in by_wave if d.target is not None),
    )
    return by_cluster, by_wave


# -- the ledger ---------------------------------------------------------------------------


def parse_ledger(text: str | None, *, source: str = LEDGER_FILE) -> tuple[ProposalRecord, ...]:
    """Records from the ledger file's text (None or empty: no records)."""
    if not text or not text.strip():
        return ()
    try:
        doc = json.loads(text)
        raw = doc["proposals"]
        return tuple(
            sorted(
                ProposalRecord(
                    cluster=str(r["cluster"]),
                    version=str(r["version"]),
                    number=int(r["number"]),
                    state=ProposalState(r["state"]),
                    head=str(r.get("head", "")),
                    wave=str(r.get("wave", "")),
                )
                for r in raw
            )
        )
    except (ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"{source}: not a proposals ledger: {exc}") from None


def render_ledger(records: Sequence[ProposalRecord]) -> str:
    """The ledger file's text: stable (sorted, indented) so an unchanged ledger is not
    committed again."""
    doc = {
        "version": LEDGER_VERSION,
        "proposals": [
            {
                "cluster": r.cluster,
                "version": r.version,
                "number": r.number,
                "state": r.state.value,
                "head": r.head,
                **({"wave": r.wave} if r.wave else {}),  # older ledgers read the same
            }
            for r in sorted(records)
        ],
    }
    return json.dumps(doc, indent=2, sort_keys=True) + "\n"


def upsert_record(
    records: Sequence[ProposalRecord], record: ProposalRecord
) -> tuple[ProposalRecord, ...]:
    """``records`` with ``record`` replacing the one for the same cluster (or wave) and
    version."""
    key = (record.cluster, record.wave, _norm(record.version))
    kept = [r for r in records if (r.cluster, r.wave, _norm(r.version)) != key]
    return tuple(sorted((*kept, record)))
