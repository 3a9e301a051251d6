"""``waves:`` and ``failedVersions:`` in gitopsbot.yaml, ``labels:`` in release.yaml: read into
the model, and every bad input refused with file, line, column and field."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest

from gitopsbot.core.fleet.model import Environment, FailedVersion, Wave, WaveSelector
from gitopsbot.core.fleet.settings_file import parse_settings
from gitopsbot.core.waves.promotion import fleet_by_wave
from gitopsbot.errors import FleetError
from gitopsbot.fleetrepo import load_fleet
from tests.fleet.fleet_testing import MemoryTree

Tree = Callable[..., MemoryTree]

GOOD = """\
waves:
  - name: staging
    clusters:
      environment: staging
    soak: 2h
  - name: canary
    clusters:
      labels: {tier: canary}
    soak: 30m
    gateValues: true
  - name: production
    clusters:
      environment: production
      names: ["prod-*", "gpu-prod-*"]
failedVersions:
  - 1.8.5
  - version: 1.8.6
    wave: canary
    reason: GPU memory leak on the canaries
"""


def test_waves_and_failed_versions_are_read() -> None:
    s = parse_settings(GOOD)
    assert s.waves == (
        Wave("staging", WaveSelector(environment=Environment.STAGING), 7200, False, line=2),
        Wave("canary", WaveSelector(labels={"tier": "canary"}), 1800, True, line=6),
        Wave(
            "production",
            WaveSelector(environment=Environment.PRODUCTION, names=("prod-*", "gpu-prod-*")),
            0,
            False,
            line=11,
        ),
    )
    assert s.failed_versions == (
        FailedVersion("1.8.5", line=16),
        FailedVersion("1.8.6", "canary", "GPU memory leak on the canaries", line=17),
    )


def test_no_waves_by_default() -> None:
    s = parse_settings("")
    assert (s.waves, s.failed_versions) == ((), ())


def _problems(text: str) -> list[str]:
    with pytest.raises(FleetError) as info:
        parse_settings(text)
    return str(info.value).splitlines()


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "waves:\n  - name: a\n    clusters: {environment: staging}\n    soek: 1h\n",
            "gitopsbot.yaml:4:5: waves[0].soek: unknown key (did you mean 'soak'?)",
        ),
        (
            "waves:\n  - name: a\n    clusters: {enviroment: staging}\n",
            "gitopsbot.yaml:3:16: waves[0].clusters.enviroment: unknown key "
            "(did you mean 'environment'?)",
        ),
        (
            "waves:\n  - name: a\n    clusters: {environment: staging}\n"
            "  - name: a\n    clusters: {environment: production}\n",
            "gitopsbot.yaml:4:11: waves[1].name: duplicate wave name 'a' (first defined at line 2)",
        ),
        (
            "waves:\n  - name: a\n    clusters: {environment: staging}\n    soak: 2 hours\n",
            "gitopsbot.yaml:4:11: waves[0].soak: not a duration "
            "(use whole h/m/s units: 30s, 10m, 2h, 1h30m)",
        ),
        (
            "waves:\n  - name: a\n    clusters: {environment: staging}\n    soak: 1d\n",
            "gitopsbot.yaml:4:11: waves[0].soak: days are not a duration unit (write 24h)",
        ),
        (
            "waves:\n  - name: a\n    clusters: {environment: staging}\n    soak: 3600\n",
            "gitopsbot.yaml:4:11: waves[0].soak: expected a duration such as 30s, 10m, 2h or "
            "1h30m, got integer (write '3600s' for seconds)",
        ),
        (
            "waves:\n  - name: a\n    clusters: {environment: prod}\n",
            "gitopsbot.yaml:3:29: waves[0].clusters.environment: 'prod' is not one of "
            "production, staging, development",
        ),
        (
            "waves:\n  - name: a\n    clusters:\n      labels: {tier: 1}\n",
            "gitopsbot.yaml:4:22: waves[0].clusters.labels.tier: a label value must be a "
            "string, got integer (quote it)",
        ),
        (
            "waves:\n  - name: a\n    clusters:\n      labels: {canary: true}\n",
            "gitopsbot.yaml:4:24: waves[0].clusters.labels.canary: a label value must be a "
            "string, got boolean (quote it)",
        ),
        (
            "waves:\n  - name: a\n    clusters: {}\n",
            "gitopsbot.yaml:3:15: waves[0].clusters: selects nothing: give environment, "
            'names or labels (for every remaining cluster write names: ["*"])',
        ),
        (
            "waves:\n  - name: a\n",
            "gitopsbot.yaml:2:5: waves[0].clusters: required key is missing "
            "(e.g. clusters: {environment: staging})",
        ),
        (
            "waves:\n  - clusters: {environment: staging}\n",
            "gitopsbot.yaml:2:5: waves[0].name: required key is missing",
        ),
        (
            "waves:\n  - name: a\n    clusters: {names: prod-*}\n",
            "gitopsbot.yaml:3:23: waves[0].clusters.names: expected a list, got string",
        ),
        (
            "waves:\n  - name: a\n    clusters: {environment: staging}\n    gateValues: yes\n",
            "gitopsbot.yaml:4:17: waves[0].gateValues: expected true or false, got string "
            "(write true or false)",
        ),
        (
            "waves:\n  name: a\n",
            "gitopsbot.yaml:2:3: waves: expected a list, got mapping",
        ),
        (
            "waves:\n  - name: staging\n    clusters: {environment: staging}\n"
            "failedVersions:\n  - {version: 1.8.7, wave: stagin}\n",
            "gitopsbot.yaml:5:28: failedVersions[0].wave: no wave is named 'stagin' "
            "(did you mean 'staging'?)",
        ),
        (
            "failedVersions:\n  - v1.8.7\n",
            "gitopsbot.yaml:2:5: failedVersions[0]: 'v1.8.7' is not a SemVer version "
            "(write MAJOR.MINOR.PATCH, e.g. 1.8.7)",
        ),
        (
            "failedVersions:\n  - {version: 1.8.7, when: now}\n",
            "gitopsbot.yaml:2:22: failedVersions[0].when: unknown key "
            "(known: version, wave, reason)",
        ),
    ],
    ids=[
        "unknown-wave-key",
        "unknown-selector-key",
        "duplicate-name",
        "bad-duration",
        "days",
        "bare-number",
        "bad-environment",
        "label-number",
        "label-boolean",
        "empty-selector",
        "no-clusters",
        "no-name",
        "names-not-a-list",
        "gate-values-not-boolean",
        "waves-not-a-list",
        "failed-unknown-wave",
        "failed-bad-version",
        "failed-unknown-key",
    ],
)
def test_bad_waves_are_located(text: str, expected: str) -> None:
    problems = _problems(text)
    assert expected in problems, problems


def test_duplicate_name_reported_even_when_the_entry_has_other_faults() -> None:
    text = (
        "waves:\n  - name: a\n    clusters: {environment: staging}\n  - name: a\n    clusters: {}\n"
    )
    problems = _problems(text)
    assert problems[0].startswith("gitopsbot.yaml:4:11: waves[1].name: duplicate wave name")


def test_failed_version_may_name_a_wave_with_faults_of_its_own() -> None:
    text = (
        "waves:\n  - name: canary\n    soak: 1d\n"
        "failedVersions:\n  - {version: 1.8.7, wave: canary}\n"
    )
    assert [p.split(": ")[1] for p in _problems(text)] == ["waves[0].clusters", "waves[0].soak"]


def test_release_labels_are_read(example_files: dict[str, str], tree_with: Tree) -> None:
    path = "clusters/production/release.yaml"
    text = example_files[path] + 'labels:\n  tier: canary\n  region: "eu"\n'
    fleet = load_fleet(tree_with({path: text}))
    assert fleet.clusters["production"].labels == {"tier": "canary", "region": "eu"}
    assert fleet.clusters["staging"].labels == {}


@pytest.mark.parametrize(
    ("section", "field", "message", "at"),
    [
        (
            "labels:\n  tier: 2\n",
            "labels.tier",
            "a label value must be a string, got integer",
            (2, 9),
        ),
        ("labels: [canary]\n", "labels", "expected a mapping, got list", (1, 9)),
        ("labels:\n  tier: ~\n", "labels.tier", "a label value must be a string, got null", (2, 9)),
    ],
    ids=["number", "list", "null"],
)
def test_bad_release_labels_are_located(
    section: str,
    field: str,
    message: str,
    at: tuple[int, int],
    example_files: dict[str, str],
    tree_with: Tree,
) -> None:
    path = "clusters/staging/release.yaml"
    text = example_files[path].rstrip("\n") + "\n" + section
    with pytest.raises(FleetError) as info:
        load_fleet(tree_with({path: text}))
    first = len(example_files[path].rstrip("\n").splitlines())  # the line before labels:
    found = [(p.file, p.line - first, p.column, p.message) for p in info.value.problems]
    assert found == [(path, *at, message)], str(info.value)


def test_doc_example_sorts_the_example_fleet(example_files: dict[str, str]) -> None:
    """docs/fleet-repo.md's Waves snippets: the labelled production cluster is a canary
    (first wave that matches wins), so the production wave is left empty."""
    doc = (Path(__file__).resolve().parents[2] / "docs" / "fleet-repo.md").read_text()
    section = doc.split("### Waves\n", 1)[1].split("\n### ", 1)[0]
    files = dict(example_files)
    files.update(re.findall(r"<!-- file: (\S+) -->\n```yaml\n(.*?)```", section, re.S))
    fleet = load_fleet(MemoryTree(files))
    by_wave = fleet_by_wave(fleet.settings.waves, fleet.clusters.values())
    assert [(m.wave.name if m.wave else None, m.clusters) for m in by_wave] == [
        ("staging", ("staging",)),
        ("canary", ("production",)),
        ("production", ()),
    ]
