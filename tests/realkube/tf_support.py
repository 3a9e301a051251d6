"""Shared pieces of the realkube tests that run the bot's adapters against the real server:
the bot's RBAC rules (deploy/rbac/rules.yaml) bound to a ServiceAccount, its kubeconfig, the
adapters over it, a one-cluster fleet for the example chart, and the real chart's CRDs."""

from __future__ import annotations

import copy
import shutil
import time
import urllib.error
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from gitopsbot.adapters.helm import HelmCli
from gitopsbot.adapters.kube import KubeCluster, RetryPolicy
from gitopsbot.adapters.kubectl import KubectlCrdApplier
from gitopsbot.adapters.localfiles import DirectoryTree
from gitopsbot.core.fleet.model import ClusterSpec
from gitopsbot.fleetrepo import load_cluster
from gitopsbot.ports.helm import ChartRef
from gitopsbot.sandbox.chartrepo import ChartRepo

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "deploy" / "rbac" / "rules.yaml"
CHART_REPO = ROOT / "examples" / "charts" / "repo"
EXAMPLE_CHART = ROOT / "examples" / "charts" / "tensor-fusion-1.8.7"
TF = "tensor-fusion.ai/v1"
RBAC = "/apis/rbac.authorization.k8s.io/v1"
SA = "gitopsbot"
CLUSTER = "lab"
RELEASE = "tf"
HYPERVISOR = "tensorfusion/tensor-fusion-hypervisor:2.15.0"


def load_rules() -> tuple[dict[str, Any], dict[str, Any]]:
    """(ClusterRole, Role) of deploy/rbac/rules.yaml, as written there."""
    docs = [d for d in yaml.safe_load_all(RULES.read_text()) if d]
    by_kind = {d["kind"]: d for d in docs}
    return by_kind["ClusterRole"], by_kind["Role"]


def rule_verbs(role: Mapping[str, Any]) -> list[tuple[int, str, str]]:
    """(rule index, resource, verb) for every verb of every rule."""
    return [
        (i, resource, verb)
        for i, rule in enumerate(role["rules"])
        for resource in rule["resources"]
        for verb in rule["verbs"]
    ]


def without(role: Mapping[str, Any], index: int, resource: str, verb: str) -> dict[str, Any]:
    """``role`` with ``verb`` on ``resource`` taken out of rule ``index`` (the rule's other
    resources keep the verb; a rule left with nothing is dropped)."""
    out = copy.deepcopy(dict(role))
    rule = out["rules"][index]
    rest = [r for r in rule["resources"] if r != resource]
    verbs = [v for v in rule["verbs"] if v != verb]
    replacement = []
    if verbs:
        replacement.append({**rule, "resources": [resource], "verbs": verbs})
    if rest:
        replacement.append({**rule, "resources": rest})
    out["rules"][index : index + 1] = replacement
    return out


class RealCrdsHelm(HelmCli):
    """HelmCli whose ``pull`` (used by the crds step only) hands over the real chart of that
    version from ../shared (its crds/ are the product's; the example chart's are a reduced
    copy). Everything else is real helm against the example chart."""

    real_charts: Path | None = None

    def pull(self, chart: ChartRef, version: str, dest: Path) -> Path:
        if self.real_charts is None:
            return super().pull(chart, version, dest)
        target = dest / "tensor-fusion"
        shutil.copytree(self.real_charts / f"chart-{version}", target, dirs_exist_ok=True)
        return target


@dataclass
class Bot:
    """The bot's adapters as ServiceAccount ``<ns>/gitopsbot``, bound to the given roles."""

    plane: Any
    namespace: str
    kubeconfig: Path
    kube: KubeCluster
    helm: RealCrdsHelm
    kubectl: KubectlCrdApplier

    def grant(self, cluster_role: Mapping[str, Any], role: Mapping[str, Any]) -> None:
        grant(self.plane, self.namespace, cluster_role, role)


def _put(plane: Any, collection: str, obj: Mapping[str, Any]) -> None:
    name = obj["metadata"]["name"]
    try:
        plane.request("PUT", f"{collection}/{name}", dict(obj))
    except urllib.error.HTTPError as e:
        if e.code != 404:
            raise
        plane.request("POST", collection, dict(obj))


def grant(
    plane: Any, namespace: str, cluster_role: Mapping[str, Any], role: Mapping[str, Any]
) -> None:
    """Bind exactly these rules to ``<namespace>/gitopsbot`` (the ClusterRole is named after
    the namespace: each test has its own), then wait until the authorizer applies them."""
    name = f"gitopsbot-{namespace}"
    subject = [{"kind": "ServiceAccount", "name": SA, "namespace": namespace}]
    cr = {**cluster_role, "metadata": {"name": name}}
    r = {**role, "metadata": {"name": SA, "namespace": namespace}}
    _put(plane, f"{RBAC}/clusterroles", cr)
    _put(
        plane,
        f"{RBAC}/clusterrolebindings",
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                        "name": name},
            "subjects": subject,
        },
    )  # fmt: skip
    _put(plane, f"{RBAC}/namespaces/{namespace}/roles", r)
    _put(
        plane,
        f"{RBAC}/namespaces/{namespace}/rolebindings",
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": SA, "namespace": namespace},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": SA},
            "subjects": subject,
        },
    )
    # The authorizer reads RBAC objects from an informer: wait until every granted verb is
    # allowed and nothing else of these rules is (a removed verb must be denied already).
    _settle(plane, namespace, cr["rules"], None)
    _settle(plane, namespace, r["rules"], namespace)


