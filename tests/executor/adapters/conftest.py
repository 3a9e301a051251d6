"""Fixtures for the cluster-facing adapters: a fresh API emulator per test, its kubeconfig,
the kube client adapter, HelmCli over real helm 3 and helm 4, the fakes, the sandbox chart,
and a way to leave a Helm release in pending-* (as a helm killed mid-upgrade does)."""

from __future__ import annotations

import base64
import gzip
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from gitopsbot.adapters.helm import HelmCli
from gitopsbot.adapters.kube import KubeCluster, RetryPolicy
from gitopsbot.ports.helm import ChartRef
from gitopsbot.sandbox.apiserver import ApiServer
from gitopsbot.testing import FakeCluster, FakeHelm

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE_CHARTS = ROOT / "examples" / "charts"


@pytest.fixture
def api() -> Iterator[ApiServer]:
    server = ApiServer()
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def kubeconfig(api: ApiServer, tmp_path: Path) -> Path:
    return api.write_kubeconfig(tmp_path / "kubeconfig")


@pytest.fixture
def sleeps() -> list[float]:
    """Delays the kube adapter asked for (recorded, never slept)."""
    return []


@pytest.fixture
def kube(kubeconfig: Path, sleeps: list[float]) -> Iterator[KubeCluster]:
    cluster = KubeCluster.from_kubeconfig(
        kubeconfig,
        retry=RetryPolicy(attempts=3, base_delay_seconds=0.5, max_delay_seconds=5),
        sleep=sleeps.append,
        poll_seconds=0.05,
    )
    try:
        yield cluster
    finally:
        cluster.close()


@pytest.fixture(params=["fake", "kube"])
def cluster(request: pytest.FixtureRequest) -> Any:
    """The Cluster contract's two implementations."""
    if request.param == "fake":
        return FakeCluster()
    return request.getfixturevalue("kube")


@pytest.fixture
def chart() -> Callable[[str], ChartRef]:
    """The sandbox tensor-fusion chart of a version (examples/charts), as a local ChartRef."""

    def at(version: str) -> ChartRef:
        path = EXAMPLE_CHARTS / f"tensor-fusion-{version}"
        if not (path / "Chart.yaml").is_file():
            pytest.skip(f"examples/charts/tensor-fusion-{version} is absent")
        return ChartRef(path=str(path))

    return at


@pytest.fixture(params=["helm3", "helm4"])
def helm_cli(
    request: pytest.FixtureRequest, binaries: dict[str, Path], kubeconfig: Path, tmp_path: Path
) -> HelmCli:
    """Real helm 3 and real helm 4 against the emulator."""
    return HelmCli(binaries[request.param], home=tmp_path / "helm-home", kubeconfig=kubeconfig)


@pytest.fixture(params=["fake", "helm3", "helm4"])
def helm(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    """The Helm contract's implementations: the fake, real helm 3, real helm 4."""
    if request.param == "fake":
        return FakeHelm(app_versions={"1.8.7": "2.17.0", "1.8.0": "2.16.3"})
    binaries: dict[str, Path] = request.getfixturevalue("binaries")
    kubeconfig: Path = request.getfixturevalue("kubeconfig")
    return HelmCli(binaries[request.param], home=tmp_path / "helm-home", kubeconfig=kubeconfig)


@pytest.fixture
def make_pending(helm: Any, request: pytest.FixtureRequest) -> Callable[[str, str], None]:
    """Leave the release's latest revision pending-upgrade, as a helm killed mid-upgrade does.

    For real helm this writes the next release Secret by hand in helm's storage format
    (Secret ``sh.helm.release.v1.<release>.v<N>``, labels name/owner/status/version,
    data.release = base64(gzip(JSON))): what helm writes before it starts applying.
    """
    if isinstance(helm, FakeHelm):
        return lambda release, namespace: helm.set_pending(release, namespace)
    kube: KubeCluster = request.getfixturevalue("kube")
    return lambda release, namespace: write_pending_release(kube, release, namespace)


def write_pending_release(kube: KubeCluster, release: str, namespace: str) -> None:
    secrets = kube.list("v1", "Secret", namespace, label_selector=f"owner=helm,name={release}")
    latest = max(secrets, key=lambda s: int(s["metadata"]["labels"]["version"]))
    encoded = base64.b64decode(latest["data"]["release"])
    record = json.loads(gzip.decompress(base64.b64decode(encoded)))
    revision = int(record["version"]) + 1
    record["version"] = revision
    record["info"]["status"] = "pending-upgrade"
    record["info"]["description"] = "Upgrade in progress (helm was killed)"
    packed = base64.b64encode(gzip.compress(json.dumps(record).encode())).decode()
    kube.create(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "type": "helm.sh/release.v1",
            "metadata": {
                "name": f"sh.helm.release.v1.{release}.v{revision}",
                "namespace": namespace,
                "labels": {
                    "name": release,
                    "owner": "helm",
                    "status": "pending-upgrade",
                    "version": str(revision),
                },
            },
            "data": {"release": base64.b64encode(packed.encode()).decode()},
        }
    )
