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
from collections.abc import Sequence
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any

from gitopsbot.core.charts.chart import ChartVersion, semver_key
from gitopsbot.core.fleet.commit_classes import ProposalId
from gitopsbot.core.fleet.model import UpgradeScope

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
class ClusterDecision:
    cluster: str
    current_version: str
    target: ChartVersion | None  # propose (open or refresh) this version
    existing: ProposalRecord | None = None  # the open proposal for ``target``, if any
    close: tuple[Closing, ...] = ()
    skipped: tuple[Skipped, ...] = ()
    notes: tuple[str, ...] = ()

    @property
    def opens_new(self) -> bool:
        return self.target is not None and self.existing is None


@dataclass(frozen=True, slots=True)
class WaveInput:
    """A wave (in the order of ``waves:``) and the clusters it takes."""

    wave: str
    members: tuple[ClusterInput, ...]


@dataclass(frozen=True, slots=True)
class WaveDecision:
    wave: str
    target: ChartVersion | None  # propose (open or refresh) this version
    clusters: tuple[str, ...] = ()  # the members the request bumps, by name
    current: tuple[tuple[str, str], ...] = ()  # (member, its chart version) of ``clusters``
    existing: ProposalRecord | None = None  # the open request for ``target``, if any
    close: tuple[Closing, ...] = ()
    skipped: tuple[Skipped, ...] = ()
    notes: tuple[str, ...] = ()

    @property
    def opens_new(self) -> bool:
        return self.target is not None and self.existing is None


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


def decide_cluster(inp: ClusterInput, records: Sequence[ProposalRecord]) -> ClusterDecision:
    """The decision for one cluster, before the fleet-wide bound is applied."""
    mine = [r for r in records if r.cluster == inp.cluster]
    open_records = sorted(
        (r for r in mine if r.state is ProposalState.OPEN), key=lambda r: _key(r.version)
    )
    if inp.problem:
        # No index: keep whatever is open, decide nothing new.
        return ClusterDecision(inp.cluster, inp.current_version, None, notes=(inp.problem,))
    allowed, skipped, notes_t = candidates(inp.current_version, inp.scope, inp.versions)
    notes = list(notes_t)
    blocked = {
        _norm(r.version): r
        for r in mine
        if r.state in (ProposalState.CLOSED, ProposalState.SUPERSEDED)
        or (r.state is ProposalState.MERGED and _key(r.version) > _key(inp.current_version))
    }
    allowed_names = {_norm(v.version): v for v in allowed}
    target: ChartVersion | None = allowed[0] if allowed else None
    if target is not None and _norm(target.version) in blocked:
        rec = blocked[_norm(target.version)]
        how = "merged and later reverted" if rec.state is ProposalState.MERGED else "closed"
        notes.append(
            f"{target.version}: its proposal #{rec.number} was {how}; it is not proposed again"
        )
        target = None
    if target is None:
        # An open proposal still allowed is kept (e.g. the newest one was declined meanwhile).
        still = [r for r in open_records if _norm(r.version) in allowed_names]
        if still:
            target = allowed_names[_norm(still[-1].version)]
    existing = None
    closing: list[Closing] = []
    for rec in open_records:
        if target is not None and _norm(rec.version) == _norm(target.version):
            existing = rec
            continue
        if _key(rec.version) <= _key(inp.current_version):
            closing.append(
                Closing(rec, f"cluster `{inp.cluster}` is already at chart {inp.current_version}")
            )
        elif target is not None:
            closing.append(Closing(rec, f"superseded by chart {target.version}", target.version))
        elif inp.scope == "pinned":
            closing.append(Closing(rec, f"cluster `{inp.cluster}` is pinned"))
        else:
            closing.append(Closing(rec, f"chart {rec.version} is no longer an allowed upgrade"))
    return ClusterDecision(
        cluster=inp.cluster,
        current_version=inp.current_version,
        target=target,
        existing=existing,
        close=tuple(closing),
        skipped=skipped,
        notes=tuple(notes),
    )


def decide_fleet(
    inputs: Sequence[ClusterInput],
    records: Sequence[ProposalRecord],
    *,
    max_open: int,
    also_open: int = 0,
) -> tuple[ClusterDecision, ...]:
    """Decisions for every cluster (name order) with at most ``max_open`` open proposals.

    Open proposals of clusters no longer in the fleet are closed. A cluster replacing its own
    open proposal keeps its slot; a cluster with none opens one only while slots remain.
    ``also_open``: requests open besides ``records``' (the waves', ``decide_waves``).
    """
    names = {i.cluster for i in inputs}
    decisions = [decide_cluster(i, records) for i in sorted(inputs, key=lambda i: i.cluster)]
    gone = sorted(r for r in records if r.state is ProposalState.OPEN and r.cluster not in names)
    open_count = also_open + sum(1 for r in records if r.state is ProposalState.OPEN)
    open_count -= len(gone)
    for d in decisions:
        replacing = d.opens_new and any(c.superseded_by for c in d.close)
        open_count -= len(d.close) - (1 if replacing else 0)
    out: list[ClusterDecision] = []
    for d in decisions:
        replacing = d.opens_new and any(c.superseded_by for c in d.close)
        if d.opens_new and not replacing:
            if open_count >= max_open:
                assert d.target is not None
                d = replace(
                    d,
                    target=None,
                    notes=(
                        *d.notes,
                        f"{d.target.version}: not proposed now, {open_count} proposal(s) open "
                        f"and maxOpen is {max_open}",
                    ),
                )
            else:
                open_count += 1
        out.append(d)
    for rec in gone:
        out.append(
            ClusterDecision(
                rec.cluster,
                "",
                None,
                close=(Closing(rec, f"cluster `{rec.cluster}` is no longer in the fleet"),),
            )
        )
    return tuple(out)


