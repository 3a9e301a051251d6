"""Promotion through waves (issue 14): may this change be applied to this cluster yet?

``gitopsbot.yaml`` orders the fleet into waves (``core.fleet.model.Wave``). A chart version reaches
a cluster of a wave only after every cluster of **every earlier wave** runs that version,
verified, for at least its own wave's soak time, with no halt or rollback since. Every
earlier wave, not only the one just before: the one before implies the rest only while no
cluster joins an older wave later, and a new cluster in the first wave that never ran the
version must hold the others back too.

Decided here, on plain values (``judge`` answers, ``fleet_by_wave`` orders ``status``):

- Membership: a cluster belongs to the **first** wave whose selector matches it (like a
  firewall's rules, so a last wave ``names: ["*"]`` takes the rest); a cluster no wave
  matches is *unwaved* and is not held by waves. A wave that matches no cluster is skipped.
- The first wave (and every cluster of the same wave as each other) is never held.
- A **downgrade** (an older chart version) and a **revert** (a change undoing an earlier
  one: ``git revert`` or the bot's rollback) are never held: going back is how a bad version
  is left, and holding it would keep the fleet on the version that failed.
- A **values-only** change is held only where the target's wave says ``gateValues: true``;
  then the earlier waves must run the same chart version with no operation in flight and
  their latest operation verified at least a soak ago (values differ per cluster, so "the
  same change" cannot be compared; settled earlier waves are what can be checked).
- ``failedVersions`` deny a chart change to that version in the wave named and every later
  one (the wave named too: its other clusters are where the failure would repeat first);
  without a wave, on every cluster, unwaved ones included (a person said the version is
  bad). A downgrade or revert to a failed version is still allowed (see above).

The evidence per cluster comes from the state branch's journals (``ClusterEvidence``); this
module never reads it, nor the clock: ``now`` is an argument.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from fnmatch import fnmatchcase

from gitopsbot.core.charts.chart import semver_key
from gitopsbot.core.fleet.model import ClusterSpec, FailedVersion, Wave, WaveSelector


class ChangeKind(StrEnum):
    CHART = "chart"  # release.yaml's chart.version changes (values may change with it)
    VALUES = "values"  # the chart version stays; values.yaml (or another file) changes


@dataclass(frozen=True, slots=True)
class ClusterEvidence:
    """What the state branch says about one cluster, as the gate needs it.

    A later adapter fills it from ``clusters/<name>/journal.yaml`` and ``history/``: an
    operation's chart version is ``chart.version`` of release.yaml at its ``desired_sha``
    (a rollback's is its target's, the version it returned to); "verified" is its
    ``verify`` step SUCCEEDED, at that step's ``finished_at``; a halt is a phase HALTED, a
    FAILED operation, or a ROLLBACK operation (or ``remediation: rollback:``), at the time
    it was recorded.
    """

    cluster: str
    # The version the cluster runs: that of its latest operation that changed the release.
    # "": the bot never applied one here.
    chart_version: str = ""
    # Since when the cluster runs chart_version, verified, with no halt or rollback: the
    # first successful verification at this version after the latest trouble. The soak of
    # a chart version counts from here.
    verified_at: datetime | None = None
    # When the cluster's latest operation (of any kind) was verified: a values change's
    # soak counts from here. None: same as verified_at.
    last_verified_at: datetime | None = None
    # An operation queued or running, or a watched-branch commit for it not taken in yet.
    in_flight: bool = False
    # The latest halt, failure or rollback: what it was ("halted", "rolled back"), when,
    # and the chart version it concerned (the one being applied or rolled back from).
    trouble: str = ""
    trouble_at: datetime | None = None
    trouble_version: str = ""
    op_id: str = ""  # the operation the record comes from, for messages


@dataclass(frozen=True, slots=True)
class WaveHold:
    """Why one earlier wave still holds the target back."""

    wave: str
    missing: tuple[str, ...] = ()  # not on the version, not verified, or a change in flight
    troubled: tuple[str, ...] = ()  # a halt or rollback since
    soaking: tuple[str, ...] = ()  # verified, soak not over
    soak_ends_at: datetime | None = None  # the last soak end among ``soaking``
    details: tuple[str, ...] = ()  # one phrase per cluster, in cluster order


@dataclass(frozen=True, slots=True)
class PromotionDecision:
    cluster: str
    wave: str  # "" for an unwaved cluster
    allowed: bool
    message: str  # one line, fit for a policy verdict
    holds: tuple[WaveHold, ...] = ()
    failed: FailedVersion | None = None  # the mark that denies it

    @property
    def soak_ends_at(self) -> datetime | None:
        """When the last running soak ends (other holds may still remain then)."""
        ends = [h.soak_ends_at for h in self.holds if h.soak_ends_at is not None]
        return max(ends) if ends else None

    @property
    def missing(self) -> tuple[str, ...]:
        return tuple(c for h in self.holds for c in h.missing)

    @property
    def troubled(self) -> tuple[str, ...]:
        return tuple(c for h in self.holds for c in h.troubled)


@dataclass(frozen=True, slots=True)
class WaveMembers:
    """One line of ``status`` by wave: a wave (None: the unwaved clusters) and its clusters."""

    wave: Wave | None
    clusters: tuple[str, ...]


def selects(selector: WaveSelector, cluster: ClusterSpec) -> bool:
    """Every criterion given must match: the environment, one of the name globs, and every
    label (key and value)."""
    if selector.environment is not None and cluster.environment != selector.environment:
        return False
    if selector.names and not any(fnmatchcase(cluster.name, p) for p in selector.names):
        return False
    return all(cluster.labels.get(k) == v for k, v in selector.labels.items())


def wave_of(waves: Iterable[Wave], cluster: ClusterSpec) -> Wave | None:
    """The first wave that selects the cluster; None: unwaved."""
    return next((w for w in waves if selects(w.clusters, cluster)), None)


def fleet_by_wave(
    waves: tuple[Wave, ...], clusters: Iterable[ClusterSpec]
) -> tuple[WaveMembers, ...]:
    """Every wave in order with its clusters (by name; empty waves kept, so ``status`` can
    say a wave selects nothing), then the unwaved clusters when there are any."""
    members: dict[str, list[str]] = {w.name: [] for w in waves}
    unwaved: list[str] = []
    for cluster in clusters:
        wave = wave_of(waves, cluster)
        (members[wave.name] if wave else unwaved).append(cluster.name)
    out = [WaveMembers(w, tuple(sorted(members[w.name]))) for w in waves]
    if unwaved:
        out.append(WaveMembers(None, tuple(sorted(unwaved))))
    return tuple(out)


def judge(
    *,
    waves: tuple[Wave, ...],
    clusters: Iterable[ClusterSpec],
    evidence: Mapping[str, ClusterEvidence],
    target: str,
    version: str,
    change: ChangeKind,
    failed_versions: tuple[FailedVersion, ...],
    now: datetime,
    revert: bool = False,
    deployed: str = "",
) -> PromotionDecision:
    """May ``target`` get ``version`` (for a values-only change: the version it runs) now?

    ``clusters`` is the whole fleet, ``target`` one of them; ``evidence`` holds what is
    known per cluster (a cluster without an entry has never been applied by the bot).
    ``deployed``: the chart version Helm reports on the target, when the caller read it;
    else the evidence's version tells whether the change is a downgrade."""
    fleet = {c.name: c for c in clusters}
    spec = fleet[target]
    wave = wave_of(waves, spec)
    wave_name = wave.name if wave else ""

    def decide(
        allowed: bool,
        message: str,
        holds: tuple[WaveHold, ...] = (),
        failed: FailedVersion | None = None,
    ) -> PromotionDecision:
        return PromotionDecision(target, wave_name, allowed, message, holds, failed)

    if revert:
        return decide(True, "a revert is never held by waves")
    running = deployed or (evidence[target].chart_version if target in evidence else "")
    if change is ChangeKind.CHART and _older(version, running):
        return decide(True, f"a downgrade ({running} → {version}) is never held by waves")
    index = waves.index(wave) if wave else -1
    if change is ChangeKind.CHART:
        for mark in failed_versions:
            if mark.version != version:
                continue
            if not mark.wave or (wave and index >= _index(waves, mark.wave)):
                return decide(False, _failed_message(version, mark), failed=mark)
    if wave is None:
        return decide(True, "not in any wave: not held by waves")
    if change is ChangeKind.VALUES and not wave.gate_values:
        return decide(True, f"wave {wave.name} holds only chart versions (gateValues: false)")
    members = fleet_by_wave(waves, fleet.values())[:index]  # the earlier waves
    holds = tuple(
        hold
        for m in members
        if m.wave is not None
        and (hold := _hold(m.wave, m.clusters, evidence, version, change, now)) is not None
    )
    if not holds:
        if not any(m.clusters for m in members):
            return decide(True, f"wave {wave.name} is the first wave with clusters: not held")
        what = "runs" if change is ChangeKind.CHART else "settled on"
        return decide(
            True, f"wave {wave.name}: every cluster of earlier waves {what} {version}, soaked"
        )
    parts = [f"wave {h.wave}: {'; '.join(h.details)}" for h in holds]
    return decide(False, f"wave {wave.name} waits for " + "; and for ".join(parts), holds=holds)


