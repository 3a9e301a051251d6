"""Transient failures are retried inside the call, real ones are not: real helm 3 and helm 4
against the API emulator with its error fault injection.

Covers: which verb each major uses on the TensorFusionCluster (helm 3: client-side PATCH;
helm 4: server-side apply PATCH), so the faults hit what helm sends; one injected 409 on an
upgrade and on a rollback: the call succeeds with one retry counted (``last_retries``),
logged at WARNING, after waiting the first delay, over the ``failed`` revision the first
attempt left; 503/500 on the reads (history, status, get_values); a 409 that never stops:
the budget (4 attempts, 1 s, 2 s, 4 s) is spent and HelmFailed raised, one failed revision
per attempt; a permanent 422 (an invalid Service) is not retried; a transient failure that
left the release pending-upgrade (a 409 on helm's own release record) is refused
(HelmReleaseLocked), never forced; the classification of helm's stderr on the real API
server's messages.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

import pytest

from gitopsbot.adapters.api_failures import is_transient as _transient
from gitopsbot.adapters.helm import RETRY_DELAYS, HelmCli
from gitopsbot.core.charts.observed import HelmReleaseStatus
from gitopsbot.errors import HelmFailed, HelmReleaseLocked
from gitopsbot.ports.helm import ChartRef, RollbackRequest, UpgradeRequest
from gitopsbot.sandbox.apiserver import ApiServer

pytestmark = pytest.mark.slow

Charts = Callable[[str], ChartRef]
TFC = "*/tensorfusionclusters/*"
NS = "default"


@pytest.fixture
def quick(helm_cli: HelmCli, kubeconfig: Path, sleeps: list[float]) -> HelmCli:
    """``helm_cli`` (helm 3 and helm 4) whose retry delays are recorded, not slept."""
    return HelmCli(helm_cli.binary, home=helm_cli.home, kubeconfig=kubeconfig, sleep=sleeps.append)


def _up(helm: HelmCli, chart: Charts, version: str, step: str) -> None:
    helm.upgrade(UpgradeRequest(
        release="tf", namespace=NS, chart=chart(version), version=version, values={},
        description=f"gitopsbot op=op-1 step={step}",
    ))  # fmt: skip


def _statuses(helm: HelmCli) -> list[tuple[int, HelmReleaseStatus]]:
    return [(h.revision, h.status) for h in helm.history("tf", NS)]


def test_the_faults_hit_the_verb_each_major_sends(
    quick: HelmCli, api: ApiServer, chart: Charts
) -> None:
    _up(quick, chart, "1.8.0", "install")
    seen = len(api.requests)
    _up(quick, chart, "1.8.7", "up")
    requests = api.requests[seen:]
    verbs = {method for method, path, _ in requests if "/tensorfusionclusters/" in path}
    assert "PATCH" in verbs and not verbs & {"PUT", "POST"}
    patch = next(p for m, p, _ in requests if m == "PATCH" and "/tensorfusionclusters/" in p)
    assert ("force=true" in patch) == (quick.major >= 4)  # helm 4: server-side apply


def test_one_transient_409_on_upgrade_is_retried(
    quick: HelmCli,
    api: ApiServer,
    chart: Charts,
    sleeps: list[float],
    caplog: pytest.LogCaptureFixture,
) -> None:
    _up(quick, chart, "1.8.0", "install")
    rule = api.faults.error(409, path=TFC, method="PATCH", times=1)
    caplog.set_level(logging.WARNING, logger="gitopsbot.adapters.helm")
    info = quick.upgrade(UpgradeRequest(
        release="tf", namespace=NS, chart=chart("1.8.7"), version="1.8.7", values={},
        description="gitopsbot op=op-1 step=helm-upgrade",
    ))  # fmt: skip
    assert rule.hits == 1
    assert quick.last_retries == 1
    assert sleeps == [RETRY_DELAYS[0]]
    assert (info.revision, info.status, info.chart_version) == (3, "deployed", "1.8.7")
    assert info.description == "gitopsbot op=op-1 step=helm-upgrade"
    # The first attempt left a failed revision; the retry upgraded over it.
    assert _statuses(quick) == [
        (1, HelmReleaseStatus.SUPERSEDED),
        (2, HelmReleaseStatus.FAILED),
        (3, HelmReleaseStatus.DEPLOYED),
    ]
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "transient failure (attempt 1 of 4), retrying in 1s" in warnings[0].getMessage()
    assert "the object has been modified" in warnings[0].getMessage()
    # The next call counts from zero.
    quick.status("tf", NS)
    assert quick.last_retries == 0


def test_one_transient_409_on_rollback_is_retried(
    quick: HelmCli, api: ApiServer, chart: Charts, sleeps: list[float]
) -> None:
    _up(quick, chart, "1.8.0", "install")
    _up(quick, chart, "1.8.7", "up")
    rule = api.faults.error(409, path=TFC, method="PATCH", times=1)
    info = quick.rollback(
        RollbackRequest(release="tf", namespace=NS, revision=1, description="op=op-2 step=rb")
    )
    assert rule.hits == 1
    assert quick.last_retries == 1
    assert sleeps == [RETRY_DELAYS[0]]
    assert (info.revision, info.chart_version, info.description) == (4, "1.8.0", "Rollback to 1")
    assert _statuses(quick)[-2:] == [(3, HelmReleaseStatus.FAILED), (4, HelmReleaseStatus.DEPLOYED)]


@pytest.mark.parametrize("status", [503, 500])
def test_reads_are_retried(
    quick: HelmCli, api: ApiServer, chart: Charts, sleeps: list[float], status: int
) -> None:
    _up(quick, chart, "1.8.0", "install")
    for read in (
        lambda: quick.history("tf", NS),
        lambda: quick.status("tf", NS),
        lambda: quick.get_values("tf", NS),
    ):
        rule = api.faults.error(status, path="*/secrets", method="GET", times=1)
        read()
        assert rule.hits == 1
        assert quick.last_retries == 1
    assert sleeps == [RETRY_DELAYS[0]] * 3


def test_the_budget_is_bounded_then_the_last_error_is_raised(
    quick: HelmCli, api: ApiServer, chart: Charts, sleeps: list[float]
) -> None:
    _up(quick, chart, "1.8.0", "install")
    rule = api.faults.error(409, path=TFC, method="PATCH")
    with pytest.raises(HelmFailed, match="the object has been modified"):
        _up(quick, chart, "1.8.7", "up")
    assert rule.hits == 4
    assert quick.last_retries == 3
    assert sleeps == [1.0, 2.0, 4.0]
    assert [s for _, s in _statuses(quick)[1:]] == [HelmReleaseStatus.FAILED] * 4
    api.faults.remove(rule)
    _up(quick, chart, "1.8.7", "later")  # the world recovered: the next upgrade works
    assert _statuses(quick)[-1] == (6, HelmReleaseStatus.DEPLOYED)


def test_a_permanent_error_is_not_retried(
    quick: HelmCli, chart: Charts, sleeps: list[float], tmp_path: Path
) -> None:
    """422: the emulator refuses a Service whose clusterIP is not an IP, as the real API
    server does."""
    bad = tmp_path / "bad-service"
    (bad / "templates").mkdir(parents=True)
    (bad / "Chart.yaml").write_text("apiVersion: v2\nname: bad-service\nversion: 0.1.0\n")
    (bad / "templates" / "service.yaml").write_text(
        "apiVersion: v1\nkind: Service\nmetadata:\n  name: bad\n"
        "spec:\n  clusterIP: {{ .Values.ip | quote }}\n  ports:\n    - port: 80\n"
    )
    with pytest.raises(HelmFailed, match="is invalid") as failure:
        quick.upgrade(UpgradeRequest(
            release="bad", namespace=NS, chart=ChartRef(path=str(bad)), version="0.1.0",
            values={"ip": "not-an-ip"}, description="d",
        ))  # fmt: skip
    assert "must be a valid IP address" in str(failure.value)
    assert quick.last_retries == 0
    assert sleeps == []


def test_a_transient_failure_that_left_the_release_pending_is_not_forced(
    quick: HelmCli, api: ApiServer, chart: Charts, sleeps: list[float]
) -> None:
    """A 409 on helm's final write of its own release record leaves pending-upgrade: the
    retry refuses it (R8) instead of running helm into "another operation is in progress"."""
    _up(quick, chart, "1.8.0", "install")
    api.faults.error(409, path="*/secrets/sh.helm.release.v1.tf.v2", method="PUT", times=1)
    with pytest.raises(HelmReleaseLocked, match="pending-upgrade"):
        _up(quick, chart, "1.8.7", "up")
    assert quick.last_retries == 1
    assert _statuses(quick)[-1] == (2, HelmReleaseStatus.PENDING_UPGRADE)


@pytest.mark.parametrize(
    "stderr",
    [
        'Error: UPGRADE FAILED: cannot patch "x" with kind TensorFusionCluster: Operation cannot '
        'be fulfilled on tensorfusionclusters.tensor-fusion.ai "x": the object has been '
        "modified; please apply your changes to the latest version and try again",
        "Error: the server has received too many requests and has asked us to try again later",
        "Error: 429 Too Many Requests: rate limit exceeded",
        'Error: create: failed to create: Internal error occurred: failed calling webhook "w"',
        "Error: the server is currently unable to handle the request (get secrets)",
        'Error: an error on the server ("") has prevented the request from succeeding (500)',
        'Error: Kubernetes cluster unreachable: Get "https://k:6443/version": dial tcp '
        "10.0.0.1:6443: connect: connection refused",
        'Error: Get "https://k:6443/api/v1/secrets": read tcp 1.2.3.4:5->6.7.8.9:6443: read: '
        "connection reset by peer",
        'Error: Get "https://k:6443/api/v1/secrets": EOF',
        'Error: Get "https://k:6443/version": net/http: TLS handshake timeout',
        'Error: Get "https://k:6443/version": dial tcp 10.0.0.1:6443: i/o timeout',
        "Error: etcdserver: leader changed",
    ],
)
def test_transient_messages(stderr: str) -> None:
    assert _transient(stderr)


@pytest.mark.parametrize(
    "stderr",
    [
        'Error: Service "bad" is invalid: spec.clusterIPs[0]: Invalid value: "x"',
        'Error: secrets is forbidden: User "bot" cannot create resource "secrets"',
        "Error: Unauthorized",
        "Error: UPGRADE FAILED: conflict occurred while applying object /tensor-fusion "
        "tensor-fusion.ai/v1, Kind=TensorFusionCluster: Apply failed with 1 conflict: conflict "
        'with "gitopsbot": .spec.gpuPools',
        "Error: UPGRADE FAILED: another operation (install/upgrade/rollback) is in progress",
        'Error: template: echo/templates/fail.yaml:1:3: executing "x" at <fail>: error calling '
        "fail: bad",
        "Error: UPGRADE FAILED: context deadline exceeded",
        'Error: 1 error occurred:\n\t* Service "s" is invalid: spec.clusterIP: Internal error: '
        "the service IP range is full",
    ],
)
def test_permanent_messages(stderr: str) -> None:
    assert not _transient(stderr)
