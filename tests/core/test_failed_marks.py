"""The failedVersions proposal after a rollback (core.failed_marks): which entries, and the
edit of gitopsbot.yaml, read back by the real settings reader."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from gitopsbot.core.fleet.model import (
    ClusterSpec,
    Environment,
    FailedVersion,
    ReleaseSpec,
    RolloutPolicy,
)
from gitopsbot.core.fleet.settings_file import parse_settings
from gitopsbot.core.waves.failed_marks import MarkProposal, RolledBack, add_entry, body, proposals

T0 = datetime(2026, 12, 4, 10, 0, tzinfo=UTC)
SETTINGS = """# the fleet
watchedBranch: main
waves:
  - name: staging
    clusters:
      environment: staging
  - name: canary
    clusters:
      names: ["canary-*"]
  - name: production
    clusters:
      environment: production
"""


def spec(name: str, env: Environment) -> ClusterSpec:
    release = ReleaseSpec("https://charts.example", "tensor-fusion", "1.8.7", "tf", "tf")
    return ClusterSpec(name, env, release, {}, RolloutPolicy())


FLEET = {
    c.name: c
    for c in (
        spec("stage", Environment.STAGING),
        spec("canary-a", Environment.PRODUCTION),
        spec("prod", Environment.PRODUCTION),
        spec("dev", Environment.DEVELOPMENT),
    )
}


def rb(cluster: str, version: str = "1.8.7", minutes: int = 0) -> RolledBack:
    return RolledBack(
        cluster, version, f"{cluster}-rb", f"{cluster}-up", T0 + timedelta(minutes=minutes)
    )


def test_one_entry_per_version_at_the_earliest_wave() -> None:
    settings = parse_settings(SETTINGS)
    (p,) = proposals(settings, FLEET, [rb("prod", minutes=5), rb("canary-a", minutes=9)])
    assert (p.version, p.wave) == ("1.8.7", "canary")
    assert [r.cluster for r in p.rollbacks] == ["prod", "canary-a"]  # earliest first
    assert p.reason == "rolled back on prod (prod-rb)"


def test_no_entry_when_covered_unwaved_or_unknown() -> None:
    settings = parse_settings(SETTINGS)
    assert proposals(settings, FLEET, [rb("dev"), rb("stage", version="")]) == ()
    marked = parse_settings(SETTINGS + "failedVersions:\n  - {version: 1.8.7, wave: canary}\n")
    assert proposals(marked, FLEET, [rb("prod")]) == ()
    # A mark from a later wave does not cover an earlier wave's rollback.
    (p,) = proposals(marked, FLEET, [rb("stage")])
    assert p.wave == "staging"


@pytest.mark.parametrize(
    "tail",
    [
        "",
        "failedVersions: []  # none yet\n",
        "failedVersions:\n  - 1.8.5\n\n# after\nforge:\n  kind: git-only\n",
        "failedVersions:\n- version: 1.8.5\n  reason: leak\n",
    ],
)
def test_the_edit_reads_back(tail: str) -> None:
    text = SETTINGS + tail
    p = MarkProposal("1.8.7", "canary", (rb("canary-a"),))
    edited = add_entry(text, p)
    settings = parse_settings(edited)
    assert settings.failed_versions[-1] == FailedVersion(
        "1.8.7",
        "canary",
        "rolled back on canary-a (canary-a-rb)",
        settings.failed_versions[-1].line,
    )
    assert edited.startswith("# the fleet\n")  # comments kept
    if "1.8.5" in tail:
        assert settings.failed_versions[0].version == "1.8.5"
    if "forge" in tail:
        assert settings.forge.kind == "git-only" and "# after\n" in edited


def test_a_flow_list_is_left_to_a_person() -> None:
    p = MarkProposal("1.8.7", "canary", (rb("canary-a"),))
    with pytest.raises(ValueError, match=r"gitopsbot.yaml:\d+: failedVersions"):
        add_entry(SETTINGS + "failedVersions: [1.8.5]\n", p)


def test_body_links_the_records() -> None:
    text = body(MarkProposal("1.8.7", "canary", (rb("canary-a"),)), "gitopsbot/state")
    assert "`clusters/canary-a/history/canary-a-rb.yaml`" in text
    assert "`clusters/canary-a/history/canary-a-up.yaml`" in text