def decide_wave(inp: WaveInput, records: Sequence[ProposalRecord]) -> WaveDecision:
    """The decision for one wave, before the fleet-wide bound is applied."""
    mine = [r for r in records if r.wave == inp.wave]
    open_records = sorted(
        (r for r in mine if r.state is ProposalState.OPEN), key=lambda r: _key(r.version)
    )
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
    lowest = min((_key(m.current_version) for m in inp.members), default=None)
    blocked = {
        _norm(r.version): r
        for r in mine
        if r.state in (ProposalState.CLOSED, ProposalState.SUPERSEDED)
        or (r.state is ProposalState.MERGED and lowest is not None and _key(r.version) > lowest)
    }
    newest = sorted(entries, key=_key, reverse=True)
    target = entries[newest[0]] if newest else None
    if target is not None and _norm(target.version) in blocked:
        rec = blocked[_norm(target.version)]
        how = "merged and later reverted" if rec.state is ProposalState.MERGED else "closed"
        notes.append(
            f"{target.version}: wave {inp.wave}'s request #{rec.number} was {how}; "
            "it is not proposed again"
        )
        target = None
    if target is None:
        still = [r for r in open_records if _norm(r.version) in entries]
        if still:
            target = entries[_norm(still[-1].version)]
    members: tuple[str, ...] = ()
    current: tuple[tuple[str, str], ...] = ()
    if target is not None:
        taking = set(allowed_by.get(_norm(target.version), ()))
        members = tuple(sorted(taking))
        versions = {m.cluster: m.current_version for m in inp.members}
        current = tuple((c, versions[c]) for c in members)
        for m in inp.members:
            if m.cluster in taking or m.problem:
                continue
            if _key(m.current_version) >= _key(target.version):
                notes.append(f"{m.cluster}: already at chart {m.current_version}, left out")
            else:
                notes.append(f"{m.cluster}: {target.version} is not an allowed upgrade, left out")
    existing = None
    closing: list[Closing] = []
    for rec in open_records:
        if target is not None and _norm(rec.version) == _norm(target.version):
            existing = rec
        elif target is not None:
            closing.append(Closing(rec, f"superseded by chart {target.version}", target.version))
        elif lowest is not None and _key(rec.version) <= lowest:
            closing.append(Closing(rec, f"every cluster of wave `{inp.wave}` is at or above it"))
        else:
            closing.append(Closing(rec, f"chart {rec.version} is no longer an allowed upgrade"))
    return WaveDecision(
        wave=inp.wave,
        target=target,
        clusters=members,
        current=current,
        existing=existing,
        close=tuple(closing),
        skipped=tuple(
            s
            for v, s in sorted(skipped.items())
            if target is None or _key(v) > _key(target.version)
        ),
        notes=tuple(notes),
    )


def decide_waves(
    inputs: Sequence[WaveInput],
    records: Sequence[ProposalRecord],
    *,
    max_open: int,
) -> tuple[WaveDecision, ...]:
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
    open_count = sum(1 for r in records if r.state is ProposalState.OPEN)
    open_count -= len(retired) + len(gone)
    for d in decisions:
        replacing = d.opens_new and any(c.superseded_by for c in d.close)
        open_count -= len(d.close) - (1 if replacing else 0)
    out: list[WaveDecision] = []
    for d in decisions:
        replacing = d.opens_new and any(c.superseded_by for c in d.close)
        if d.opens_new and not replacing:
            assert d.target is not None
            if open_count >= max_open:
                note = (
                    f"{d.target.version}: not proposed now, {open_count} proposal(s) open "
                    f"and maxOpen is {max_open}"
                )
                d = replace(d, target=None, clusters=(), current=(), notes=(*d.notes, note))
            else:
                open_count += 1
        out.append(d)
    if retired or gone:
        out.append(WaveDecision(wave="", target=None, close=(*retired, *gone)))
    return tuple(out)


def open_after(decisions: Sequence[WaveDecision]) -> int:
    """Wave requests open once ``decisions`` are carried out (for the per-cluster bound)."""
    return sum(1 for d in decisions if d.target is not None)


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
