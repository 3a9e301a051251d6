"""The Helm port's contract, run against FakeHelm, real helm 3 and real helm 4 (the latter two
against the Kubernetes API emulator with the sandbox tensor-fusion chart).

Covers: no release → status None, history []; install then upgrade (revisions, superseded,
chart and app version); our ``--description`` read back from status and history (how a
resumed executor recognises its own revision); get_values per revision (R6); upgrade
without ``install`` of an unknown release fails; a pending-* release is refused with
HelmReleaseLocked and left alone (R8); rollback to a revision restores its values (R16).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from gitopsbot.core.observed import HelmReleaseStatus
from gitopsbot.errors import HelmFailed, HelmReleaseLocked
from gitopsbot.ports.helm import ChartRef, Helm

Charts = Callable[[str], ChartRef]
MakePending = Callable[[str, str], None]


pytestmark = pytest.mark.slow

NS = "default"


@pytest.fixture
def up(helm: Helm, chart: Charts) -> Callable[..., Any]:
    """``up(version, values, step, **kw)``: upgrade release ``tf`` with our description."""

    def run(version: str, values: dict[str, Any], step: str, **kw: Any) -> Any:
        return _upgrade(helm, chart(version), version, values, step, **kw)

    return run


def _upgrade(
    helm: Helm, chart: ChartRef, version: str, values: dict[str, Any], step: str, **kw: Any
) -> Any:
    return helm.upgrade(
        release="tf",
        namespace=NS,
        chart=chart,
        version=version,
        values=values,
        description=f"gitopsbot op=op-1 step={step}",
        **kw,
    )


def test_unknown_release(helm: Helm) -> None:
    assert helm.status("nope", NS) is None
    assert helm.history("nope", NS) == []


def test_install_upgrade_history_and_descriptions(helm: Helm, up: Callable[..., Any]) -> None:
    first = up("1.8.0", {"controller": {"replicaCount": 1}}, "install")
    assert (first.revision, first.status) == (1, HelmReleaseStatus.DEPLOYED)
    assert (first.chart_name, first.chart_version) == ("tensor-fusion", "1.8.0")

    second = up("1.8.7", {"controller": {"replicaCount": 2}}, "helm-upgrade")
    assert second.revision == 2
    assert second.app_version == "2.17.0"
    assert second.description == "gitopsbot op=op-1 step=helm-upgrade"

    status = helm.status("tf", NS)
    assert status is not None and status.revision == 2
    assert status.description == "gitopsbot op=op-1 step=helm-upgrade"
    assert status.chart == "tensor-fusion-1.8.7"

    history = helm.history("tf", NS)
    assert [(h.revision, h.status) for h in history] == [
        (1, HelmReleaseStatus.SUPERSEDED),
        (2, HelmReleaseStatus.DEPLOYED),
    ]
    assert history[0].description == "gitopsbot op=op-1 step=install"
    assert history[0].chart_version == "1.8.0"


def test_get_values_per_revision(helm: Helm, up: Callable[..., Any]) -> None:
    up("1.8.0", {"controller": {"replicaCount": 1}}, "install")
    up("1.8.7", {"controller": {"replicaCount": 2}, "cluster": {"name": "x"}}, "up")
    assert helm.get_values("tf", NS) == {
        "controller": {"replicaCount": 2},
        "cluster": {"name": "x"},
    }
    assert helm.get_values("tf", NS, revision=1) == {"controller": {"replicaCount": 1}}


def test_upgrade_without_install_of_unknown_release_fails(
    helm: Helm, up: Callable[..., Any]
) -> None:
    with pytest.raises(HelmFailed):
        up("1.8.7", {}, "helm-upgrade", install=False)
    assert helm.history("tf", NS) == []


def test_pending_release_is_refused_not_forced(
    helm: Helm, up: Callable[..., Any], make_pending: MakePending
) -> None:
    up("1.8.0", {}, "install")
    make_pending("tf", NS)
    status = helm.status("tf", NS)
    assert status is not None and status.status is HelmReleaseStatus.PENDING_UPGRADE
    assert status.status.pending

    with pytest.raises(HelmReleaseLocked, match="pending-upgrade"):
        up("1.8.7", {}, "helm-upgrade")
    with pytest.raises(HelmReleaseLocked):
        helm.rollback(release="tf", namespace=NS, revision=1, description="op=op-1 step=rb")
    # Nothing was forced: the pending revision is still the latest.
    after = helm.status("tf", NS)
    assert after is not None and (after.revision, after.status) == (status.revision, status.status)


def test_rollback_restores_a_revision(helm: Helm, up: Callable[..., Any]) -> None:
    up("1.8.0", {"controller": {"replicaCount": 1}}, "install")
    up("1.8.7", {"controller": {"replicaCount": 2}}, "helm-upgrade")
    back = helm.rollback(release="tf", namespace=NS, revision=1, description="op=op-2 step=rb")
    assert back.revision == 3
    assert back.status is HelmReleaseStatus.DEPLOYED
    assert back.chart_version == "1.8.0"
    assert back.description == "Rollback to 1"
    assert helm.get_values("tf", NS) == {"controller": {"replicaCount": 1}}


def test_rollback_to_missing_revision_fails(helm: Helm, up: Callable[..., Any]) -> None:
    up("1.8.0", {}, "install")
    with pytest.raises(HelmFailed):
        helm.rollback(release="tf", namespace=NS, revision=7, description="op=op-2 step=rb")
