"""CRD diff on the real charts (1.7.5 → 1.8.0 → 1.8.7) and on synthetic breaking changes."""

from __future__ import annotations

import pytest

from gitopsbot.core.charts.chart import Chart
from gitopsbot.core.charts.crd_diff import CrdChangeKind, diff_charts
from tests.core.plan_builders import crd_text, small_chart


def kinds(diff: object) -> set[tuple[CrdChangeKind, str]]:
    return {(c.kind, c.crd) for c in diff.changes}  # type: ignore[attr-defined]


@pytest.mark.shared
def test_real_175_to_180(real_charts: dict[str, Chart]) -> None:
    d = diff_charts(real_charts["1.7.5"], real_charts["1.8.0"])
    # providerconfigs arrives with v2 (tensorfusion-facts §4.2).
    assert (CrdChangeKind.CRD_ADDED, "providerconfigs.tensor-fusion.ai") in kinds(d)
    removed = {c.crd: c.fields for c in d.changes if c.kind == CrdChangeKind.FIELDS_REMOVED}
    assert "status.allocationInfo" in removed["gpunodes.tensor-fusion.ai"]
    assert "spec.autoScaling" in removed["schedulingconfigtemplates.tensor-fusion.ai"]
    assert all(c.breaking for c in d.changes if c.kind == CrdChangeKind.FIELDS_REMOVED)
    assert not d.drops_version()  # single version v1 everywhere


@pytest.mark.shared
def test_real_180_to_187(real_charts: dict[str, Chart]) -> None:
    d = diff_charts(real_charts["1.8.0"], real_charts["1.8.7"])
    assert not d.breaking
    added = {c.crd: c.fields for c in d.changes if c.kind == CrdChangeKind.FIELDS_ADDED}
    assert "spec.nodeManagerConfig.defaultIsolationMode" in added["gpupools.tensor-fusion.ai"]
    assert len(d.unchanged) == 12 - len({c.crd for c in d.changes})


@pytest.mark.shared
def test_same_chart_is_unchanged(real_charts: dict[str, Chart]) -> None:
    d = diff_charts(real_charts["1.8.7"], real_charts["1.8.7"])
    assert not d.changes and len(d.unchanged) == 12


@pytest.mark.parametrize(
    ("old", "new", "expected", "breaking"),
    [
        (
            crd_text(versions=(("v1", True, True), ("v2", True, False))),
            crd_text(versions=(("v1", True, True),)),
            CrdChangeKind.VERSION_REMOVED,
            True,
        ),
        (
            crd_text(versions=(("v1", True, True),)),
            crd_text(versions=(("v1", True, True), ("v2", True, False))),
            CrdChangeKind.VERSION_ADDED,
            False,
        ),
        (
            crd_text(versions=(("v1", True, True), ("v2", True, False))),
            crd_text(versions=(("v1", True, False), ("v2", True, True))),
            CrdChangeKind.STORAGE_CHANGED,
            True,
        ),
        (crd_text(), crd_text(fields=("phase",)), CrdChangeKind.FIELDS_REMOVED, True),
        (crd_text(), crd_text(fields=("phase", "uuid", "x")), CrdChangeKind.FIELDS_ADDED, False),
    ],
)
def test_synthetic(old: str, new: str, expected: CrdChangeKind, breaking: bool) -> None:
    d = diff_charts(small_chart(crds={"a.yaml": old}), small_chart(crds={"a.yaml": new}))
    change = next(c for c in d.changes if c.kind == expected)
    assert change.breaking is breaking
    assert d.drops_version() is (
        expected in {CrdChangeKind.VERSION_REMOVED, CrdChangeKind.STORAGE_CHANGED}
    )


def test_crd_removed_and_added() -> None:
    old = small_chart(crds={"a.yaml": crd_text("gpus.tensor-fusion.ai")})
    new = small_chart(crds={"b.yaml": crd_text("nodes.tensor-fusion.ai")})
    d = diff_charts(old, new)
    assert kinds(d) == {
        (CrdChangeKind.CRD_REMOVED, "gpus.tensor-fusion.ai"),
        (CrdChangeKind.CRD_ADDED, "nodes.tensor-fusion.ai"),
    }
    assert d.drops_version() and len(d.breaking) == 1
    # nothing deployed: everything is added, nothing breaks
    assert not diff_charts(None, new).breaking
