"""The Helm port's contract, run against FakeHelm, real helm 3 and real helm 4 (the latter two
on each server, the Kubernetes API emulator and the real control plane, with the sandbox
tensor-fusion chart; ``helm_target`` in conftest.py).

Covers: no release → status None, history []; install then upgrade (revisions, superseded,
chart and app version); our ``--description`` read back from status and history (how a
resumed executor recognises its own revision); get_values per revision (R6); upgrade
without ``install`` of an unknown release fails; a pending-* release is refused with
HelmReleaseLocked and left alone (R8); rollback to a revision restores its values (R16); one
transient API failure (a 409 on the TensorFusionCluster for real helm) is retried inside
upgrade and rollback, counted in ``last_retries``, over the ``failed`` revision it left; a
chart path that does not exist raises HelmChartUnusable and changes nothing;
``operation_alive`` is False for an operation that is not running; an upgrade the API server
refuses for an invalid value reads clearly (the values as they are) and never shows a secret
(issue 11: masking masks secrets only), in the exception or in the logs.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gitopsbot.adapters.helm import HelmCli
from gitopsbot.core.charts.observed import HelmReleaseStatus
from gitopsbot.errors import HelmChartUnusable, HelmFailed, HelmReleaseLocked
from gitopsbot.ports.helm import ChartRef, Helm, RollbackRequest, UpgradeRequest
from gitopsbot.testing import FakeHelm
from tests.executor.adapters.conftest import Target

Charts = Callable[[str], ChartRef]
MakePending = Callable[[str, str], None]


pytestmark = pytest.mark.slow


@pytest.fixture
def ns(helm_target: Target) -> str:
    """The namespace of the implementation under test."""
    return helm_target.namespace


@pytest.fixture
def transient(helm_target: Target) -> Callable[[str], Helm]:
    """``transient(operation)``: the Helm under test, whose next ``operation`` meets one
    transient API failure (real helm: a 409 on the TensorFusionCluster's PATCH, and retry
    delays not slept)."""

    helm = helm_target.impl

    def inject(operation: str) -> Helm:
        if isinstance(helm, FakeHelm):
            helm.transient(operation)
            return helm
        assert isinstance(helm, HelmCli) and helm_target.server is not None
        api = helm_target.server.api  # fault injection: the emulator alone
        api.faults.error(409, path="*/tensorfusionclusters/*", method="PATCH", times=1)
        kubeconfig = helm_target.server.kubeconfig
        return HelmCli(helm.binary, home=helm.home, kubeconfig=kubeconfig, sleep=lambda _: None)

    return inject


@pytest.fixture
def up(helm: Helm, chart: Charts, ns: str) -> Callable[..., Any]:
    """``up(version, values, step, **kw)``: upgrade release ``tf`` with our description."""

    def run(version: str, values: dict[str, Any], step: str, **kw: Any) -> Any:
        return _upgrade(helm, chart(version), ns, version, values, step, **kw)

    return run


def _upgrade(
    helm: Helm,
    chart: ChartRef,
    ns: str,
    version: str,
    values: dict[str, Any],
    step: str,
    **kw: Any,
) -> Any:
    return helm.upgrade(
        UpgradeRequest(
            release="tf",
            namespace=ns,
            chart=chart,
            version=version,
            values=values,
            description=f"gitopsbot op=op-1 step={step}",
            **kw,
        )
    )


def test_unknown_release(helm: Helm, ns: str) -> None:
    assert helm.status("nope", ns) is None
    assert helm.history("nope", ns) == []


def test_install_upgrade_history_and_descriptions(
    helm: Helm, ns: str, up: Callable[..., Any]
) -> None:
    first = up("1.8.0", {"controller": {"replicaCount": 1}}, "install")
    assert (first.revision, first.status) == (1, HelmReleaseStatus.DEPLOYED)
    assert (first.chart_name, first.chart_version) == ("tensor-fusion", "1.8.0")

    second = up("1.8.7", {"controller": {"replicaCount": 2}}, "helm-upgrade")
    assert second.revision == 2
    assert second.app_version == "2.17.0"
    assert second.description == "gitopsbot op=op-1 step=helm-upgrade"

    status = helm.status("tf", ns)
    assert status is not None and status.revision == 2
    assert status.description == "gitopsbot op=op-1 step=helm-upgrade"
    assert status.chart == "tensor-fusion-1.8.7"

    history = helm.history("tf", ns)
    assert [(h.revision, h.status) for h in history] == [
        (1, HelmReleaseStatus.SUPERSEDED),
        (2, HelmReleaseStatus.DEPLOYED),
    ]
    assert history[0].description == "gitopsbot op=op-1 step=install"
    assert history[0].chart_version == "1.8.0"


def test_get_values_per_revision(helm: Helm, ns: str, up: Callable[..., Any]) -> None:
    up("1.8.0", {"controller": {"replicaCount": 1}}, "install")
    up("1.8.7", {"controller": {"replicaCount": 2}, "cluster": {"name": "x"}}, "up")
    assert helm.get_values("tf", ns) == {
        "controller": {"replicaCount": 2},
        "cluster": {"name": "x"},
    }
    assert helm.get_values("tf", ns, revision=1) == {"controller": {"replicaCount": 1}}


def test_upgrade_without_install_of_unknown_release_fails(
    helm: Helm, ns: str, up: Callable[..., Any]
) -> None:
    with pytest.raises(HelmFailed):
        up("1.8.7", {}, "helm-upgrade", install=False)
    assert helm.history("tf", ns) == []


def test_pending_release_is_refused_not_forced(
    helm: Helm, ns: str, up: Callable[..., Any], make_pending: MakePending
) -> None:
    up("1.8.0", {}, "install")
    make_pending("tf", ns)
    status = helm.status("tf", ns)
    assert status is not None and status.status is HelmReleaseStatus.PENDING_UPGRADE
    assert status.status.pending

    with pytest.raises(HelmReleaseLocked, match="pending-upgrade"):
        up("1.8.7", {}, "helm-upgrade")
    with pytest.raises(HelmReleaseLocked):
        helm.rollback(
            RollbackRequest(release="tf", namespace=ns, revision=1, description="op=op-1 step=rb")
        )
    # Nothing was forced: the pending revision is still the latest.
    after = helm.status("tf", ns)
    assert after is not None and (after.revision, after.status) == (status.revision, status.status)


def test_rollback_restores_a_revision(helm: Helm, ns: str, up: Callable[..., Any]) -> None:
    up("1.8.0", {"controller": {"replicaCount": 1}}, "install")
    up("1.8.7", {"controller": {"replicaCount": 2}}, "helm-upgrade")
    back = helm.rollback(
        RollbackRequest(release="tf", namespace=ns, revision=1, description="op=op-2 step=rb")
    )
    assert back.revision == 3
    assert back.status is HelmReleaseStatus.DEPLOYED
    assert back.chart_version == "1.8.0"
    assert back.description == "Rollback to 1"
    assert helm.get_values("tf", ns) == {"controller": {"replicaCount": 1}}


def test_rollback_to_missing_revision_fails(helm: Helm, ns: str, up: Callable[..., Any]) -> None:
    up("1.8.0", {}, "install")
    with pytest.raises(HelmFailed):
        helm.rollback(
            RollbackRequest(release="tf", namespace=ns, revision=7, description="op=op-2 step=rb")
        )


# Fault injection (a 409 on the TensorFusionCluster's PATCH): real helm on the emulator alone.
@pytest.mark.parametrize("helm_target", ["fake", "helm3-emulator", "helm4-emulator"], indirect=True)
def test_a_transient_failure_is_retried_inside_upgrade_and_rollback(
    helm: Helm, ns: str, chart: Charts, up: Callable[..., Any], transient: Callable[[str], Helm]
) -> None:
    up("1.8.0", {"controller": {"replicaCount": 1}}, "install")
    assert helm.last_retries == 0
    retrying = transient("upgrade")
    info = _upgrade(retrying, chart("1.8.7"), ns, "1.8.7", {}, "helm-upgrade")
    assert retrying.last_retries == 1
    assert (info.revision, info.status, info.chart_version) == (3, "deployed", "1.8.7")
    statuses = [(h.revision, h.status) for h in helm.history("tf", ns)]
    assert statuses == [
        (1, HelmReleaseStatus.SUPERSEDED),
        (2, HelmReleaseStatus.FAILED),
        (3, HelmReleaseStatus.DEPLOYED),
    ]
    retrying = transient("rollback")
    back = retrying.rollback(
        RollbackRequest(release="tf", namespace=ns, revision=1, description="op=op-2 rb")
    )
    assert retrying.last_retries == 1
    assert (back.revision, back.chart_version, back.description) == (5, "1.8.0", "Rollback to 1")
    assert helm.history("tf", ns)[-2].status is HelmReleaseStatus.FAILED
    assert helm.get_values("tf", ns) == {"controller": {"replicaCount": 1}}


def test_a_chart_path_that_does_not_exist_is_unusable(
    helm: Helm, ns: str, up: Callable[..., Any], tmp_path: Path
) -> None:
    up("1.8.0", {}, "install")
    before = helm.history("tf", ns)
    with pytest.raises(HelmChartUnusable, match="nothing was changed"):
        _upgrade(helm, ChartRef(path=str(tmp_path / "missing")), ns, "1.8.7", {}, "helm-upgrade")
    assert helm.history("tf", ns) == before


def test_operation_alive_is_false_when_nothing_runs(
    helm: Helm, ns: str, up: Callable[..., Any]
) -> None:
    assert not helm.operation_alive("gitopsbot op=op-1 step=helm-upgrade")
    up("1.8.0", {}, "install")
    assert not helm.operation_alive("gitopsbot op=op-1 step=install")
    assert not helm.operation_alive("")


SECRET = "canary-Kq71x-enroll-token"
COPIED = "canary-Vw30p-copied-secret"


def test_an_error_masks_the_secrets_and_nothing_else(
    helm: Helm, ns: str, chart: Charts, caplog: pytest.LogCaptureFixture
) -> None:
    """An upgrade the API server refuses (an invalid isolation mode): the error shows the
    invalid value and the other values as they are, and never a secret: not the value at a
    secret path (``agent.enrollToken``), not a secret passed in ``secret_values`` even where
    it was copied to a path that is not secret, in the exception or in any log line. (For
    the fake, the injected error stands for helm's stderr.)"""
    caplog.set_level(logging.DEBUG)
    values = {
        "cluster": {
            "name": "gpu-cluster-eu",
            "pool": {"name": "shared", "defaultIsolationMode": "turbo-mode"},
            "extraPools": [{"name": "training", "defaultIsolationMode": COPIED}],
        },
        "agent": {"agentId": "agent-eu-1", "enrollToken": SECRET},
    }
    if isinstance(helm, FakeHelm):
        # What the API server says (seen with helm 3 and 4 against the emulator).
        path = "spec.gpuPools[{}].specTemplate.nodeManagerConfig.defaultIsolationMode"
        allowed = 'supported values: "shared", "soft", "hard", "partitioned"'
        helm.fail(
            "upgrade",
            HelmFailed(
                'helm upgrade tf: exit 1: Error: TensorFusionCluster.tensor-fusion.ai "gpu-'
                f'cluster-eu" is invalid: {path.format(0)}: Unsupported value: "turbo-mode": '
                f'{allowed}, {path.format(1)}: Unsupported value: "{COPIED}": {allowed} '
                f"(agent token {SECRET})"
            ),
        )
    with pytest.raises(HelmFailed) as failure:
        helm.upgrade(UpgradeRequest(
            release="tf", namespace=ns, chart=chart("1.8.7"), version="1.8.7", values=values,
            description="gitopsbot op=op-1 step=helm-upgrade", secret_values=[COPIED],
        ))  # fmt: skip
    text = str(failure.value)
    assert '"gpu-cluster-eu" is invalid' in text, text  # readable, not "gpu-***"
    assert 'Unsupported value: "turbo-mode"' in text, text
    assert 'supported values: "shared", "soft"' in text, text  # pool "shared" is no secret
    assert 'Unsupported value: "***"' in text, text  # the copied secret
    assert SECRET not in text and COPIED not in text
    assert SECRET not in caplog.text and COPIED not in caplog.text


def test_a_request_shows_no_secret() -> None:
    """What an upgrade is given may reach a log or an error as a whole: its repr leaves out
    the values (secrets merged in) and the secrets."""
    request = UpgradeRequest(
        release="tf", namespace="tf-sys", chart=ChartRef(path="/charts/tf"), version="1.8.7",
        values={"agent": {"enrollToken": SECRET}}, description="op=op-1",
        secret_values=[COPIED],
    )  # fmt: skip
    assert SECRET not in repr(request) and COPIED not in repr(request)
    assert "release='tf'" in repr(request)
