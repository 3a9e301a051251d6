"""Fixtures for the cluster-facing adapters: the API server (``server``: the emulator and the
real control plane, tests/kube_pods.py), its kubeconfig and namespace, the kube client
adapter, HelmCli over real helm 3 and helm 4, the fakes, the sandbox chart, and a way to
leave a Helm release in pending-* (as a helm killed mid-upgrade does)."""

from __future__ import annotations

import base64
import gzip
import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from gitopsbot.adapters.helm import HelmCli
from gitopsbot.adapters.kube import KubeCluster, RetryPolicy
from gitopsbot.ports.helm import ChartRef
from gitopsbot.sandbox.apiserver import ApiServer
from gitopsbot.testing import FakeCluster, FakeHelm
from tests import kube_pods
from tests.kube_pods import KubeServer, open_server

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE_CHARTS = ROOT / "examples" / "charts"


server = kube_pods.server  # the fixture: the emulator unless a test asks for both servers


@pytest.fixture
def api(server: KubeServer) -> ApiServer:
    """The emulator behind ``server``: for tests marked ``@EMULATOR_ONLY``."""
    return server.api


@pytest.fixture
def kubeconfig(server: KubeServer) -> Path:
    return server.kubeconfig


@pytest.fixture
def ns(server: KubeServer) -> str:
    """The test's namespace: "default" on the emulator, a fresh one on the real server."""
    return server.namespace


@pytest.fixture
def sleeps() -> list[float]:
    """Delays the kube adapter asked for (recorded, never slept)."""
    return []


def _kube(kubeconfig: Path, sleeps: list[float]) -> KubeCluster:
    return KubeCluster.from_kubeconfig(
        kubeconfig,
        retry=RetryPolicy(attempts=3, base_delay_seconds=0.5, max_delay_seconds=5),
        sleep=sleeps.append,
        poll_seconds=0.05,
    )


@pytest.fixture
def kube(kubeconfig: Path, sleeps: list[float]) -> Iterator[KubeCluster]:
    cluster = _kube(kubeconfig, sleeps)
    try:
        yield cluster
    finally:
        cluster.close()


@dataclass
class Target:
    """An implementation of a port under contract test, and where it works: the fake alone
    (namespace "default"), or a real adapter on one of the two servers."""

    impl: Any
    namespace: str
    server: KubeServer | None = None
    kube: KubeCluster | None = None  # on the same server, for what the test sets up


@contextmanager
def _on_server(
    which: str, request: pytest.FixtureRequest, tmp_path: Path, sleeps: list[float]
) -> Iterator[tuple[KubeServer, KubeCluster]]:
    with open_server(which, request, tmp_path) as opened:
        kube = _kube(opened.kubeconfig, sleeps)
        try:
            yield opened, kube
        finally:
            kube.close()


# The fake runs once; the real adapters on each server (not a cross product with the fake).
@pytest.fixture(
    params=["fake", "kube-emulator", pytest.param("kube-realkube", marks=pytest.mark.realkube)]
)
def cluster_target(
    request: pytest.FixtureRequest, tmp_path: Path, sleeps: list[float]
) -> Iterator[Target]:
    if request.param == "fake":
        yield Target(FakeCluster(), "default")
        return
    with _on_server(request.param.removeprefix("kube-"), request, tmp_path, sleeps) as (s, k):
        yield Target(k, s.namespace, s, k)


@pytest.fixture
def cluster(cluster_target: Target) -> Any:
    """The Cluster contract's implementations: the fake, and KubeCluster on each server."""
    return cluster_target.impl


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


HELMS = [
    "fake",
    "helm3-emulator",
    "helm4-emulator",
    pytest.param("helm3-realkube", marks=pytest.mark.realkube),
    pytest.param("helm4-realkube", marks=pytest.mark.realkube),
]


@pytest.fixture(params=HELMS)
def helm_target(
    request: pytest.FixtureRequest, tmp_path: Path, sleeps: list[float]
) -> Iterator[Target]:
    """The Helm contract's implementations: the fake; real helm 3 and 4 on each server."""
    if request.param == "fake":
        yield Target(FakeHelm(app_versions={"1.8.7": "2.17.0", "1.8.0": "2.16.3"}), "default")
        return
    tool, which = request.param.split("-")
    binaries: dict[str, Path] = request.getfixturevalue("binaries")
    with _on_server(which, request, tmp_path, sleeps) as (s, k):
        cli = HelmCli(binaries[tool], home=tmp_path / "helm-home", kubeconfig=s.kubeconfig)
        yield Target(cli, s.namespace, s, k)


@pytest.fixture
def helm(helm_target: Target) -> Any:
    return helm_target.impl


@pytest.fixture
def make_pending(helm_target: Target) -> Callable[[str, str], None]:
    """Leave the release's latest revision pending-upgrade, as a helm killed mid-upgrade does.

    For real helm this writes the next release Secret by hand in helm's storage format
    (Secret ``sh.helm.release.v1.<release>.v<N>``, labels name/owner/status/version,
    data.release = base64(gzip(JSON))): what helm writes before it starts applying.
    """
    helm, kube = helm_target.impl, helm_target.kube
    if isinstance(helm, FakeHelm):
        return lambda release, namespace: helm.set_pending(release, namespace)
    assert kube is not None
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
