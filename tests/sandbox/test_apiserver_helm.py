"""Real helm 4.1 and helm 3.18 against the emulator and the real control plane (``server``,
tests/kube_pods.py): the release lifecycle the bot drives. On the real server pods run only
inside ``running_pods`` (no scheduler or kubelet there); on the emulator its kubelet runs them."""

from __future__ import annotations

import base64
import gzip
import json
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from gitopsbot.sandbox.apiserver import ApiServer
from tests import kube_pods
from tests.kube_pods import ON_BOTH_SERVERS, KubeServer, running_pods

CHARTS = Path(__file__).parent / "charts"
CHART = CHARTS / "widget"
V2 = CHARTS / "widget-values-v2.yaml"
CRD = "apiextensions.k8s.io/v1"

Run = Callable[..., subprocess.CompletedProcess[str]]  # the `run` fixture (conftest.py)

pytestmark = [pytest.mark.slow, ON_BOTH_SERVERS]

server = kube_pods.server  # the fixture


@pytest.fixture
def apiserver(server: KubeServer) -> ApiServer:
    """conftest.py's, made the emulator behind ``server`` (its own tests say so)."""
    return server.api


@pytest.fixture
def kubeconfig(server: KubeServer) -> Path:
    """conftest.py's, made ``server``'s: ``run`` uses it, and its namespace is the test's."""
    return server.kubeconfig


def _release(server: KubeServer, name: str, revision: int) -> dict[str, object]:
    secret = server.get("v1", "Secret", server.namespace, f"sh.helm.release.v1.{name}.v{revision}")
    assert secret is not None, f"no release Secret for revision {revision}"
    raw = base64.b64decode(base64.b64decode(secret["data"]["release"]))
    return json.loads(gzip.decompress(raw))  # type: ignore[no-any-return]


def _state(server: KubeServer) -> tuple[dict[str, str], list[dict[str, str]], int]:
    cm = server.get("v1", "ConfigMap", server.namespace, "w-config")
    dep = server.get("apps/v1", "Deployment", server.namespace, "w-app")
    assert cm is not None and dep is not None
    env = dep["spec"]["template"]["spec"]["containers"][0]["env"]
    return cm["data"], env, dep["spec"]["replicas"]


@pytest.mark.parametrize(
    ("tool", "flags"),
    [
        ("helm4", []),
        ("helm4", ["--wait", "--timeout", "30s"]),
        ("helm4", ["--server-side=false"]),
        ("helm3", []),
        ("helm3", ["--wait", "--timeout", "30s"]),
    ],
    ids=["helm4", "helm4-wait", "helm4-client-side", "helm3", "helm3-wait"],
)
def test_release_lifecycle(server: KubeServer, run: Run, tool: str, flags: list[str]) -> None:
    with running_pods(server):  # for --wait
        _release_lifecycle(server, run, tool, flags)


def _release_lifecycle(server: KubeServer, run: Run, tool: str, flags: list[str]) -> None:
    ns = server.namespace
    run(tool, "install", "w", str(CHART), *flags)
    crd = server.get(CRD, "CustomResourceDefinition", None, "widgets.example.com")
    assert crd is not None, "the chart's crds/ were not installed"
    widget = server.get("example.com/v1", "Widget", ns, "w-widget")
    assert widget is not None and widget["spec"] == {"color": "blue", "size": 3}
    assert _state(server) == (
        {"color": "blue"},
        [{"name": "FEATURE_X", "value": "on"}, {"name": "LOG_LEVEL", "value": "info"}],
        1,
    )
    assert _release(server, "w", 1)["info"]["status"] == "deployed"  # type: ignore[index]

    run(tool, "upgrade", "w", str(CHART), "-f", str(V2), *flags)
    assert _state(server) == (
        {"color": "green", "extra": "added in v2"},
        [{"name": "FEATURE_X", "value": "on"}, {"name": "LOG_LEVEL", "value": "debug"}],
        3,
    )
    history = run(tool, "history", "w", "-o", "json").stdout
    assert [(h["revision"], h["status"]) for h in json.loads(history)] == [
        (1, "superseded"),
        (2, "deployed"),
    ]
    values = json.loads(run(tool, "get", "values", "w", "-o", "json").stdout)
    assert values["color"] == "green" and values["replicas"] == 3

    run(tool, "rollback", "w", "1", *[f for f in flags if f != "--server-side=false"])
    # the key v2 added is gone again and the env entry is restored
    data, env, replicas = _state(server)
    assert data == {"color": "blue"} and replicas == 1
    assert {"name": "LOG_LEVEL", "value": "info"} in env
    assert _release(server, "w", 3)["info"]["status"] == "deployed"  # type: ignore[index]

    run(tool, "uninstall", "w")
    assert server.get("v1", "ConfigMap", ns, "w-config") is None
    assert server.get("apps/v1", "Deployment", ns, "w-app") is None
    assert server.list("v1", "Secret", ns, "owner=helm") == []
    # CRDs from crds/ outlive the release, as with a real cluster
    assert server.get(CRD, "CustomResourceDefinition", None, "widgets.example.com")


