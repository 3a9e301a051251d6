"""A real `helm install`, `helm upgrade` and `helm uninstall` of the gitopsbot chart with helm 3
and 4, into the API emulator and into the real control plane (``server``, tests/kube_pods.py);
and on the real server (RBAC is enforced there only), the chart's ServiceAccount with a real
token: it may use Leases and Events and get the named kubeconfig Secret, and nothing more;
patch TensorFusionClusters only in same-cluster mode. No pod of the bot runs: neither server
has a container runtime (the emulator's kubelet only reports pods Running)."""

from __future__ import annotations

import time
import urllib.error
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from gitopsbot import settings
from gitopsbot.adapters import binaries
from tests import kube_pods
from tests.deploy.chart_support import (
    CHART,
    EXAMPLE_DIGEST,
    FLEET_URL,
    Helm,
    doc_install_command,
    doc_values,
    rule_rows,
    rules_yaml,
)
from tests.kube_pods import ON_BOTH_SERVERS, KubeServer

server = kube_pods.server  # the fixture

RELEASE = "gitopsbot"  # the release name docs/deploy.md uses: objects are named "gitopsbot"
RBAC = "rbac.authorization.k8s.io/v1"
KUBECONFIG_SECRET = "east-kubeconfig"
OTHER_SECRET = "not-for-the-bot"


def _values(tf_namespace: str, *, same_cluster: bool = True, replicas: int = 2) -> dict[str, Any]:
    return {
        "fleet": {"url": FLEET_URL, "branch": "main"},
        "replicas": replicas,
        "tensorFusion": {"sameCluster": same_cluster, "releaseNamespaces": [tf_namespace]},
        "remoteClusters": [{"name": "east", "secretName": KUBECONFIG_SECRET, "key": "kubeconfig"}],
        # Every kind of reference, so the API server validates the env and the volume they make.
        "secrets": {
            "forgeToken": {"secretName": "forge-token", "key": "token"},
            "webhookSecret": {"secretName": "webhook", "key": "webhook-secret"},
            "gitToken": {"secretName": "git-token", "key": "token"},
            "gitSshKey": {"secretName": "git-ssh", "privateKeyKey": "ssh-privatekey",
                          "publicKeyKey": "ssh-publickey", "knownHostsKey": "known_hosts"},
        },
        "extraEnv": [{"name": "GITOPSBOT_SLACK_WEBHOOK",
                      "valueFrom": {"secretKeyRef": {"name": "chat-webhooks", "key": "slack"}}}],
        "podDisruptionBudget": {"enabled": True},
    }  # fmt: skip


def _helm_on(server: KubeServer, helm: Helm) -> Callable[..., str]:
    """``helm(*args)`` against ``server`` in its namespace; fails the test on an error."""

    def run(*args: str) -> str:
        return helm.ok(*args, "--kubeconfig", str(server.kubeconfig), "-n", server.namespace)

    return run


def _install(server: KubeServer, helm: Helm, values: dict[str, Any], verb: str = "install") -> str:
    return _helm_on(server, helm)(verb, RELEASE, str(CHART), "-f", str(helm.values_file(values)))


def _namespace(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}


@pytest.fixture
def tf_namespace(server: KubeServer) -> Iterator[str]:
    """A TensorFusion release namespace next to the bot's (it must exist before the install)."""
    name = f"{server.namespace}-tf"
    server.request("POST", "/api/v1/namespaces", _namespace(name))
    try:
        yield name
    finally:
        try:
            server.request("DELETE", f"/api/v1/namespaces/{name}")
        except urllib.error.HTTPError as e:
            if e.code != 404:
                raise


@pytest.fixture
def uninstalled_after(server: KubeServer, helm4: Helm) -> Iterator[None]:
    """A test that fails half-way leaves no ClusterRole behind on the shared real server."""
    yield
    helm4.run("uninstall", RELEASE, "--kubeconfig", str(server.kubeconfig), "-n", server.namespace)


def _gone(server: KubeServer, api_version: str, kind: str, ns: str | None, name: str) -> None:
    deadline = time.monotonic() + 30
    while server.get(api_version, kind, ns, name) is not None:
        assert time.monotonic() < deadline, f"{kind} {ns}/{name} still there"
        time.sleep(0.1)