def _settle(plane: Any, namespace: str, rules: list[dict[str, Any]], scope: str | None) -> None:
    wanted = {
        (group, resource, verb, name)
        for rule in rules
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
        for name in rule.get("resourceNames") or [""]
    }
    deadline = time.monotonic() + 10
    pending = set(wanted)
    while pending:
        for group, resource, verb, name in sorted(pending):
            if allowed(plane, namespace, group, resource, verb, scope, name):
                pending.discard((group, resource, verb, name))
        if pending:
            assert time.monotonic() < deadline, f"RBAC never allowed {sorted(pending)}"
            time.sleep(0.05)


def allowed(
    plane: Any,
    namespace: str,
    group: str,
    resource: str,
    verb: str,
    scope: str | None,
    name: str = "",
) -> bool:
    """The server's SubjectAccessReview for the bot's ServiceAccount."""
    attributes = {"group": group, "resource": resource, "verb": verb}
    if scope:
        attributes["namespace"] = scope
    if name:
        attributes["name"] = name
    review = plane.request(
        "POST",
        "/apis/authorization.k8s.io/v1/subjectaccessreviews",
        {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": {
                "user": f"system:serviceaccount:{namespace}:{SA}",
                "groups": ["system:serviceaccounts", f"system:serviceaccounts:{namespace}",
                           "system:authenticated"],
                "resourceAttributes": attributes,
            },
        },
    )  # fmt: skip
    return bool(review["status"].get("allowed"))


def wait_denied(plane: Any, namespace: str, group: str, resource: str, verb: str,
                scope: str | None) -> None:  # fmt: skip
    deadline = time.monotonic() + 10
    while allowed(plane, namespace, group, resource, verb, scope):
        assert time.monotonic() < deadline, f"RBAC still allows {verb} {resource}"
        time.sleep(0.05)


@contextmanager
def bot_as_service_account(
    plane: Any, namespace: str, binaries: Mapping[str, Path], work: Path, *, helm: str = "helm4"
) -> Iterator[Bot]:
    """The adapters as the ServiceAccount, bound to deploy/rbac/rules.yaml."""
    cluster_role, role = load_rules()
    token = plane.service_account_token(namespace, SA)
    grant(plane, namespace, cluster_role, role)
    kubeconfig = plane.write_kubeconfig(work / "sa.kubeconfig", token=token, namespace=namespace)
    # Wired as app.executor_factory wires production: CRDs by kubectl, helm over the same
    # kubeconfig; no retries of our own (a refusal must show at once).
    kubectl = KubectlCrdApplier(
        binaries["kubectl"], home=work / "kubectl", kubeconfig=kubeconfig, retry_delays=()
    )
    kube = KubeCluster.from_kubeconfig(
        kubeconfig,
        retry=RetryPolicy(attempts=2, base_delay_seconds=0.1),
        poll_seconds=0.05,
        crd_applier=kubectl.apply_crds,
    )
    helm_cli = RealCrdsHelm(
        binaries[helm], home=work / "helm", kubeconfig=kubeconfig, retry_delays=()
    )
    try:
        yield Bot(plane, namespace, kubeconfig, kube, helm_cli, kubectl)
    finally:
        kube.close()


def real_crds(tensor_fusion: Path, version: str = "1.8.7") -> dict[str, str]:
    """The real chart's crds/ (file name → text), as the crds step hands them over."""
    crd_dir = tensor_fusion / f"chart-{version}" / "crds"
    return {p.name: p.read_text() for p in sorted(crd_dir.glob("*.yaml"))}


def crd_names(documents: Mapping[str, str]) -> list[str]:
    return sorted(
        str(d["metadata"]["name"])
        for text in documents.values()
        for d in yaml.safe_load_all(text)
        if d and d.get("kind") == "CustomResourceDefinition"
    )


