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
    # Re-applying the same CRDs changes nothing (not even the resourceVersion).
    crd = apiserver.store.get(
        "apiextensions.k8s.io/v1", "CustomResourceDefinition", None, "gpupools.tensor-fusion.ai"
    )
    run("kubectl", "apply", "--server-side", "--force-conflicts", "-f", str(crds))
    again = apiserver.store.get(
        "apiextensions.k8s.io/v1", "CustomResourceDefinition", None, "gpupools.tensor-fusion.ai"
    )
    assert crd is not None and again is not None
    assert again["metadata"]["resourceVersion"] == crd["metadata"]["resourceVersion"]

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

    # kubectl get prints the CRD's additionalPrinterColumns (server-side Table)
    from ruamel.yaml import YAML

    crd_doc = YAML(typ="safe").load((crds / "tensor-fusion.ai_gpupools.yaml").read_text())
    columns = [
        c["name"].upper()
        for c in crd_doc["spec"]["versions"][0].get("additionalPrinterColumns", [])
    ]
    header = run("kubectl", "get", "gpupools").stdout.splitlines()[0]
    assert header.startswith("NAME") and all(c in header for c in columns), header


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
    table = run("kubectl", "get", "deployment", "web").stdout.split()
    assert table[:5] == ["NAME", "READY", "UP-TO-DATE", "AVAILABLE", "AGE"]
    assert table[5:9] == ["web", "2/2", "2", "2"]
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


def test_client_side_apply_then_migration_to_server_side_apply(
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
    # Moving to server-side apply takes over the client-side fields without conflicts
    # (kubectl's managedFields migration plus the server's last-applied rule) ...
    manifest.write_text(
        DEPLOYMENT.replace("nginx:1", "nginx:2").replace(
            'env: [{name: A, value: "1"}]', 'env: [{name: C, value: "3"}]'
        )
    )
    run("kubectl", "apply", "--server-side", "-f", str(manifest))
    dep = apiserver.store.get("apps/v1", "Deployment", "default", "web")
    assert dep is not None
    container = dep["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == "nginx:2"
    assert container["env"] == [{"name": "C", "value": "3"}]  # A was applied before: removed
    managers = {(m["manager"], m["operation"]) for m in dep["metadata"]["managedFields"]}
    assert ("kubectl", "Apply") in managers
    assert ("kubectl-client-side-apply", "Update") not in managers
    # ... after which another server-side applier does conflict.
    manifest.write_text(DEPLOYMENT.replace("nginx:1", "nginx:3"))
    proc = run(
        "kubectl",
        "apply",
        "--server-side",
        "--field-manager=other",
        "-f",
        str(manifest),
        check=False,
    )
    assert proc.returncode != 0 and 'conflict with "kubectl"' in proc.stderr
    out = run("kubectl", "get", "all").stdout
    assert "deployment.apps/web" in out


def test_typed_create_sends_protobuf_secrets_and_configmaps(apiserver: ApiServer, run: Run) -> None:
    run("kubectl", "create", "configmap", "c", "--from-literal=k=v", "-n", "kube-system")
    run("kubectl", "create", "secret", "generic", "s", "--from-literal=token=canary-3141")
    cm = apiserver.store.get("v1", "ConfigMap", "kube-system", "c")
    secret = apiserver.store.get("v1", "Secret", "default", "s")
    assert cm is not None and cm["data"] == {"k": "v"}
    assert secret is not None and secret["type"] == "Opaque"
    assert secret["data"] == {"token": "Y2FuYXJ5LTMxNDE="}
    # a kind whose protobuf the emulator does not decode: a clear 415 naming the kinds it
    # does, not a crash (client-go has no JSON fallback for request bodies)
    proc = run("kubectl", "create", "priorityclass", "p", "--value=5", check=False)
    assert proc.returncode != 0 and "decodes protobuf only for" in proc.stderr
    assert "'PriorityClass'" in proc.stderr


def test_imperative_create_of_namespace_deployment_serviceaccount_job(
    apiserver: ApiServer, run: Run
) -> None:
    # kubectl 1.33's typed clients send these as protobuf (k8s\0 + runtime.Unknown)
    run("kubectl", "create", "namespace", "team-a")
    run(
        "kubectl",
        "create",
        "deployment",
        "web",
        "--image=nginx:1.27",
        "--replicas=0",
        "--port=8080",
        "-n",
        "team-a",
    )
    run("kubectl", "create", "serviceaccount", "robot", "-n", "team-a")
    run("kubectl", "create", "job", "once", "--image=busybox", "-n", "team-a", "--", "echo", "hi")

    ns = apiserver.store.get("v1", "Namespace", None, "team-a")
    assert ns is not None and ns["metadata"]["name"] == "team-a"
    dep = apiserver.store.get("apps/v1", "Deployment", "team-a", "web")
    assert dep is not None
    assert dep["spec"]["replicas"] == 0  # a pointer field: zero kept, not defaulted to 1
    assert dep["spec"]["selector"] == {"matchLabels": {"app": "web"}}
    (container,) = dep["spec"]["template"]["spec"]["containers"]
    assert container["image"] == "nginx:1.27" and container["name"] == "nginx"
    assert container["ports"] == [{"containerPort": 8080}]
    assert dep["spec"]["template"]["metadata"] == {"labels": {"app": "web"}}
    sa = apiserver.store.get("v1", "ServiceAccount", "team-a", "robot")
    assert sa is not None and sa["metadata"]["namespace"] == "team-a"
    job = apiserver.store.get("batch/v1", "Job", "team-a", "once")
    assert job is not None
    (jc,) = job["spec"]["template"]["spec"]["containers"]
    assert jc["command"] == ["echo", "hi"] and jc["image"] == "busybox"
    assert job["spec"]["template"]["spec"]["restartPolicy"] == "Never"
    # and kubectl reads them back
    out = run("kubectl", "get", "deployment,serviceaccount,job", "-n", "team-a").stdout
    assert (
        "deployment.apps/web" in out and "serviceaccount/robot" in out and "job.batch/once" in out
    )
