"""Real kubectl 1.33 against the emulator and the real control plane (``server``,
tests/kube_pods.py), with the real TensorFusion CRDs (F-facts: the chart's CRDs are applied
server-side before the helm upgrade, R-rules of the procedure). What reaches into the
emulator (its kubelet, its protobuf decoder) runs on the emulator alone."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from gitopsbot.sandbox.apiserver import ApiServer
from tests import kube_pods
from tests.kube_pods import EMULATOR_ONLY, ON_BOTH_SERVERS, KubeServer, running_pods

Run = Callable[..., subprocess.CompletedProcess[str]]  # the `run` fixture (conftest.py)

pytestmark = pytest.mark.slow

server = kube_pods.server  # the fixture


@pytest.fixture
def apiserver(server: KubeServer) -> ApiServer:
    """conftest.py's, made the emulator behind ``server`` (for ``@EMULATOR_ONLY`` tests)."""
    return server.api


@pytest.fixture
def kubeconfig(server: KubeServer) -> Path:
    """conftest.py's, made ``server``'s: ``run`` uses it, and its namespace is the test's."""
    return server.kubeconfig


CRD = "apiextensions.k8s.io/v1"
DEPLOYMENT = """
apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
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


@ON_BOTH_SERVERS
def test_real_crds_apply_wait_and_validate(
    server: KubeServer, run: Run, crds: Path, tmp_path: Path
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
    crd = server.get(CRD, "CustomResourceDefinition", None, "gpupools.tensor-fusion.ai")
    run("kubectl", "apply", "--server-side", "--force-conflicts", "-f", str(crds))
    again = server.get(CRD, "CustomResourceDefinition", None, "gpupools.tensor-fusion.ai")
    assert crd is not None and again is not None
    assert again["metadata"]["resourceVersion"] == crd["metadata"]["resourceVersion"]

    bad = tmp_path / "bad.json"
    bad.write_text(_pool("bad", 150))
    proc = run("kubectl", "apply", "--server-side", "-f", str(bad), check=False)
    assert proc.returncode != 0
    assert "batchPercentage" in proc.stderr and "less than or equal to 100" in proc.stderr
    assert server.get("tensor-fusion.ai/v1", "GPUPool", None, "bad") is None

    wrong_type = tmp_path / "wrong-type.json"
    wrong_type.write_text(_pool("wrong", "ten"))
    # Server-side apply fails on the type while building its typed patch (a 500, not 422).
    proc = run(
        "kubectl", "apply", "--server-side", "--validate=false", "-f", str(wrong_type), check=False
    )
    assert proc.returncode != 0, proc.stdout
    assert "batchPercentage: expected numeric (int or float), got string" in proc.stderr
    # A create validates: the 422 with the schema's words.
    proc = run("kubectl", "create", "--validate=false", "-f", str(wrong_type), check=False)
    assert proc.returncode != 0 and "must be of type integer" in proc.stderr

    good = tmp_path / "good.json"
    good.write_text(_pool("good", 10, unknown=True))
    # kubectl validates strictly by default; server-side apply refuses the unknown field even
    # when not strict (its typed patch knows no such field), a create prunes it.
    proc = run("kubectl", "apply", "--server-side", "-f", str(good), check=False)
    assert proc.returncode != 0 and "notAField" in proc.stderr
    proc = run(
        "kubectl", "apply", "--server-side", "--validate=false", "-f", str(good), check=False
    )
    assert proc.returncode != 0
    assert ".spec.notAField: field not declared in schema" in proc.stderr
    run("kubectl", "create", "--validate=false", "-f", str(good))
    pool = server.get("tensor-fusion.ai/v1", "GPUPool", None, "good")
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


@ON_BOTH_SERVERS
def test_rollout_restart_status_and_wait(server: KubeServer, run: Run, tmp_path: Path) -> None:
    ns = server.namespace
    manifest = tmp_path / "deploy.yaml"
    manifest.write_text(DEPLOYMENT)
    with running_pods(server):
        run("kubectl", "apply", "-f", str(manifest))
        run("kubectl", "rollout", "status", "deployment/web", "--timeout=30s")
        before = server.get("apps/v1", "Deployment", ns, "web")
        assert before is not None
        run("kubectl", "rollout", "restart", "deployment/web")
        after = server.get("apps/v1", "Deployment", ns, "web")
        assert after is not None
        assert after["metadata"]["generation"] == before["metadata"]["generation"] + 1
        annotations = after["spec"]["template"]["metadata"]["annotations"]
        assert "kubectl.kubernetes.io/restartedAt" in annotations
        assert after["spec"]["template"]["spec"]["containers"][0]["env"] == [
            {"name": "A", "value": "1"}
        ]
        out = run("kubectl", "rollout", "status", "deployment/web", "--timeout=30s").stdout
        assert "successfully rolled out" in out
        run("kubectl", "wait", "--for=condition=Available", "deployment/web", "--timeout=10s")
        table = run("kubectl", "get", "deployment", "web").stdout.split()
        assert table[:5] == ["NAME", "READY", "UP-TO-DATE", "AVAILABLE", "AGE"]
        assert table[5:9] == ["web", "2/2", "2", "2"]
        rs = json.loads(run("kubectl", "get", "rs", "-l", "app=web", "-o", "json").stdout)
        assert sorted(r["spec"]["replicas"] for r in rs["items"]) == [0, 2]  # old down, new up


@ON_BOTH_SERVERS
def test_rollout_status_waits_for_ready_replicas(
    server: KubeServer, run: Run, tmp_path: Path
) -> None:
    """Until the replicas are ready, ``rollout status`` waits. What makes them ready differs:
    on the emulator its kubelet hook leaves the Deployment alone and the test writes the
    status; on the real server no pod runs until ``running_pods`` runs them."""
    if server.emulator:
        server.emulator.kubelet.exclude("Deployment", server.namespace, "web")
    manifest = tmp_path / "deploy.yaml"
    manifest.write_text(DEPLOYMENT)
    run("kubectl", "apply", "-f", str(manifest))
    proc = run("kubectl", "rollout", "status", "deployment/web", "--timeout=2s", check=False)
    assert proc.returncode != 0 and "timed out waiting" in proc.stderr
    if server.emulator:
        store = server.emulator.store
        dep = store.get("apps/v1", "Deployment", server.namespace, "web")
        assert dep is not None
        dep["status"] = {
            "observedGeneration": dep["metadata"]["generation"],
            "replicas": 2,
            "updatedReplicas": 2,
            "readyReplicas": 2,
            "availableReplicas": 2,
        }
        store.update_status(dep)
        run("kubectl", "rollout", "status", "deployment/web", "--timeout=10s")
        return
    with running_pods(server):
        run("kubectl", "rollout", "status", "deployment/web", "--timeout=30s")


@ON_BOTH_SERVERS
def test_client_side_apply_then_migration_to_server_side_apply(
    server: KubeServer, run: Run, tmp_path: Path
) -> None:
    ns = server.namespace
    manifest = tmp_path / "deploy.yaml"
    manifest.write_text(
        DEPLOYMENT.replace(
            'env: [{name: A, value: "1"}]', 'env: [{name: A, value: "1"}, {name: B, value: "2"}]'
        )
    )
    run("kubectl", "apply", "-f", str(manifest))
    manifest.write_text(DEPLOYMENT)
    run("kubectl", "apply", "-f", str(manifest))
    dep = server.get("apps/v1", "Deployment", ns, "web")
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
    dep = server.get("apps/v1", "Deployment", ns, "web")
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


@ON_BOTH_SERVERS
def test_typed_create_sends_protobuf_secrets_and_configmaps(server: KubeServer, run: Run) -> None:
    ns = server.namespace
    run("kubectl", "create", "configmap", "c", "--from-literal=k=v", "-n", ns)
    run("kubectl", "create", "secret", "generic", "s", "--from-literal=token=canary-3141")
    cm = server.get("v1", "ConfigMap", ns, "c")
    secret = server.get("v1", "Secret", ns, "s")
    assert cm is not None and cm["data"] == {"k": "v"}
    assert secret is not None and secret["type"] == "Opaque"
    assert secret["data"] == {"token": "Y2FuYXJ5LTMxNDE="}


@EMULATOR_ONLY  # the emulator's protobuf decoder knows a few kinds; the real server all
def test_a_kind_whose_protobuf_the_emulator_does_not_decode(run: Run) -> None:
    # a clear 415 naming the kinds it does, not a crash (client-go has no JSON fallback for
    # request bodies)
    proc = run("kubectl", "create", "priorityclass", "p", "--value=5", check=False)
    assert proc.returncode != 0 and "decodes protobuf only for" in proc.stderr
    assert "'PriorityClass'" in proc.stderr


@ON_BOTH_SERVERS
def test_imperative_create_of_namespace_deployment_serviceaccount_job(
    server: KubeServer, run: Run
) -> None:
    # kubectl 1.33's typed clients send these as protobuf (k8s\0 + runtime.Unknown). The
    # namespace is cluster-scoped, shared on the real server: named after the test's own.
    team = f"{server.namespace}-team-a"
    run("kubectl", "create", "namespace", team)
    try:
        _create_and_read_back(server, run, team)
    finally:
        run("kubectl", "delete", "namespace", team, "--wait=false")


def _create_and_read_back(server: KubeServer, run: Run, team: str) -> None:
    run(
        "kubectl",
        "create",
        "deployment",
        "web",
        "--image=nginx:1.27",
        "--replicas=0",
        "--port=8080",
        "-n",
        team,
    )
    run("kubectl", "create", "serviceaccount", "robot", "-n", team)
    run("kubectl", "create", "job", "once", "--image=busybox", "-n", team, "--", "echo", "hi")

    ns = server.get("v1", "Namespace", None, team)
    assert ns is not None and ns["metadata"]["name"] == team
    dep = server.get("apps/v1", "Deployment", team, "web")
    assert dep is not None
    assert dep["spec"]["replicas"] == 0  # a pointer field: zero kept, not defaulted to 1
    assert dep["spec"]["selector"] == {"matchLabels": {"app": "web"}}
    (container,) = dep["spec"]["template"]["spec"]["containers"]
    assert container["image"] == "nginx:1.27" and container["name"] == "nginx"
    assert [p["containerPort"] for p in container["ports"]] == [8080]
    # The real server defaults built-in kinds' fields; the emulator does not (sandbox.md).
    protocols = [p.get("protocol") for p in container["ports"]]
    assert protocols == (["TCP"] if server.emulator is None else [None])
    assert dep["spec"]["template"]["metadata"]["labels"] == {"app": "web"}
    sa = server.get("v1", "ServiceAccount", team, "robot")
    assert sa is not None and sa["metadata"]["namespace"] == team
    job = server.get("batch/v1", "Job", team, "once")
    assert job is not None
    (jc,) = job["spec"]["template"]["spec"]["containers"]
    assert jc["command"] == ["echo", "hi"] and jc["image"] == "busybox"
    assert job["spec"]["template"]["spec"]["restartPolicy"] == "Never"
    # and kubectl reads them back
    out = run("kubectl", "get", "deployment,serviceaccount,job", "-n", team).stdout
    assert (
        "deployment.apps/web" in out and "serviceaccount/robot" in out and "job.batch/once" in out
    )