def fleet_spec(root: Path, *, namespace: str, repo: ChartRepo | None, tfc: str,
               version: str = "1.8.7", credential: str = "") -> ClusterSpec:  # fmt: skip
    """One cluster ``lab``: the example chart as release ``tf`` in ``namespace``, its
    TensorFusionCluster named ``tfc`` (cluster-scoped: unique per test), pool ``shared``.
    ``credential``: a Secret in ``namespace`` whose key ``enrollToken`` becomes the agent's
    enroll token (the chart then renders its agent Secret)."""
    base = root / "clusters" / CLUSTER
    base.mkdir(parents=True, exist_ok=True)
    url = repo.url if repo is not None else "https://charts.example.invalid"
    (base / "release.yaml").write_text(
        f"chart:\n  repository: {url}\n  name: tensor-fusion\n  version: {version}\n"
        f"release:\n  name: {RELEASE}\n  namespace: {namespace}\nenvironment: staging\n"
    )
    agent = "agent:\n  agentId: lab-agent\n" if credential else ""
    (base / "values.yaml").write_text(
        f"cluster:\n  name: {tfc}\n  hypervisorImage: {HYPERVISOR}\n{agent}"
    )
    (base / "rollout.yaml").write_text(
        "order: [shared]\npools:\n  shared:\n    autoUpdateHypervisor: true\n"
        "    batchPercentage: 50\n    phases: [hypervisor]\n"
    )
    if credential:
        (base / "credentials.yaml").write_text(
            "secrets:\n  agent.enrollToken:\n    kubernetesSecret:\n"
            f"      name: {credential}\n      key: enrollToken\n      namespace: {namespace}\n"
        )
    return load_cluster(DirectoryTree(root), CLUSTER)


# -- the TensorFusion controller's part, played by the admin (there is no controller) ---------

GROUP_PATH = "/apis/tensor-fusion.ai/v1"


def _minimal(schema: Mapping[str, Any]) -> Any:
    """The smallest value the CRD's structural schema accepts (required fields only)."""
    if schema.get("x-kubernetes-int-or-string"):
        return 0
    if "enum" in schema:
        return schema["enum"][0]
    kind = schema.get("type")
    if kind == "object":
        props = schema.get("properties") or {}
        return {k: _minimal(props.get(k) or {}) for k in schema.get("required") or []}
    return {"array": [], "integer": 0, "number": 0, "boolean": False}.get(str(kind), "")


def _schema(plane: Any, plural: str) -> dict[str, Any]:
    crd = plane.request(
        "GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{plural}.tensor-fusion.ai"
    )
    props: dict[str, Any] = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]
    return props


def _with_status(plane: Any, path: str, plural: str, status: Mapping[str, Any]) -> None:
    obj = plane.request("GET", path)
    obj["status"] = {**_minimal(_schema(plane, plural)["status"]), **status}
    plane.request("PUT", f"{path}/status", obj)


def play_controller(plane: Any, namespace: str, tfc: str, pool: str = "shared") -> None:
    """What the TensorFusion controller and a kubelet would show for a healthy cluster of
    one GPU node: the TensorFusionCluster and its GPUPool Running, a Running GPUNode of the
    pool and its one hypervisor pod Running on the pool's image."""
    _with_status(plane, f"{GROUP_PATH}/tensorfusionclusters/{tfc}", "tensorfusionclusters",
                 {"phase": "Running"})  # fmt: skip
    gp, node = f"{tfc}-{pool}", f"node-{tfc}"
    # The Node itself: kube-controller-manager's pod GC deletes pods bound to a missing node.
    plane.request("POST", "/api/v1/nodes",
                  {"apiVersion": "v1", "kind": "Node", "metadata": {"name": node}})  # fmt: skip
    for plural, name, labels in (
        ("gpupools", gp, {}),
        ("gpunodes", node, {f"tensor-fusion.ai/pool-{gp}": "true"}),
    ):
        spec = _minimal(_schema(plane, plural).get("spec") or {})
        plane.request(
            "POST",
            f"{GROUP_PATH}/{plural}",
            {"apiVersion": TF, "kind": "GPUPool" if plural == "gpupools" else "GPUNode",
             "metadata": {"name": name, "labels": labels}, "spec": spec},
        )  # fmt: skip
        _with_status(plane, f"{GROUP_PATH}/{plural}/{name}", plural, {"phase": "Running"})
    pods = f"/api/v1/namespaces/{namespace}/pods"
    plane.request(
        "POST",
        pods,
        {"apiVersion": "v1", "kind": "Pod",
         "metadata": {"name": f"hypervisor-{node}",
                      "labels": {"tensor-fusion.ai/component": "hypervisor"}},
         "spec": {"nodeName": node, "containers": [{"name": "hv", "image": HYPERVISOR}]}},
    )  # fmt: skip
    set_pod_phase(plane, namespace, f"hypervisor-{node}", "Running")


def set_pod_phase(plane: Any, namespace: str, name: str, phase: str) -> None:
    path = f"/api/v1/namespaces/{namespace}/pods/{name}"
    pod = plane.request("GET", path)
    pod["status"] = {"phase": phase}
    plane.request("PUT", f"{path}/status", pod)


def delete_cluster_objects(plane: Any, tfc: str) -> None:
    """A test's cluster-scoped TensorFusion objects (helm keeps the TFC; no namespace holds
    them)."""
    for path in (
        f"{GROUP_PATH}/tensorfusionclusters/{tfc}",
        f"{GROUP_PATH}/gpupools/{tfc}-shared",
        f"{GROUP_PATH}/gpunodes/node-{tfc}",
        f"/api/v1/nodes/node-{tfc}",
    ):
        try:
            plane.request("DELETE", path)
        except urllib.error.HTTPError as e:
            if e.code != 404:
                raise