def _hold(
    wave: Wave,
    clusters: tuple[str, ...],
    evidence: Mapping[str, ClusterEvidence],
    version: str,
    change: ChangeKind,
    now: datetime,
) -> WaveHold | None:
    missing: list[str] = []
    troubled: list[str] = []
    soaking: list[str] = []
    ends: list[datetime] = []
    details: list[str] = []
    soak = timedelta(seconds=wave.soak_seconds)
    for name in clusters:
        e = evidence.get(name, ClusterEvidence(name))
        since = e.verified_at
        if change is ChangeKind.VALUES and e.last_verified_at is not None:
            since = e.last_verified_at
        if _troubled(e, version, since):
            troubled.append(name)
            details.append(f"{name} {e.trouble or 'halted'} at {clock_text(e.trouble_at, now)}")
        elif e.chart_version != version:
            missing.append(name)
            runs = f" (runs {e.chart_version})" if e.chart_version else ""
            details.append(f"{name} not on {version} yet{runs}")
        elif change is ChangeKind.VALUES and e.in_flight:
            missing.append(name)
            details.append(f"{name} has a change in flight")
        elif since is None:
            missing.append(name)
            details.append(f"{name} on {version}, not verified yet")
        elif now < since + soak:
            soaking.append(name)
            ends.append(since + soak)
            details.append(
                f"{name} verified {version} at {clock_text(since, now)}, "
                f"soak ends {clock_text(since + soak, now)}"
            )
    if not details:
        return None
    return WaveHold(
        wave=wave.name,
        missing=tuple(missing),
        troubled=tuple(troubled),
        soaking=tuple(soaking),
        soak_ends_at=max(ends) if ends else None,
        details=tuple(details),
    )


