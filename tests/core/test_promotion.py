"""Promotion through waves (core.promotion): who is held, by whom, until when.

The fleet: wave ``staging`` (one staging cluster, soak 2h), wave ``canary`` (two production
clusters labelled ``tier: canary``, soak 1h), wave ``production`` (three production clusters
by the name pattern ``prod-*``, no soak); and a development cluster no wave selects.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from gitopsbot.core.fleet.model import (
    ClusterSpec,
    Environment,
    FailedVersion,
    ReleaseSpec,
    RolloutPolicy,
    Wave,
    WaveSelector,
)
from gitopsbot.core.waves.promotion import (
    ChangeKind,
    ClusterEvidence,
    PromotionDecision,
    WaveMembers,
    fleet_by_wave,
    judge,
    selects,
    wave_of,
)

NEW, OLD = "1.8.7", "1.8.6"
T0 = datetime(2026, 12, 4, 10, 2, tzinfo=UTC)  # staging verified NEW


def cluster(name: str, env: Environment, **labels: str) -> ClusterSpec:
    release = ReleaseSpec("https://charts.example", "tensor-fusion", NEW, "tf", "tf")
    return ClusterSpec(name, env, release, {}, RolloutPolicy(), labels=labels)


STAGING = Wave("staging", WaveSelector(environment=Environment.STAGING), soak_seconds=7200)
CANARY = Wave("canary", WaveSelector(labels={"tier": "canary"}), soak_seconds=3600)
PRODUCTION = Wave("production", WaveSelector(names=("prod-*",)))
WAVES = (STAGING, CANARY, PRODUCTION)
P, D = Environment.PRODUCTION, Environment.DEVELOPMENT
FLEET = (
    cluster("staging-eu1", Environment.STAGING),
    # Matched by canary's label and by production's prod-*: the first wave wins.
    cluster("prod-canary-a", P, tier="canary"),
    cluster("prod-canary-b", P, tier="canary"),
    cluster("prod-eu1", P),
    cluster("prod-us1", P),
    cluster("prod-ap1", P, tier="main"),
    cluster("dev-1", D),
)
CANARIES = ("prod-canary-a", "prod-canary-b")


def on(name: str, version: str, at: datetime, **rest: Any) -> ClusterEvidence:
    return ClusterEvidence(name, version, verified_at=at, **rest)


def settled(now: datetime) -> dict[str, ClusterEvidence]:
    """Staging and both canaries verified on NEW long before ``now``; production on OLD."""
    long_ago = now - timedelta(days=2)
    ev = {n: on(n, NEW, long_ago) for n in ("staging-eu1", *CANARIES)}
    ev |= {n: on(n, OLD, long_ago) for n in ("prod-eu1", "prod-us1", "prod-ap1")}
    return ev


def ask(
    target: str,
    evidence: dict[str, ClusterEvidence],
    now: datetime,
    *,
    version: str = NEW,
    change: ChangeKind = ChangeKind.CHART,
    failed: tuple[FailedVersion, ...] = (),
    waves: tuple[Wave, ...] = WAVES,
    revert: bool = False,
    deployed: str = "",
) -> PromotionDecision:
    return judge(
        waves=waves,
        clusters=FLEET,
        evidence=evidence,
        target=target,
        version=version,
        change=change,
        failed_versions=failed,
        now=now,
        revert=revert,
        deployed=deployed,
    )


# -- membership ------------------------------------------------------------------------------


def test_fleet_by_wave_orders_clusters_first_wave_wins_unwaved_last() -> None:
    assert fleet_by_wave(WAVES, FLEET) == (
        WaveMembers(STAGING, ("staging-eu1",)),
        WaveMembers(CANARY, CANARIES),
        WaveMembers(PRODUCTION, ("prod-ap1", "prod-eu1", "prod-us1")),
        WaveMembers(None, ("dev-1",)),
    )


def test_empty_wave_is_listed_and_no_unwaved_line_when_all_are_waved() -> None:
    empty = Wave("nobody", WaveSelector(names=("gpu-*",)))
    staged = fleet_by_wave((empty, STAGING), [FLEET[0]])
    assert staged == (WaveMembers(empty, ()), WaveMembers(STAGING, ("staging-eu1",)))


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        (
            WaveSelector(environment=P),
            {"prod-canary-a", "prod-canary-b", "prod-eu1", "prod-us1", "prod-ap1"},
        ),
        (WaveSelector(names=("prod-??1", "dev-*")), {"prod-eu1", "prod-us1", "prod-ap1", "dev-1"}),
        (WaveSelector(labels={"tier": "main"}), {"prod-ap1"}),
        # Every criterion given must match.
        (WaveSelector(environment=P, names=("*-eu1",)), {"prod-eu1"}),
        (WaveSelector(environment=Environment.STAGING, labels={"tier": "canary"}), set()),
        (WaveSelector(labels={"tier": "canary", "zone": "a"}), set()),
        # Globs are case-sensitive, as cluster names are lowercase DNS labels.
        (WaveSelector(names=("PROD-*",)), set()),
    ],
    ids=["environment", "names", "labels", "env-and-names", "env-and-labels", "all-labels", "case"],
)
def test_selector_matches(selector: WaveSelector, expected: set[str]) -> None:
    assert {c.name for c in FLEET if selects(selector, c)} == expected


def test_wave_of_unwaved_is_none() -> None:
    assert wave_of(WAVES, FLEET[-1]) is None
    assert wave_of(WAVES, FLEET[1]) == CANARY


# -- chart version promotion -----------------------------------------------------------------


def test_first_wave_and_unwaved_clusters_are_not_held() -> None:
    for target in ("staging-eu1", "dev-1"):
        d = ask(target, {}, T0)
        assert d.allowed, d.message
    assert ask("staging-eu1", {}, T0).message == (
        "wave staging is the first wave with clusters: not held"
    )
    assert ask("dev-1", {}, T0).message == "not in any wave: not held by waves"


def test_canary_blocked_while_staging_not_on_the_version() -> None:
    ev = {"staging-eu1": on("staging-eu1", OLD, T0)}
    d = ask("prod-canary-a", ev, T0)
    assert not d.allowed
    assert d.wave == "canary"
    assert d.missing == ("staging-eu1",)
    assert d.troubled == ()
    assert d.soak_ends_at is None
    assert (
        d.message == "wave canary waits for wave staging: staging-eu1 not on 1.8.7 yet (runs 1.8.6)"
    )


def test_no_record_and_not_verified_are_missing() -> None:
    assert ask("prod-canary-a", {}, T0).message.endswith("staging-eu1 not on 1.8.7 yet")
    ev = {"staging-eu1": ClusterEvidence("staging-eu1", NEW)}
    d = ask("prod-canary-a", ev, T0)
    assert d.missing == ("staging-eu1",)
    assert d.message.endswith("staging-eu1 on 1.8.7, not verified yet")


def test_canary_blocked_during_staging_soak_then_allowed() -> None:
    ev = {"staging-eu1": on("staging-eu1", NEW, T0)}
    during = ask("prod-canary-a", ev, T0 + timedelta(minutes=59))
    assert not during.allowed
    assert during.soak_ends_at == T0 + timedelta(hours=2)
    assert during.holds[0].soaking == ("staging-eu1",)
    assert during.missing == ()
    assert during.message == (
        "wave canary waits for wave staging: "
        "staging-eu1 verified 1.8.7 at 10:02 UTC, soak ends 12:02 UTC"
    )
    a_second_early = ask("prod-canary-a", ev, T0 + timedelta(hours=2) - timedelta(seconds=1))
    assert not a_second_early.allowed
    after = ask("prod-canary-a", ev, T0 + timedelta(hours=2))
    assert after.allowed, after.message
    assert after.holds == ()


def test_soak_ending_another_day_shows_the_date() -> None:
    late = datetime(2026, 12, 4, 23, 30, tzinfo=UTC)
    d = ask("prod-canary-a", {"staging-eu1": on("staging-eu1", NEW, late)}, late)
    assert "verified 1.8.7 at 23:30 UTC, soak ends 2026-12-05 01:30 UTC" in d.message


def test_production_needs_every_earlier_wave() -> None:
    now = T0 + timedelta(days=3)
    ev = settled(now)
    assert ask("prod-eu1", ev, now).allowed
    # One canary still soaking, and staging (two waves back) lost the version.
    ev["prod-canary-b"] = on("prod-canary-b", NEW, now - timedelta(minutes=20))
    ev["staging-eu1"] = on("staging-eu1", OLD, now - timedelta(hours=5))
    d = ask("prod-eu1", ev, now)
    assert not d.allowed
    assert [h.wave for h in d.holds] == ["staging", "canary"]
    assert d.missing == ("staging-eu1",)
    assert d.holds[1].soaking == ("prod-canary-b",)
    assert d.soak_ends_at == now + timedelta(minutes=40)
    assert d.message.startswith(
        "wave production waits for wave staging: staging-eu1 not on 1.8.7 yet (runs 1.8.6); "
        "and for wave canary: prod-canary-b verified 1.8.7 at "
    )


def test_halt_in_canary_blocks_production() -> None:
    now = T0 + timedelta(days=3)
    ev = settled(now)
    # Verified two days ago, then a later operation halted (not verified since).
    ev["prod-canary-b"] = on(
        "prod-canary-b",
        NEW,
        now - timedelta(days=2),
        trouble="halted",
        trouble_at=now - timedelta(hours=1),
        trouble_version=NEW,
    )
    d = ask("prod-us1", ev, now)
    assert not d.allowed
    assert d.troubled == ("prod-canary-b",)
    assert d.missing == ()
    assert d.message == (
        f"wave production waits for wave canary: prod-canary-b halted at "
        f"{(now - timedelta(hours=1)):%H:%M} UTC"
    )


def test_rollback_in_canary_blocks_production_even_once_verified_back() -> None:
    now = T0 + timedelta(days=3)
    ev = settled(now)
    # Rolled back from NEW to OLD; the rollback itself was verified afterwards.
    ev["prod-canary-a"] = on(
        "prod-canary-a",
        OLD,
        now - timedelta(minutes=30),
        trouble="rolled back from 1.8.7",
        trouble_at=now - timedelta(minutes=40),
        trouble_version=NEW,
    )
    d = ask("prod-ap1", ev, now)
    assert not d.allowed
    assert d.troubled == ("prod-canary-a",)
    assert "prod-canary-a rolled back from 1.8.7 at" in d.message


def test_trouble_followed_by_a_clean_verification_does_not_hold() -> None:
    now = T0 + timedelta(days=3)
    ev = settled(now)
    # A halt on another version, then back on NEW and verified (soak counted from there).
    ev["prod-canary-a"] = on(
        "prod-canary-a",
        NEW,
        now - timedelta(hours=2),
        trouble="halted",
        trouble_at=now - timedelta(hours=3),
        trouble_version="1.9.0",
    )
    assert ask("prod-ap1", ev, now).allowed


def test_empty_earlier_wave_is_skipped() -> None:
    nobody = Wave("nobody", WaveSelector(names=("gpu-*",)), soak_seconds=86400)
    ev = {"staging-eu1": on("staging-eu1", NEW, T0)}
    d = ask("prod-canary-a", ev, T0 + timedelta(hours=2), waves=(nobody, STAGING, CANARY))
    assert d.allowed, d.message


# -- what is never held, and what is always denied -------------------------------------------


def test_downgrade_is_never_held() -> None:
    ev = {"prod-eu1": on("prod-eu1", NEW, T0)}  # staging and canaries: nothing known
    d = ask("prod-eu1", ev, T0, version=OLD)
    assert d.allowed
    assert d.message == "a downgrade (1.8.7 → 1.8.6) is never held by waves"
    # Moving forward from the same evidence is held.
    assert not ask("prod-eu1", ev, T0, version="1.8.8").allowed
    # What Helm reports wins over the state branch (a release the bot never applied).
    assert ask("prod-eu1", {}, T0, version=OLD, deployed=NEW).allowed
    assert not ask("prod-eu1", {}, T0, version=OLD).allowed


def test_revert_is_never_held() -> None:
    d = ask("prod-eu1", {}, T0, revert=True, change=ChangeKind.VALUES)
    assert d.allowed
    assert d.message == "a revert is never held by waves"


def test_failed_version_denied_from_its_wave_on() -> None:
    now = T0 + timedelta(days=3)
    ev = settled(now)
    mark = FailedVersion(NEW, wave="canary", reason="GPU memory leak", line=14)
    assert ask("staging-eu1", ev, now, failed=(mark,)).allowed
    assert ask("dev-1", ev, now, failed=(mark,)).allowed  # unwaved: outside promotion
    for target in ("prod-canary-b", "prod-eu1"):
        d = ask(target, ev, now, failed=(mark,))
        assert not d.allowed
        assert d.failed == mark
        assert d.message == (
            "1.8.7 is marked failed from wave canary on (gitopsbot.yaml:14 failedVersions: "
            "GPU memory leak); remove the mark in Git to promote it again"
        )
    # Another version is not affected.
    assert ask("prod-eu1", ev, now, version="1.8.8", failed=(mark,)).failed is None


def test_failed_version_without_wave_denied_everywhere_but_downgrade_allowed() -> None:
    mark = FailedVersion(NEW, line=3)
    for target in ("staging-eu1", "prod-eu1", "dev-1"):
        d = ask(target, {}, T0, failed=(mark,))
        assert not d.allowed
        assert "marked failed for every cluster" in d.message
    # Going back to a failed version is going back: allowed.
    ev = {"prod-eu1": on("prod-eu1", "1.9.0", T0)}
    assert ask("prod-eu1", ev, T0, failed=(mark,)).allowed
    # A values change on a cluster already running it is not a chart change: not denied.
    assert ask("dev-1", {}, T0, change=ChangeKind.VALUES, failed=(mark,)).allowed


# -- values-only changes ---------------------------------------------------------------------


def test_values_change_held_only_with_gate_values() -> None:
    ev = {"staging-eu1": on("staging-eu1", NEW, T0, in_flight=True)}
    d = ask("prod-canary-a", ev, T0 + timedelta(days=1), change=ChangeKind.VALUES)
    assert d.allowed
    assert d.message == "wave canary holds only chart versions (gateValues: false)"

    gated = (STAGING, Wave("canary", CANARY.clusters, soak_seconds=3600, gate_values=True))
    now = T0 + timedelta(days=1)
    held = ask("prod-canary-a", ev, now, change=ChangeKind.VALUES, waves=gated)
    assert not held.allowed
    assert held.message == "wave canary waits for wave staging: staging-eu1 has a change in flight"

    # The change landed in staging: the soak counts from its latest verification.
    landed = now - timedelta(minutes=30)
    ev = {"staging-eu1": on("staging-eu1", NEW, T0, last_verified_at=landed)}
    soaking = ask("prod-canary-a", ev, now, change=ChangeKind.VALUES, waves=gated)
    assert not soaking.allowed
    assert soaking.soak_ends_at == landed + timedelta(hours=2)
    done = ask(
        "prod-canary-a", ev, landed + timedelta(hours=2), change=ChangeKind.VALUES, waves=gated
    )
    assert done.allowed, done.message
    assert done.message == "wave canary: every cluster of earlier waves settled on 1.8.7, soaked"
