"""Real kubectl 1.33 against the emulator, with the real TensorFusion CRDs (F-facts: the
chart's CRDs are applied server-side before the helm upgrade, R-rules of the procedure)."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from gitopsbot.sandbox.apiserver import ApiServer

Run = Callable[..., subprocess.CompletedProcess[str]]  # the `run` fixture (conftest.py)

pytestmark = pytest.mark.slow

DEPLOYMENT = """
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: default}
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers:
        - name: web
          image: nginx:1
          env: [{name: A, value: "1"}]
"""


@pytest.fixture
def crds(tensor_fusion: Path) -> Path:
    path = tensor_fusion / "chart-1.8.7" / "crds"
    if not path.is_dir():
        pytest.skip(f"{path} is absent: real CRDs not available here")
    return path


def _pool(name: str, batch_percentage: object, *, unknown: bool = False) -> str:
    spec: dict[str, object] = {
        "nodeManagerConfig": {
            "provisioningMode": "AutoSelect",
            "nodePoolRollingUpdatePolicy": {
                "autoUpdateHypervisor": True,
                "batchPercentage": batch_percentage,
            },
        },
    }
    if unknown:
        spec["notAField"] = "pruned"
    return json.dumps(
        {
            "apiVersion": "tensor-fusion.ai/v1",
            "kind": "GPUPool",
            "metadata": {"name": name},
            "spec": spec,
        }
    )


def test_real_crds_apply_wait_and_validate(
    apiserver: ApiServer, run: Run, crds: Path, tmp_path: Path
) -> None:
    out = run("kubectl", "apply", "--server-side", "--force-conflicts", "-f", str(crds)).stdout
    assert out.count("serverside-applied") == len(list(crds.glob("*.yaml")))
    run(
        "kubectl",
        "wait",
        "--for=condition=Established",
        "crd/gpupools.tensor-fusion.ai",
        "--timeout=10s",
    )
    names = run("kubectl", "get", "crd", "-o", "name").stdout.split()
    assert (
        "customresourcedefinition.apiextensions.k8s.io/tensorfusionclusters.tensor-fusion.ai"
        in (names)
    )
    # Re-applying the same CRDs changes nothing (no new generation).
    crd = apiserver.store.get(
        "apiextensions.k8s.io/v1", "CustomResourceDefinition", None, "gpupools.tensor-fusion.ai"
    )
    run("kubectl", "apply", "--server-side", "--force-conflicts", "-f", str(crds))
    again = apiserver.store.get(
        "apiextensions.k8s.io/v1", "CustomResourceDefinition", None, "gpupools.tensor-fusion.ai"
    )
    assert crd is not None and again is not None
    assert again["metadata"]["generation"] == crd["metadata"]["generation"]

    bad = tmp_path / "bad.json"
    bad.write_text(_pool("bad", 150))
    proc = run("kubectl", "apply", "--server-side", "-f", str(bad), check=False)
    assert proc.returncode != 0
    assert "batchPercentage" in proc.stderr and "less than or equal to 100" in proc.stderr
    assert apiserver.store.get("tensor-fusion.ai/v1", "GPUPool", None, "bad") is None

    wrong_type = tmp_path / "wrong-type.json"
    wrong_type.write_text(_pool("wrong", "ten"))
    proc = run(
        "kubectl", "apply", "--server-side", "--validate=false", "-f", str(wrong_type), check=False
    )
    assert proc.returncode != 0 and "must be of type integer" in proc.stderr

    good = tmp_path / "good.json"
    good.write_text(_pool("good", 10, unknown=True))
    # kubectl validates strictly by default; the unknown field is then pruned when not strict
    proc = run("kubectl", "apply", "--server-side", "-f", str(good), check=False)
    assert proc.returncode != 0 and "notAField" in proc.stderr
    run("kubectl", "apply", "--server-side", "--validate=false", "-f", str(good))
    pool = apiserver.store.get("tensor-fusion.ai/v1", "GPUPool", None, "good")
    assert pool is not None
    policy = pool["spec"]["nodeManagerConfig"]["nodePoolRollingUpdatePolicy"]
    assert policy["batchPercentage"] == 10
    assert policy["batchInterval"] == "1s" and policy["maxDuration"] == "10m"  # CRD defaults
    assert "notAField" not in pool["spec"]  # pruned, as the real server does


def test_rollout_restart_status_and_wait(apiserver: ApiServer, run: Run, tmp_path: Path) -> None:
    manifest = tmp_path / "deploy.yaml"
    manifest.write_text(DEPLOYMENT)
    run("kubectl", "apply", "-f", str(manifest))
    run("kubectl", "rollout", "status", "deployment/web", "--timeout=10s")
    before = apiserver.store.get("apps/v1", "Deployment", "default", "web")
    assert before is not None
    run("kubectl", "rollout", "restart", "deployment/web")
    after = apiserver.store.get("apps/v1", "Deployment", "default", "web")
    assert after is not None
    assert after["metadata"]["generation"] == before["metadata"]["generation"] + 1
    assert (
        "kubectl.kubernetes.io/restartedAt" in after["spec"]["template"]["metadata"]["annotations"]
    )
    assert after["spec"]["template"]["spec"]["containers"][0]["env"] == [
        {"name": "A", "value": "1"}
    ]
    out = run("kubectl", "rollout", "status", "deployment/web", "--timeout=10s").stdout
    assert "successfully rolled out" in out
    run("kubectl", "wait", "--for=condition=Available", "deployment/web", "--timeout=10s")
    rs = json.loads(run("kubectl", "get", "rs", "-l", "app=web", "-o", "json").stdout)["items"]
    assert sorted(r["spec"]["replicas"] for r in rs) == [0, 2]  # old scaled down, new up


def test_rollout_status_waits_for_the_simulator(
    apiserver: ApiServer, run: Run, tmp_path: Path
) -> None:
    apiserver.kubelet.exclude("Deployment", "default", "web")
    manifest = tmp_path / "deploy.yaml"
    manifest.write_text(DEPLOYMENT)
    run("kubectl", "apply", "-f", str(manifest))
    proc = run("kubectl", "rollout", "status", "deployment/web", "--timeout=2s", check=False)
    assert proc.returncode != 0
    dep = apiserver.store.get("apps/v1", "Deployment", "default", "web")
    assert dep is not None
    dep["status"] = {
        "observedGeneration": dep["metadata"]["generation"],
        "replicas": 2,
        "updatedReplicas": 2,
        "readyReplicas": 2,
        "availableReplicas": 2,
    }
    apiserver.store.update_status(dep)
    run("kubectl", "rollout", "status", "deployment/web", "--timeout=10s")


def test_client_side_apply_removes_dropped_list_items_and_get_all(
    apiserver: ApiServer, run: Run, tmp_path: Path
) -> None:
    manifest = tmp_path / "deploy.yaml"
    manifest.write_text(
        DEPLOYMENT.replace(
            'env: [{name: A, value: "1"}]', 'env: [{name: A, value: "1"}, {name: B, value: "2"}]'
        )
    )
    run("kubectl", "apply", "-f", str(manifest))
    manifest.write_text(DEPLOYMENT)
    run("kubectl", "apply", "-f", str(manifest))
    dep = apiserver.store.get("apps/v1", "Deployment", "default", "web")
    assert dep is not None
    assert dep["spec"]["template"]["spec"]["containers"][0]["env"] == [{"name": "A", "value": "1"}]
    # and the migration of the same object to server-side apply
    run("kubectl", "apply", "--server-side", "-f", str(manifest))
    out = run("kubectl", "get", "all").stdout
    assert "deployment.apps/web" in out