def _troubled(e: ClusterEvidence, version: str, since: datetime | None) -> bool:
    """A halt or rollback not followed by a clean verification: the latest trouble came
    after the verification the soak counts from, or it concerned this version and the
    cluster is not back on it."""
    if e.trouble_at is None:
        return False
    if since is None or e.trouble_at > since:
        return True
    return e.trouble_version == version and e.chart_version != version


def _older(version: str, running: str) -> bool:
    if not running:
        return False
    try:
        return semver_key(version) < semver_key(running)
    except ValueError:
        return False  # an unreadable record is not a reason to wave a change through


def _index(waves: tuple[Wave, ...], name: str) -> int:
    # The reader refuses a mark naming no wave; should one slip through, it denies everywhere.
    return next((i for i, w in enumerate(waves) if w.name == name), 0)


def _failed_message(version: str, mark: FailedVersion) -> str:
    if not mark.line:
        # A bot-recorded mark (core.canary_marks): its reason says where it is and how to
        # clear it; it is not a line of gitopsbot.yaml.
        return f"{version} is marked failed for every cluster: {mark.reason}"
    where = f"from wave {mark.wave} on" if mark.wave else "for every cluster"
    reason = f": {mark.reason}" if mark.reason else ""
    return (
        f"{version} is marked failed {where} (gitopsbot.yaml:{mark.line} failedVersions"
        f"{reason}); remove the mark in Git to promote it again"
    )


def clock_text(at: datetime | None, now: datetime) -> str:
    """``12:02 UTC`` on now's day, else with the date (for messages and ``status``)."""
    if at is None:
        return "an unknown time"
    at, now = _utc(at), _utc(now)
    return at.strftime("%H:%M UTC" if at.date() == now.date() else "%Y-%m-%d %H:%M UTC")


def _utc(t: datetime) -> datetime:
    return t.astimezone(UTC) if t.tzinfo else t.replace(tzinfo=UTC)