@pytest.mark.slow
@ON_BOTH_SERVERS
@pytest.mark.usefixtures("uninstalled_after")
def test_install_upgrade_uninstall(server: KubeServer, helm: Helm, tf_namespace: str) -> None:
    ns = server.namespace
    cluster_role = f"{ns}-{RELEASE}-tensorfusion"
    events_role = f"{ns}-{RELEASE}-events"
    helm_ = _helm_on(server, helm)

    _install(server, helm, _values(tf_namespace))
    assert "STATUS: deployed" in helm_("status", RELEASE)
    dep = server.get("apps/v1", "Deployment", ns, RELEASE)
    assert dep is not None and dep["spec"]["replicas"] == 2
    pod = dep["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == RELEASE
    assert pod["securityContext"]["runAsUser"] == 10001
    assert pod["containers"][0]["securityContext"]["readOnlyRootFilesystem"] is True
    env = {e["name"]: e for e in pod["containers"][0]["env"]}
    assert env["GITOPSBOT_SLACK_WEBHOOK"]["valueFrom"]["secretKeyRef"] == {
        "name": "chat-webhooks",
        "key": "slack",
    }
    assert server.get("v1", "ServiceAccount", ns, RELEASE) is not None
    assert server.get("policy/v1", "PodDisruptionBudget", ns, RELEASE) is not None
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["git-ssh"]["secret"]["defaultMode"] == 0o400
    assert volumes["tmp"]["emptyDir"]["medium"] == "Memory"
    for service in ("gitopsbot-webhooks", "gitopsbot-metrics"):
        assert server.get("v1", "Service", ns, service) is not None
    wanted = rules_yaml()
    live_cr = server.get(RBAC, "ClusterRole", None, cluster_role)
    assert live_cr is not None
    assert rule_rows(live_cr["rules"]) == rule_rows(wanted["ClusterRole"])
    live_role = server.get(RBAC, "Role", tf_namespace, f"{RELEASE}-tensorfusion")
    assert live_role is not None and rule_rows(live_role["rules"]) == rule_rows(wanted["Role"])
    assert server.get(RBAC, "RoleBinding", "default", events_role) is not None
    own = server.get(RBAC, "Role", ns, RELEASE)
    assert own is not None
    assert ("", "secrets", KUBECONFIG_SECRET, "get") in rule_rows(own["rules"])

    # To a management cluster: the TensorFusion rules go, the bot's own stay.
    _install(server, helm, _values(tf_namespace, same_cluster=False, replicas=3), "upgrade")
    assert "REVISION: 2" in helm_("status", RELEASE)
    dep = server.get("apps/v1", "Deployment", ns, RELEASE)
    assert dep is not None and dep["spec"]["replicas"] == 3
    for kind, where, name in (
        ("ClusterRole", None, cluster_role),
        ("ClusterRoleBinding", None, cluster_role),
        ("Role", "default", events_role),
        ("RoleBinding", "default", events_role),
        ("Role", tf_namespace, f"{RELEASE}-tensorfusion"),
        ("RoleBinding", tf_namespace, f"{RELEASE}-tensorfusion"),
    ):
        _gone(server, RBAC, kind, where, name)
    assert server.get(RBAC, "Role", ns, RELEASE) is not None

    helm_("uninstall", RELEASE)
    for api_version, kind, name in (
        ("apps/v1", "Deployment", RELEASE),
        ("v1", "ServiceAccount", RELEASE),
        ("v1", "Service", "gitopsbot-webhooks"),
        ("v1", "Service", "gitopsbot-metrics"),
        (RBAC, "Role", RELEASE),
        (RBAC, "RoleBinding", RELEASE),
    ):
        _gone(server, api_version, kind, ns, name)
    assert (
        "not found"
        in helm.run("status", RELEASE, "--kubeconfig", str(server.kubeconfig), "-n", ns).stderr
    )


# -- the ServiceAccount's permissions, on the real server ------------------------------------


class AsBot:
    """Requests as the chart's ServiceAccount, with a real token: resource requests, and the
    SelfSubjectAccessReview that `kubectl auth can-i` sends (kubectl itself answers "no" for
    a resource the server does not serve, and no TensorFusion CRD is installed here)."""

    def __init__(self, plane: Any, namespace: str) -> None:
        self.plane = plane
        self.token: str = plane.service_account_token(namespace, RELEASE, create=False)

    def status(self, method: str, path: str, body: Any = None) -> int:
        """The HTTP status of one request under the bot's token (401 and 403 returned)."""
        try:
            self.plane.request(method, path, body, token=self.token)
        except urllib.error.HTTPError as e:
            if e.code not in (401, 403):  # anything else is a mistake of the test's
                raise AssertionError(f"{method} {path}: {e.code} {e.read()[:600]!r}") from e
            return e.code
        return 200

    def can_i(self, verb: str, resource: str, namespace: str = "", name: str = "") -> bool:
        """``resource`` is ``plural`` or ``plural.group``, as kubectl takes it."""
        plural, _, group = resource.partition(".")
        attributes = {"verb": verb, "resource": plural, "group": group}
        if namespace:
            attributes["namespace"] = namespace
        if name:
            attributes["name"] = name
        review = self.plane.request(
            "POST",
            "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
            {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
             "spec": {"resourceAttributes": attributes}},
            token=self.token,
        )  # fmt: skip
        return bool(review["status"].get("allowed"))


def _settles(check: Callable[[], bool], what: str) -> None:
    """RBAC reaches the authorizer through an informer: a change shows within moments."""
    deadline = time.monotonic() + 15
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.1)