def test_helm4_wait_fails_when_the_deployment_never_becomes_ready(
    server: KubeServer, run: Run
) -> None:
    # The emulator's hook: its kubelet leaves this Deployment alone, so it never gets ready;
    # on the real server no pod runs outside ``running_pods``.
    if server.emulator:
        server.emulator.kubelet.exclude("Deployment", server.namespace, "w-app")
    proc = run("helm4", "install", "w", str(CHART), "--wait", "--timeout", "3s", check=False)
    assert proc.returncode != 0
    assert "w-app" in proc.stderr or "deadline" in proc.stderr


def test_helm4_upgrade_conflicts_with_another_field_manager(
    server: KubeServer, run: Run, tmp_path: Path
) -> None:
    run("helm4", "install", "w", str(CHART))
    # Someone takes over the image with kubectl's server-side apply --force-conflicts ...
    manifest = tmp_path / "image.yaml"
    manifest.write_text(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: w-app}\n"
        "spec:\n  selector: {matchLabels: {app: w}}\n  template:\n"
        "    metadata: {labels: {app: w}}\n"
        "    spec: {containers: [{name: app, image: 'registry.example/hotfix:9'}]}\n"
    )
    run("kubectl", "apply", "--server-side", "--force-conflicts", "-f", str(manifest))
    # ... so helm's next apply of a different image conflicts, as on a real cluster,
    proc = run("helm4", "upgrade", "w", str(CHART), "-f", str(V2), check=False)
    assert proc.returncode != 0
    assert 'conflict with "kubectl"' in proc.stderr
    assert "image" in proc.stderr
    # and --force-conflicts takes the field back.
    run("helm4", "upgrade", "w", str(CHART), "-f", str(V2), "--force-conflicts")
    dep = server.get("apps/v1", "Deployment", server.namespace, "w-app")
    assert dep is not None
    assert dep["spec"]["template"]["spec"]["containers"][0]["image"] == (
        "registry.example/widget:2.0.0"
    )


@pytest.mark.parametrize("tool", ["helm4", "helm3"])
def test_chart_carrying_the_real_crds(
    server: KubeServer, run: Run, tool: str, tensor_fusion: Path, tmp_path: Path
) -> None:
    """Large CRDs (hundreds of KB in crds/ and in the release Secret) install and upgrade."""
    crds = tensor_fusion / "chart-1.8.7" / "crds"
    if not crds.is_dir():
        pytest.skip(f"{crds} is absent: real CRDs not available here")
    chart = tmp_path / "big"
    shutil.copytree(CHART, chart)
    for crd in crds.glob("*.yaml"):
        shutil.copy(crd, chart / "crds" / crd.name)
    run(tool, "install", "big", str(chart))
    names = {c["metadata"]["name"] for c in server.list(CRD, "CustomResourceDefinition")}
    assert {f"{p.stem.split('_', 1)[1]}.tensor-fusion.ai" for p in crds.glob("*.yaml")} <= names
    release = server.get("v1", "Secret", server.namespace, "sh.helm.release.v1.big.v1")
    assert release is not None and len(release["data"]["release"]) > 10_000
    run(tool, "upgrade", "big", str(chart), "--set", "color=red")
    widget = server.get("example.com/v1", "Widget", server.namespace, "big-widget")
    assert widget is not None and widget["spec"]["color"] == "red"


@pytest.mark.parametrize("tool", ["helm4", "helm3"])
def test_hook_jobs_complete(server: KubeServer, run: Run, tool: str) -> None:
    # helm waits for a hook Job to complete; the emulator's kubelet completes Jobs at once,
    # on the real server the Job controller does once running_pods has its pod succeed.
    with running_pods(server):
        run(tool, "install", "w", str(CHART), "--set", "hookJob=true", "--timeout", "30s")
        first = server.get("batch/v1", "Job", server.namespace, "w-pre-upgrade")
        run(tool, "upgrade", "w", str(CHART), "--set", "hookJob=true", "--timeout", "30s")
    job = server.get("batch/v1", "Job", server.namespace, "w-pre-upgrade")
    assert first is not None and job is not None
    assert {c["type"] for c in job["status"]["conditions"]} >= {"Complete"}
    # created once per install and once per upgrade (before-hook-creation)
    assert job["metadata"]["uid"] != first["metadata"]["uid"]
