"""One proposal per wave (``proposals.groupBy: wave``), decided purely (issue 14).

A wave's request bumps ``chart.version`` in every cluster of the wave that is below the target
and may take it, on one branch (``gitopsbot/upgrade/<wave>/<version>``). The rules are those
of per-cluster proposals (``core.proposing.proposals``), applied to the wave as one:

* The target is the newest version some member may take (its scope, R2, F5:
  ``core.proposing.proposals.candidates``); the members bumped are those below it that may take it.
  A member already on it (or above) is left out, so is one whose scope or appVersion rules it
  out (a note says so).
* A declined wave request (closed by a person, or superseded by the bot), or one merged and
  later reverted while a member is below it again, is not proposed again for that wave, and
  nothing older in its place.
* A newer target supersedes the open request (closed with a comment naming the new one).
* ``max_open`` bounds every open request (per wave and per cluster); waves are served first,
  in wave order, then the unwaved clusters in name order.
* An open per-cluster request of a cluster a wave now takes is closed: the wave's request
  carries its upgrade.

Whether the earlier waves have soaked is the gate's (``bot.waves.for_proposal``), as for a
per-cluster proposal; membership is ``core.waves.promotion``'s.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from gitopsbot.core.charts.chart import ChartVersion, semver_key
from gitopsbot.core.fleet.commit_classes import ProposalId
from gitopsbot.core.proposing.proposals import (
    HYPERVISOR_IMAGE_PATH,
    RELEASE_VERSION_PATH,
    Closing,
    ClusterInput,
    ProposalRecord,
    ProposalState,
    Skipped,
    candidates,
    changes_section,
)


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


def _norm(version: str) -> str:
    return version.strip().removeprefix("v")


def _key(version: str) -> tuple[object, ...]:
    return semver_key(version)


def marker(wave: str, version: str) -> str:
    """The hidden marker of a wave request's body."""
    return f"proposal:wave/{wave}/{version}"


def title(wave: str, chart: str, version: str) -> str:
    return f"Upgrade wave {wave} to {chart} {version}"


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


def commit_message(
    wave: str,
    chart: str,
    version: str,
    current: Sequence[tuple[str, str]],
    images: Mapping[str, str],
) -> str:
    """The wave commit's message: one ``Gitopsbot-Proposal`` trailer per cluster, so a merge
    (squash too) is recognised per cluster as a proposal's."""
    lines = [title(wave, chart, version), ""]
    for cluster, was in current:
        image = images.get(cluster, "")
        pin = f"; hypervisor image set explicitly to {image} (R4)" if image else ""
        lines.append(f"{cluster}: chart {chart} {was} → {version}{pin}.")
    lines.append("")
    lines += [ProposalId(cluster, version).trailer for cluster, _ in current]
    return "\n".join(lines) + "\n"


def proposal_body(
    d: WaveDecision,
    *,
    chart: str,
    versions: Sequence[ChartVersion],
    images: Mapping[str, str],
    plans: Sequence[tuple[str, str]],
    evidence: str,
) -> str:
    """The wave request's body: the clusters it bumps (and what each edit is), the ones left
    out, the earlier waves' evidence, the chart's changes, then each cluster's plan."""
    assert d.target is not None
    target = d.target
    out = [
        f"gitopsbot proposes chart `{chart}` **{target.version}** (appVersion "
        f"{target.app_version}) for wave `{d.wave}`: {len(d.clusters)} cluster(s).",
        "",
        "| cluster | from | edits |",
        "|---|---|---|",
    ]
    for cluster, was in d.current:
        edits = f"`release.yaml`: `{RELEASE_VERSION_PATH}` → `{target.version}`"
        if images.get(cluster):
            edits += f"; `values.yaml`: `{HYPERVISOR_IMAGE_PATH}` → `{images[cluster]}` (R4)"
        out.append(f"| `{cluster}` | {was} | {edits} |")
    out.append("")
    if d.notes:
        out += ["Notes:", "", *[f"- {n}" for n in d.notes], ""]
    if d.skipped:
        out += ["Newer versions not proposed:", ""]
        out += [f"- {s.version}: {s.reason}" for s in d.skipped]
        out.append("")
    if evidence:
        out += [evidence.rstrip(), ""]
    lowest = min((was for _, was in d.current), key=_key, default=target.version)
    changes = changes_section(lowest, target.version, versions)
    if changes:
        out += ["### Chart changes", "", *changes]
    for cluster, plan in plans:
        out += [f"## `{cluster}`", "", plan.rstrip(), ""]
    return "\n".join(out)