def _lease(ns: str, holder: str, rv: str = "", name: str = "cluster-east") -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": ns}
    if rv:
        meta["resourceVersion"] = rv
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": meta,
            "spec": {"holderIdentity": holder, "leaseDurationSeconds": 15}}  # fmt: skip


def _event(name: str, ns: str = "default") -> dict[str, Any]:
    """An events.k8s.io Event on a TensorFusionCluster, as adapters/kube_events.py posts it."""
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {"name": name, "namespace": ns},
        "eventTime": now,
        "reportingController": "gitopsbot",
        "reportingInstance": "gitopsbot-0",
        "action": "Upgrade",
        "reason": "StepStarted",
        "type": "Normal",
        "note": "helm-upgrade started",
        "regarding": {"apiVersion": "tensor-fusion.ai/v1", "kind": "TensorFusionCluster",
                      "name": "east"},
    }  # fmt: skip


def _core_event(name: str) -> dict[str, Any]:
    """The same through the core Events API, which the bot does not use."""
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": name, "namespace": "default"},
        "involvedObject": {"apiVersion": "tensor-fusion.ai/v1", "kind": "TensorFusionCluster",
                           "name": "east"},
        "reason": "StepStarted",
        "message": "helm-upgrade started",
        "type": "Normal",
        "source": {"component": "gitopsbot"},
    }  # fmt: skip


