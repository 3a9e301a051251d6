"""Parsing a Helm index and chart files; semver ordering (F5: app versions are not monotonic)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gitopsbot.core.charts.chart import is_version, parse_chart_files, parse_index, semver_key
from gitopsbot.errors import ChartInvalid
from tests.core.plan_builders import chart_files


@pytest.mark.parametrize(
    ("lower", "higher"),
    [
        ("1.8.6", "1.8.7"),
        ("1.8.9", "1.8.10"),
        ("1.9.0-rc.1", "1.9.0"),
        ("1.9.0-alpha", "1.9.0-beta"),
        ("1.9.0-rc.2", "1.9.0-rc.10"),
        ("v1.2.3", "1.2.4"),
        ("0.1.0", "1.0.0"),
    ],
)
def test_semver_order(lower: str, higher: str) -> None:
    assert semver_key(lower) < semver_key(higher)


@pytest.mark.parametrize("text", ["", "latest", "1.x", "1.2.3.4", "01.2.3"])
def test_not_a_version(text: str) -> None:
    assert not is_version(text)
    with pytest.raises(ValueError, match="not a semantic version"):
        semver_key(text)


def test_real_index(tensor_fusion: Path) -> None:
    index = parse_index((tensor_fusion / "index.yaml").read_text())
    versions = index.versions("tensor-fusion")
    assert len(versions) > 50
    keys = [semver_key(v.version) for v in versions]
    assert keys == sorted(keys, reverse=True)
    latest = index.latest("tensor-fusion")
    assert latest is not None and latest.version == "1.8.7" and latest.app_version == "2.17.0"
    # F5: appVersion goes backwards between 1.8.5 and 1.8.6.
    v185, v186 = index.get("tensor-fusion", "1.8.5"), index.get("tensor-fusion", "1.8.6")
    assert v185 is not None and v186 is not None
    assert semver_key(v186.app_version) < semver_key(v185.app_version)
    assert v186.digest == "961fee476fe3877aacc63055b2c81d1d3b67edc96a5105063b9689b00f676aab"
    assert v186.created.startswith("2026-08-14")
    assert v186.urls[0].endswith("tensor-fusion-1.8.6.tgz")
    assert index.get("tensor-fusion", "9.9.9") is None


def test_index_annotations_changes() -> None:
    text = """
apiVersion: v1
entries:
  c:
  - version: 1.0.0
    appVersion: "1.0"
    annotations:
      artifacthub.io/changes: "- kind: fixed\\n  description: webhook"
"""
    entry = parse_index(text).get("c", "1.0.0")
    assert entry is not None and "webhook" in entry.changes


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("entries: [", "index.yaml:1:"),
        ("apiVersion: v1\n", "no 'entries' mapping"),
        ("entries:\n  c:\n  - version: latest\n", "entries.c[0].version: not a version"),
    ],
)
def test_bad_index(text: str, fragment: str) -> None:
    with pytest.raises(ChartInvalid, match=r"index\.yaml") as info:
        parse_index(text)
    assert fragment in str(info.value)


def test_real_chart_files(tensor_fusion: Path) -> None:
    chart = parse_chart_files(chart_files(tensor_fusion / "chart-1.8.7"), digest="d")
    assert (chart.name, chart.version, chart.app_version) == ("tensor-fusion", "1.8.7", "2.17.0")
    assert chart.values["cluster"]["hypervisorImage"].endswith(":2.15.0")
    assert chart.schema is not None and "controller" in chart.schema["properties"]
    assert len(chart.crds) == 12 and len(chart.crd_defs) == 12
    pools = next(c for c in chart.crd_defs if c.name == "gpupools.tensor-fusion.ai")
    assert pools.storage_version == "v1"
    fields = pools.versions[0].fields
    assert "spec.nodeManagerConfig.nodePoolRollingUpdatePolicy.batchPercentage" in fields


@pytest.mark.parametrize(
    ("files", "fragment"),
    [
        ({}, "no Chart.yaml"),
        ({"Chart.yaml": b"name: x\nversion: latest\n"}, "Chart.yaml: version"),
        ({"Chart.yaml": b"name: x\nversion: 1.0.0\n", "values.yaml": b"- a\n"}, "top level"),
        (
            {"Chart.yaml": b"version: 1.0.0\n", "values.schema.json": b"{\n  x"},
            "values.schema.json:2:",
        ),
        ({"Chart.yaml": b"version: 1.0.0\n", "values.yaml": b"a: [\n"}, "values.yaml:"),
    ],
)
def test_bad_chart(files: dict[str, bytes], fragment: str) -> None:
    with pytest.raises(ChartInvalid) as info:
        parse_chart_files(files, digest="d", source="mychart")
    assert "mychart" in str(info.value) and fragment in str(info.value)