@pytest.mark.realkube
@pytest.mark.slow
def test_the_service_account_may_do_exactly_its_part(
    control_plane: Any, realkube_namespace: str, tmp_path: Path
) -> None:
    plane, ns = control_plane, realkube_namespace
    tf_ns = f"{ns}-tf"
    plane.request("POST", "/api/v1/namespaces", _namespace(tf_ns))
    secrets = f"/api/v1/namespaces/{ns}/secrets"
    for name in (KUBECONFIG_SECRET, OTHER_SECRET):
        secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name}}
        plane.request("POST", secrets, {**secret, "stringData": {"kubeconfig": "apiVersion: v1"}})
    cache = settings.cache_dir()
    helm = Helm(binaries.ensure("helm4", cache), tmp_path / "helm")
    kubeconfig = plane.write_kubeconfig(tmp_path / "admin.kubeconfig", namespace=ns)
    admin = KubeServer("realkube", plane.url, kubeconfig, ns, plane.admin_token, plane.ca_file)
    event_names: list[str] = []
    try:
        _install(admin, helm, _values(tf_ns))
        bot = AsBot(plane, ns)
        leases = f"/apis/coordination.k8s.io/v1/namespaces/{ns}/leases"

        # Leases in its namespace: create, get, list, update (what adapters/leases.py sends).
        _settles(lambda: bot.status("POST", leases, _lease(ns, "bot-a")) == 200, "create lease")
        assert bot.status("GET", f"{leases}/cluster-east") == 200
        assert bot.status("GET", f"{leases}?labelSelector=gitopsbot.io%2Fkind%3Dcluster") == 200
        live = plane.request("GET", f"{leases}/cluster-east")
        taken = _lease(ns, "bot-b", live["metadata"]["resourceVersion"])
        assert bot.status("PUT", f"{leases}/cluster-east", taken) == 200
        assert bot.status("DELETE", f"{leases}/cluster-east") == 403  # never deletes one
        assert not bot.can_i("watch", "leases.coordination.k8s.io", ns)
        assert bot.status("POST", f"/apis/coordination.k8s.io/v1/namespaces/{tf_ns}/leases",
                          _lease(tf_ns, "bot-a")) == 403  # fmt: skip

        # Events on the TensorFusionCluster (cluster-scoped: in `default`), events.k8s.io only.
        name = f"gitopsbot.{ns}"
        event_names.append(name)
        events = "/apis/events.k8s.io/v1/namespaces/default/events"
        assert bot.status("POST", events, _event(name)) == 200
        patch_path = f"{events}/{name}"
        assert bot.can_i("patch", "events.events.k8s.io", "default", name)
        assert bot.status("GET", patch_path) == 403  # writes only
        assert bot.status("POST", f"/apis/events.k8s.io/v1/namespaces/{ns}/events",
                          _event(name, ns)) == 403  # fmt: skip
        assert bot.status("POST", "/api/v1/namespaces/default/events", _core_event(name)) == 403

        # Secrets: the named kubeconfig only.
        assert bot.status("GET", f"{secrets}/{KUBECONFIG_SECRET}") == 200
        assert bot.status("GET", f"{secrets}/{OTHER_SECRET}") == 403
        assert bot.status("GET", secrets) == 403  # no list
        assert bot.can_i("get", "secrets", ns, KUBECONFIG_SECRET)
        assert not bot.can_i("get", "secrets", ns)
        assert not bot.can_i("create", "secrets", ns)
        assert not bot.can_i("update", "secrets", ns, KUBECONFIG_SECRET)
        assert not bot.can_i("get", "secrets", "default", KUBECONFIG_SECRET)

        # TensorFusion: its rules (rules.yaml), bound in this cluster.
        assert bot.can_i("patch", "tensorfusionclusters.tensor-fusion.ai")
        assert bot.can_i("list", "pods")  # all namespaces
        assert bot.can_i("create", "deployments.apps", tf_ns)
        assert not bot.can_i("create", "deployments.apps", ns)
        assert not bot.can_i("delete", "tensorfusionclusters.tensor-fusion.ai")
        assert not bot.can_i("create", "clusterroles.rbac.authorization.k8s.io")

        # A management cluster: the TensorFusion rules and cluster-wide Events go.
        _install(admin, helm, _values(tf_ns, same_cluster=False), "upgrade")
        _settles(lambda: not bot.can_i("patch", "tensorfusionclusters.tensor-fusion.ai"),
                 "patch on tensorfusionclusters still allowed")  # fmt: skip
        assert not bot.can_i("list", "pods")
        assert not bot.can_i("create", "deployments.apps", tf_ns)
        assert bot.status("POST", events, _event(name + ".2")) == 403
        assert bot.status("POST", leases, _lease(ns, "bot-a", name="cluster-west")) == 200
        assert bot.status("GET", f"{secrets}/{KUBECONFIG_SECRET}") == 200

        _helm_on(admin, helm)("uninstall", RELEASE)
        # The ServiceAccount is gone, and its token with it.
        _settles(lambda: bot.status("GET", leases) == 401, "the token still works")
    finally:
        helm.run("uninstall", RELEASE, "--kubeconfig", str(kubeconfig), "-n", ns)
        for path in [f"/api/v1/namespaces/{tf_ns}"] + [
            f"/apis/events.k8s.io/v1/namespaces/default/events/{n}" for n in event_names
        ]:
            try:
                plane.request("DELETE", path)
            except urllib.error.HTTPError as e:
                if e.code != 404:
                    raise


@pytest.mark.slow
@pytest.mark.parametrize("server", ["emulator"], indirect=True)
def test_the_docs_install_command_works(server: KubeServer, helm4: Helm) -> None:
    """docs/deploy.md's `helm install` line, as written, with each of its `my-values.yaml`
    examples (same cluster, then management cluster), on the emulator."""
    examples = doc_values()
    assert [e["tensorFusion"]["sameCluster"] for e in examples] == [True, False]
    command = doc_install_command()
    assert command[:2] == ["install", RELEASE] and "--create-namespace" in command
    server.request("POST", "/api/v1/namespaces", _namespace("tensor-fusion-sys"))
    for values in examples:
        args = [
            str(CHART) if a == "deploy/chart" else str(helm4.values_file(values))
            if a == "my-values.yaml" else a
            for a in command
        ]  # fmt: skip
        helm4.ok(*args, "--kubeconfig", str(server.kubeconfig))
        ns = command[command.index("-n") + 1]
        dep = server.get("apps/v1", "Deployment", ns, RELEASE)
        assert dep is not None
        assert dep["spec"]["template"]["spec"]["containers"][0]["image"].endswith(EXAMPLE_DIGEST)
        same = values["tensorFusion"]["sameCluster"]
        tf_role = server.get(RBAC, "Role", "tensor-fusion-sys", f"{RELEASE}-tensorfusion")
        assert (tf_role is not None) is same
        helm4.ok("uninstall", RELEASE, "-n", ns, "--kubeconfig", str(server.kubeconfig))
        _gone(server, "apps/v1", "Deployment", ns, RELEASE)
