"""Least privilege on the real server (issue 16 part 5a, issue 33 part 5): the rules of
deploy/rbac/rules.yaml, bound to a ServiceAccount, are enough for every cluster action of an
upgrade and a rollback, and each of them is used: the API server's audit log of those actions
holds no denied request and at least one request allowed by each rule. A handful of rules are
also taken away one at a time, to show the action that needs one fails with an error naming
the verb and the resource. docs/permissions.md lists the same rules, with why.

The ``watch`` verbs the bot's own waits follow (controller-ready, verification, a pool pass:
``WAITS``) are the exception (#13): with the rules each wait is shown answered by the watch
(no poll), and without the verb the same action still succeeds, the adapter polling."""

from __future__ import annotations

import base64
import gzip
import json
import logging
import re
import shutil
import threading
import time
import urllib.error
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from gitopsbot.adapters.kube import KubeCluster
from gitopsbot.adapters.kubectl import KubectlCrdApplier
from gitopsbot.adapters.secrets import SecretResolver
from gitopsbot.bot.steps.executor import Executor
from gitopsbot.bot.steps.outcome import RETRY_AFTER_WAIT
from gitopsbot.bot.steps.verify import SETTLE_SECONDS
from gitopsbot.core.charts.observed import HelmReleaseStatus
from gitopsbot.core.fleet.model import ClusterSpec, Component, Share, SmokeTest
from gitopsbot.core.operations import operation
from gitopsbot.core.records.journal import Journal, OperationKind, RollbackPoint, StepState
from gitopsbot.errors import GitOpsBotError
from gitopsbot.ports.helm import ChartRef, UpgradeRequest
from gitopsbot.sandbox.chartrepo import ChartRepo
from tests.realkube import tf_support as tfs

DOC = tfs.ROOT / "docs" / "permissions.md"
NOW = datetime(2026, 12, 3, tzinfo=UTC)
SMOKE = "gpu-smoke"
CREDENTIAL = "tf-credentials"
TOKEN = "enroll-token-of-the-lab"
# The world's Executor waits this long where a step is expected to stay RUNNING (the
# controller, with no kubelet, never gets ready): a slice, not the bot's default 10 s.
WAIT_SLICE = 1.0


# -- the doc and the rules ------------------------------------------------------------------


def _doc_rows() -> set[tuple[str, str, str, str]]:
    """(scope, apiGroup, resource, verb) of every row of the doc's permission table."""
    rows = set()
    for line in DOC.read_text().splitlines():
        cells = [c.strip().strip("`") for c in line.strip().strip("|").split("|")]
        if len(cells) >= 5 and cells[0] in ("ClusterRole", "Role"):
            group = "" if cells[1] in ("core", '""') else cells[1]
            for resource in re.split(r"[,\s]+", cells[2]):
                for verb in re.split(r"[,\s]+", cells[3]):
                    if resource and verb:
                        rows.add((cells[0], group, resource, verb))
    return rows


def _rule_rows() -> set[tuple[str, str, str, str]]:
    rows = set()
    for role in tfs.load_rules():
        for rule in role["rules"]:
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    for verb in rule["verbs"]:
                        rows.add((role["kind"], group, resource, verb))
    return rows


def test_the_doc_lists_exactly_the_rules_of_rules_yaml() -> None:
    doc, rules = _doc_rows(), _rule_rows()
    assert rules, "deploy/rbac/rules.yaml grants nothing"
    assert sorted(rules - doc) == [], "granted but not explained in docs/permissions.md"
    assert sorted(doc - rules) == [], "explained in docs/permissions.md but not granted"


# -- the world: the bot as the ServiceAccount, a release of the example chart ---------------


@dataclass
class World:
    plane: Any
    ns: str
    bot: tfs.Bot
    ex: Executor
    spec_old: ClusterSpec  # chart 1.8.0
    spec: ClusterSpec  # chart 1.8.7, with a smoke test
    tfc: str
    tmp: Path
    major: str
    extra_tfcs: list[str] = field(default_factory=list)

    def op(self, kind: OperationKind, sha: str, reverts: str = "") -> Journal:
        return operation.new_operation(
            kind=kind,
            cluster=tfs.CLUSTER,
            desired_sha=sha * 40,
            created_at=NOW,
            policy=self.spec.rollout,
            reverts_op=reverts,
        )

    def run(self, journal: Journal, name: str, spec: ClusterSpec | None = None,
            point: RollbackPoint | None = None, ex: Executor | None = None) -> Any:  # fmt: skip
        step = replace(journal.step(name), state=StepState.RUNNING, started_at=datetime.now(UTC))
        return (ex or self.ex).run(
            step, journal, spec or self.spec, now=datetime.now(UTC), rollback_to=point
        )


@pytest.fixture
def world(
    control_plane: Any,
    realkube_namespace: str,
    binaries: dict[str, Path],
    tensor_fusion: Path,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> Iterator[World]:
    major = getattr(request, "param", "helm4")
    ns = realkube_namespace
    tfc = f"tfc-{ns}"
    control_plane.request(
        "POST",
        f"/api/v1/namespaces/{ns}/secrets",
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": CREDENTIAL},
         "stringData": {"enrollToken": TOKEN}},
    )  # fmt: skip
    with (
        ChartRepo(tfs.CHART_REPO) as repo,
        tfs.bot_as_service_account(control_plane, ns, binaries, tmp_path, helm=major) as bot,
    ):
        bot.helm.real_charts = tensor_fusion
        old = tfs.fleet_spec(tmp_path / "f0", namespace=ns, repo=repo, tfc=tfc, version="1.8.0",
                             credential=CREDENTIAL)  # fmt: skip
        new = tfs.fleet_spec(tmp_path / "f1", namespace=ns, repo=repo, tfc=tfc,
                             credential=CREDENTIAL)  # fmt: skip
        cuda = {"name": "cuda", "image": "nvidia/cuda:12-base"}
        smoke = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": SMOKE},
                 "spec": {"restartPolicy": "Never", "containers": [cuda]}}  # fmt: skip
        new = replace(new, smoke_test=SmokeTest(smoke))
        ex = Executor(
            cluster=bot.kube,
            helm=bot.helm,
            secrets=SecretResolver(bot.kube, default_namespace=ns),
            wait_slice=WAIT_SLICE,
        )
        w = World(control_plane, ns, bot, ex, old, new, tfc, tmp_path, major)
        try:
            yield w
        finally:
            for name in (tfc, *w.extra_tfcs):
                tfs.delete_cluster_objects(control_plane, name)


def _ok(outcome: Any, *states: StepState) -> str:
    assert outcome.state in (states or (StepState.SUCCEEDED,)), outcome.detail
    return str(outcome.detail)


def _install(w: World) -> RollbackPoint:
    """The bot's first operation on an empty cluster: chart 1.8.0. Returns the rollback point
    the next operation's backup records."""
    first = w.op(OperationKind.UPGRADE, "a")
    for name in ("backup", "crds", "helm-upgrade"):
        _ok(w.run(first, name, w.spec_old))
    tfs.play_controller(w.plane, w.ns, w.tfc)
    second = w.op(OperationKind.UPGRADE, "b")
    point: RollbackPoint | None = w.run(second, "backup").rollback_point
    assert point is not None and point.helm_revision == 1
    return point


def _leave_pending(w: World) -> int:
    """What a helm killed mid-upgrade leaves (the admin writes it): the next revision's
    Secret, pending-upgrade, as helm writes it before it applies anything."""
    secrets = w.plane.request(
        "GET", f"/api/v1/namespaces/{w.ns}/secrets?labelSelector=owner%3Dhelm,name%3Dtf"
    )["items"]
    latest = max(secrets, key=lambda s: int(s["metadata"]["labels"]["version"]))
    record = json.loads(gzip.decompress(base64.b64decode(base64.b64decode(
        latest["data"]["release"]))))  # fmt: skip
    revision = int(record["version"]) + 1
    record["version"] = revision
    record["info"]["status"] = "pending-upgrade"
    packed = base64.b64encode(gzip.compress(json.dumps(record).encode()))
    w.plane.request(
        "POST",
        f"/api/v1/namespaces/{w.ns}/secrets",
        {"apiVersion": "v1", "kind": "Secret", "type": "helm.sh/release.v1",
         "metadata": {"name": f"sh.helm.release.v1.tf.v{revision}",
                      "labels": {"name": "tf", "owner": "helm", "status": "pending-upgrade",
                                 "version": str(revision)}},
         "data": {"release": base64.b64encode(packed).decode()}},
    )  # fmt: skip
    return revision


# -- each verb is needed ----------------------------------------------------------------------

Probe = Callable[["World"], str]
"""Runs the bot's action that needs one verb; returns the error text it ended with."""


def _failed(outcome: Any) -> str:
    assert outcome.state is StepState.FAILED, outcome.detail
    return str(outcome.detail)


def _raises(action: Callable[[], object]) -> str:
    with pytest.raises(GitOpsBotError) as err:
        action()
    return str(err.value)


_counter = iter(range(1, 100000))


def _sha() -> str:
    """A fresh desired commit: the operation id takes its first 12 characters."""
    return f"{next(_counter):012x}".ljust(40, "0")


def _step(name: str, spec: str = "new") -> Probe:
    def probe(w: World) -> str:
        kind = OperationKind.CONTROLLER_RESTART if name == "controller-restart" else None
        journal = w.op(kind or OperationKind.UPGRADE, _sha())
        return _failed(w.run(journal, name, w.spec if spec == "new" else w.spec_old))

    return probe


def _upgrade(w: World) -> str:
    """The bot's helm upgrade step, between chart versions (1.8.0 and 1.8.7 alternately: a
    new chart label on every object, so helm writes every object of the chart)."""
    current = w.bot.helm.status(tfs.RELEASE, w.ns)
    old = current is not None and current.chart_version == "1.8.7"
    return _failed(w.run(w.op(OperationKind.UPGRADE, _sha()), "helm-upgrade",
                         w.spec_old if old else w.spec))  # fmt: skip


def _dropped(template: str, path: str) -> Probe:
    """A chart version that no longer renders ``template``'s object (at ``path`` in the
    release namespace): helm deletes it."""

    def probe(w: World) -> str:
        chart = w.tmp / f"chart-{next(_counter)}"
        shutil.copytree(tfs.EXAMPLE_CHART, chart)
        # Emptied rather than removed: another template includes it for a checksum.
        (chart / "templates" / template).write_text("{{- /* dropped */ -}}\n")
        values = {**w.spec.values, "agent": {"agentId": "lab-agent", "enrollToken": "x"}}
        try:
            w.bot.helm.upgrade(
                UpgradeRequest(
                    release=tfs.RELEASE,
                    namespace=w.ns,
                    chart=ChartRef(path=str(chart)),
                    version="1.8.7",
                    values=values,
                    description="gitopsbot op=lab-000000000000 step=helm-upgrade",
                    post_render_policy=w.spec.rollout,
                )
            )
        except GitOpsBotError as e:
            return str(e)
        # helm 3 goes on when it may not delete an object the chart dropped: it stays.
        w.plane.request("GET", path.format(ns=w.ns))
        return "left in place: helm did not fail"

    return probe


def _switch(w: World) -> str:
    return _raises(lambda: w.ex.set_switch(w.spec, "shared", Component.HYPERVISOR, open_=True))


def _budget(w: World) -> str:
    """A pool with an availability budget: its observation lists the Nodes (issue 18)."""
    pools = tuple(replace(p, max_unavailable=Share(1)) for p in w.spec.rollout.pools)
    spec = replace(w.spec, rollout=replace(w.spec.rollout, pools=pools))
    return _raises(lambda: w.ex.observe_pool(spec, "shared", Component.HYPERVISOR))


def _crd_wait(w: World) -> str:
    """kubectl wait watches a CRD until it is Established. To need the watch for certain,
    the CRD here never becomes Established: a copy of the chart's ProviderConfig CRD whose
    kind is taken (GPUPool), so the server does not accept its names."""
    name = "providerconfigs.tensor-fusion.ai"
    path = f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}"
    crd = w.plane.request("GET", path)
    w.plane.request("DELETE", path)
    wait_gone(w.plane, path)
    crd["spec"]["names"].update(kind="GPUPool", listKind="GPUPoolList")
    body = {"apiVersion": crd["apiVersion"], "kind": crd["kind"],
            "metadata": {"name": name}, "spec": crd["spec"]}  # fmt: skip
    applier = KubectlCrdApplier(w.bot.kubectl.binary, home=w.tmp / "kubectl-wait",
                                kubeconfig=w.bot.kubeconfig, established_timeout_seconds=3,
                                retry_delays=())  # fmt: skip
    try:
        (result,) = applier.apply_crds({"crd.yaml": json.dumps(body)})
    finally:
        w.plane.request("DELETE", path)
        wait_gone(w.plane, path)
    assert result.applied and not result.established, result
    return result.message


def wait_gone(plane: Any, path: str) -> None:
    deadline = time.monotonic() + 30
    while True:
        try:
            plane.request("GET", path)
        except urllib.error.HTTPError as e:
            if e.code == 404:
                return
            raise
        assert time.monotonic() < deadline, f"{path} not deleted"
        time.sleep(0.1)


def _smoke(w: World) -> str:
    journal = w.op(OperationKind.UPGRADE, "e")
    out = w.run(journal, "verify")
    if out.state is StepState.RUNNING and "smoke test started" in out.detail:
        tfs.set_pod_phase(w.plane, w.ns, SMOKE, "Succeeded")
        out = w.run(journal, "verify")
    return _failed(out)


LOG_POD = "log-probe"


def _log_pod(w: World) -> str:
    """A pod with a cluster-agent container (made by the admin once): the controller's have
    no node here. Its name."""
    path = f"/api/v1/namespaces/{w.ns}/pods"
    if not any(p["metadata"]["name"] == LOG_POD for p in w.plane.request("GET", path)["items"]):
        w.plane.request("POST", path, {
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": LOG_POD},
            "spec": {"containers": [{"name": "cluster-agent", "image": "busybox:1"}]},
        })  # fmt: skip
    return LOG_POD


def _agent_log(w: World) -> str:
    """R18's reconnect check reads the cluster-agent log (``container_log``). With the verb
    the real server answers an unbound pod's log empty (no kubelet); without it, 403."""
    pod = _log_pod(w)
    return _raises(lambda: w.bot.kube.container_log(w.ns, pod, "cluster-agent"))


def _dropped_all(w: World) -> str:
    """A chart version that renders none of the release namespace's objects of DROPPABLE:
    helm deletes each (with every rule, it succeeds)."""
    chart = w.tmp / f"chart-{next(_counter)}"
    shutil.copytree(tfs.EXAMPLE_CHART, chart)
    for template in DROPPABLE:
        # Emptied rather than removed: another template includes one for a checksum.
        (chart / "templates" / template).write_text("{{- /* dropped */ -}}\n")
    values = {**w.spec.values, "agent": {"agentId": "lab-agent", "enrollToken": "x"}}
    w.bot.helm.upgrade(
        UpgradeRequest(
            release=tfs.RELEASE,
            namespace=w.ns,
            chart=ChartRef(path=str(chart)),
            version="1.8.7",
            values=values,
            description="gitopsbot op=lab-000000000000 step=helm-upgrade",
            post_render_policy=w.spec.rollout,
        )
    )
    for path in DROPPABLE.values():
        with pytest.raises(urllib.error.HTTPError) as gone:
            w.plane.request("GET", path.format(ns=w.ns))
        assert gone.value.code == 404, path
    return "dropped"


DROPPABLE = {
    "agent-secret.yaml": "/api/v1/namespaces/{ns}/secrets/tf-agent",
    "config.yaml": "/api/v1/namespaces/{ns}/configmaps/tf-config",
    "service.yaml": "/api/v1/namespaces/{ns}/services/tf",
    "serviceaccount.yaml": "/api/v1/namespaces/{ns}/serviceaccounts/tf",
    "controller-deployment.yaml": "/apis/apps/v1/namespaces/{ns}/deployments/tf-controller",
}
"""The chart's objects in the release namespace, by template: what helm deletes when a chart
version no longer renders them."""


CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"


def _audited(w: World, since: int) -> list[dict[str, Any]]:
    """The ServiceAccount's requests since ``since`` (the audit log), without the access
    reviews the tests' grant makes on its behalf; discovery has no ``objectRef``."""
    user = f"system:serviceaccount:{w.ns}:{tfs.SA}"
    events = w.plane.audit_events(user=user, since=since)
    return [e for e in events if not e.get("objectRef", {}).get("resource", "").endswith("reviews")]


def _rules_used(event: dict[str, Any]) -> set[tuple[str, str, str, str]]:
    """(ClusterRole or Role, apiGroup, resource[/subresource], verb) of each rule ``event``
    needed. Which role allowed it is the authorizer's own reason ("RBAC: allowed by
    RoleBinding ... of Role ..."). A server-side apply that made its object (patch, 201) is
    also authorized as a ``create`` (the apiserver's patch handler checks it, unaudited):
    the ClusterRole's for a cluster-scoped object, the Role's for one in the namespace."""
    ref = event["objectRef"]
    group, verb = ref.get("apiGroup", ""), event["verb"]
    resource = ref["resource"] + (f"/{ref['subresource']}" if ref.get("subresource") else "")
    reason = event["annotations"].get("authorization.k8s.io/reason", "")
    used = {("ClusterRole" if "ClusterRoleBinding" in reason else "Role", group, resource, verb)}
    if verb == "patch" and event["responseStatus"].get("code") == 201:
        used.add(("Role" if ref.get("namespace") else "ClusterRole", group, resource, "create"))
    return used


@pytest.mark.realkube
@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.parametrize("world", ["helm3", "helm4"], indirect=True)
def test_every_rule_is_used_and_no_request_is_denied(world: World) -> None:
    """Least privilege from the API server's own audit log (as audit2rbac derives RBAC):
    every cluster action of the bot's upgrades and rollbacks, run as the ServiceAccount bound
    to exactly deploy/rbac/rules.yaml, is allowed (no request answered 403 or decided
    "forbid"), and every (role, group, resource, verb) the file grants allowed at least one of
    them: a rule nothing uses fails the test (say why the bot needs it, or drop it). Which
    rule allowed a request is the authorizer's own reason; a rule shadowed by another (a Role
    verb the ClusterRole already grants) shows as unused, rightly."""
    w = world
    since = w.plane.audit_offset()
    point = _install(w)  # upgrade --install: helm creates every object of the chart
    op = w.op(OperationKind.UPGRADE, "b")
    assert "3 TensorFusion objects" in _ok(w.run(op, "backup"))  # TFC, GPUPool, GPUNode
    assert "12 CRDs" in _ok(w.run(op, "crds"))  # the real chart's, by kubectl
    assert "revision 2: chart 1.8.7" in _ok(w.run(op, "helm-upgrade"))
    agent = w.bot.kube.get("v1", "Secret", w.ns, "tf-agent")
    assert agent is not None  # the chart's Secret, with the token read from ours
    assert base64.b64decode(agent["data"]["enrollToken"]).decode() == TOKEN
    _ok(w.run(w.op(OperationKind.CONTROLLER_RESTART, "b"), "controller-restart"))  # R24
    # No kubelet: the controller never gets ready; the step waits, watching its Deployment.
    assert "waiting for deploy/tf-controller" in _ok(
        w.run(op, "controller-ready"), StepState.RUNNING
    )
    w.ex.set_switch(w.spec, "shared", Component.HYPERVISOR, open_=True)
    seen = w.ex.observe_pool(w.spec, "shared", Component.HYPERVISOR)
    assert seen is not None and seen.switch_open and seen.nodes == 1
    w.ex.set_switch(w.spec, "shared", Component.HYPERVISOR, open_=False)
    tfc = w.bot.kube.get(tfs.TF, "TensorFusionCluster", None, w.tfc)
    assert tfc is not None
    managers = [e.get("manager") for e in tfc["metadata"]["managedFields"]]
    assert "gitopsbot" not in managers, managers  # released after each switch
    pools = tuple(replace(p, max_unavailable=Share(1)) for p in w.spec.rollout.pools)
    budget = replace(w.spec, rollout=replace(w.spec.rollout, pools=pools))
    assert w.ex.observe_pool(budget, "shared", Component.HYPERVISOR) is not None  # Nodes read
    w.ex.await_pools(w.spec, ["shared"], WAIT_SLICE)  # follows the pools' watch
    _hypervisor(w, "Pending")
    assert "is Pending" in _ok(w.run(op, "verify"), StepState.RUNNING)  # the pods' watch
    _hypervisor(w, "Running")
    assert "smoke test started" in _ok(w.run(op, "verify"), StepState.RUNNING)
    assert "smoke test Pending" in _ok(w.run(op, "verify"), StepState.RUNNING)
    tfs.set_pod_phase(w.plane, w.ns, SMOKE, "Succeeded")
    assert "smoke test succeeded" in _ok(w.run(op, "verify"))
    assert w.bot.kube.get("v1", "Pod", w.ns, SMOKE) is None  # removed by the bot
    # R18's reconnect check may read the agent's log (empty: no kubelet, no node).
    assert w.bot.kube.container_log(w.ns, _log_pod(w), "cluster-agent", tail_lines=20) == ""
    # A revision left pending by a killed helm is unlocked through Helm's Secret storage.
    revision = _leave_pending(w)
    assert w.bot.kube.mark_helm_release_failed(w.ns, tfs.RELEASE, revision, "test") is True
    assert w.bot.helm.status(tfs.RELEASE, w.ns).status is HelmReleaseStatus.FAILED  # type: ignore[union-attr]
    back = w.op(OperationKind.ROLLBACK, "c", reverts=op.op_id)
    assert "helm rollback to revision 1" in _ok(w.run(back, "rollback", point=point))
    assert w.bot.helm.status(tfs.RELEASE, w.ns).chart_version == "1.8.0"  # type: ignore[union-attr]
    _dropped_all(w)
    _ok(w.run(w.op(OperationKind.UPGRADE, _sha()), "helm-upgrade"))  # made again
    name = f"{w.tfc}-{next(_counter)}"  # Git renames the TensorFusionCluster
    w.extra_tfcs.append(name)
    renamed = replace(w.spec, values={**w.spec.values, "cluster": {
        **w.spec.values["cluster"], "name": name}})  # fmt: skip
    _ok(w.run(w.op(OperationKind.UPGRADE, _sha()), "helm-upgrade", renamed))
    _crd_wait(w)  # kubectl waits for a CRD to be Established: it watches
    # ProviderConfig's CRD is gone now (_crd_wait removes its copy): as for a chart version
    # that adds a CRD, kubectl creates it.
    _ok(w.run(w.op(OperationKind.UPGRADE, _sha()), "crds"))

    events = _audited(w, since)
    assert len(events) > 100, "the audit log holds the ServiceAccount's requests"
    denied = sorted(
        f"{e['verb']} {e['requestURI']}: {e['responseStatus'].get('message')}"
        for e in events
        if e["responseStatus"].get("code") == 403
        or e["annotations"].get("authorization.k8s.io/decision") == "forbid"
    )
    assert denied == []
    # Discovery (/api, /version, ...) needs no rule of ours (docs/permissions.md).
    used = {rule for e in events if "objectRef" in e for rule in _rules_used(e)}
    unused = sorted(_rule_rows() - used)
    assert unused == [], f"granted by deploy/rbac/rules.yaml, used by no request: {unused}"


SAMPLE: dict[tuple[str, str, str], Probe] = {
    ("customresourcedefinitions", "patch", "ClusterRole"): _step("crds"),
    ("tensorfusionclusters", "patch", "ClusterRole"): _switch,
    ("nodes", "list", "ClusterRole"): _budget,
    ("pods", "list", "ClusterRole"): _step("verify"),
    ("secrets", "create", "Role"): _upgrade,
    ("deployments", "delete", "Role"): _dropped(
        "controller-deployment.yaml", "/apis/apps/v1/namespaces/{ns}/deployments/tf-controller"
    ),
    ("pods", "delete", "Role"): _smoke,
    ("pods/log", "get", "Role"): _agent_log,
}
"""A handful of rules, each taken away alone: the audit above shows every rule is used; these
show what a person sees when one is missing (kubectl's, helm's and the client's errors)."""


@pytest.mark.realkube
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_rule_taken_away_fails_its_action_naming_the_verb_and_resource(world: World) -> None:
    """For each rule of SAMPLE in turn: bind the rules without it, run the bot's action that
    needs it, and expect a failure whose text names the verb and the resource; then bind the
    whole rules again and repair what the probe changed. One release for all (helm 4)."""
    w = world
    _install(w)
    _ok(w.run(w.op(OperationKind.UPGRADE, "b"), "helm-upgrade"))  # now at 1.8.7
    cluster_role, role = tfs.load_rules()
    results: dict[str, str] = {}
    for (resource, verb, kind), probe in SAMPLE.items():
        full = cluster_role if kind == "ClusterRole" else role
        (index,) = [i for i, r, v in tfs.rule_verbs(full) if (r, v) == (resource, verb)]
        less = tfs.without(full, index, resource, verb)
        w.bot.grant(less if kind == "ClusterRole" else cluster_role,
                    less if kind == "Role" else role)  # fmt: skip
        try:
            results[f"{kind} {verb} {resource}"] = probe(w)
        except (AssertionError, pytest.fail.Exception) as e:
            results[f"{kind} {verb} {resource}"] = f"DID NOT FAIL: {e}"
        finally:
            # Put back what a probe changed: the rules, a deleted CRD, the chart's objects.
            w.bot.grant(cluster_role, role)
            latest = w.bot.helm.status(tfs.RELEASE, w.ns)
            if latest is not None and latest.status.pending:  # helm could not finish
                w.bot.kube.mark_helm_release_failed(w.ns, tfs.RELEASE, latest.revision, "t")
            _ok(w.run(w.op(OperationKind.UPGRADE, _sha()), "helm-upgrade"))
    print(json.dumps(results, indent=1))
    missing = {
        what: text
        for what, text in results.items()
        if not (what.split()[1] in text and f'"{what.split()[2]}"' in text)
    }
    assert missing == {}


# -- the waits follow the watch; without it they poll -----------------------------------------

LONG = 30.0  # the slice of the waits below: one that sees its change returns long before it
EARLY = 15.0  # "long before": far above the second a polled change can take to be seen
CHANGE_AFTER = 1.0  # the change is made this far into the action (its reads take ms)
KUBE_LOG = "gitopsbot.adapters.kube"
REFUSED = "cannot watch"  # the adapter's log line when the server refuses a watch


@dataclass
class WaitCase:
    """One of the bot's waits: ``action`` (run with an executor of its own) waits for the
    change ``change`` makes CHANGE_AFTER seconds after the action began, and asserts it saw
    it. ``setup`` and ``undo`` (as the admin) put the world where the wait has to wait, and
    back. ``kind`` is what the adapter's log names when it may not watch."""

    name: str
    kind: str
    action: Callable[[World, Executor], None]
    change: Callable[[World], None]
    setup: Callable[[World], None] = lambda w: None
    undo: Callable[[World], None] = lambda w: None


@dataclass
class Waited:
    seconds: float  # from the action's start to its end
    polls: int  # pauses the adapter took between reads: 0 when every answer came by watch
    refused: list[str]  # the adapter's log lines about a watch the server refused


def _controller_path(w: World) -> str:
    return f"/apis/apps/v1/namespaces/{w.ns}/deployments/{tfs.RELEASE}-controller"


def _scale(w: World, replicas: int) -> None:
    """The controller Deployment scaled (as the admin): to 0 the real Deployment controller
    reports it ready at once (no pod to run); back to 1 it is not (no kubelet)."""
    scale = w.plane.request("GET", _controller_path(w) + "/scale")
    scale["spec"]["replicas"] = replicas
    w.plane.request("PUT", _controller_path(w) + "/scale", scale)


def _rescaled(w: World) -> None:
    """Back to one replica, and until the Deployment controller has made its pod: no change
    of it is left to come during the next wait."""
    _scale(w, 1)
    deadline = time.monotonic() + 30
    while True:
        found = w.plane.request("GET", _controller_path(w))
        status = found.get("status") or {}
        if (status.get("observedGeneration"), status.get("replicas")) == (
            found["metadata"]["generation"],
            1,
        ):
            return
        assert time.monotonic() < deadline, f"not scaled back: {status}"
        time.sleep(0.05)


def _not_ready(w: World) -> None:
    assert not w.bot.kube.deployment_ready(w.ns, f"{tfs.RELEASE}-controller")


def _controller_ready(w: World, ex: Executor) -> None:
    assert "rolled out" in _ok(w.run(w.op(OperationKind.UPGRADE, _sha()), "controller-ready",
                                     ex=ex))  # fmt: skip


HYPERVISOR_POD = "hypervisor-node-{tfc}"  # tfs.play_controller's


def _hypervisor(w: World, phase: str) -> None:
    tfs.set_pod_phase(w.plane, w.ns, HYPERVISOR_POD.format(tfc=w.tfc), phase)


def _verify_pods(w: World, ex: Executor) -> None:
    """Verification finds a hypervisor pod Pending and follows the Pods' watch (every
    namespace) until a pod changes: RUNNING, to look again after SETTLE_SECONDS."""
    out = w.run(w.op(OperationKind.UPGRADE, _sha()), "verify", ex=ex)
    assert "is Pending" in _ok(out, StepState.RUNNING)
    assert out.retry_after == SETTLE_SECONDS, "the wait did not see the pod change"


def _smoke_started(w: World) -> None:
    assert "smoke test started" in _ok(
        w.run(w.op(OperationKind.UPGRADE, _sha()), "verify"), StepState.RUNNING
    )


def _smoke_waits(w: World, ex: Executor) -> None:
    """Verification follows the smoke-test pod's watch (by name) until it changes, then
    sees it Succeeded."""
    journal = w.op(OperationKind.UPGRADE, _sha())
    out = w.run(journal, "verify", ex=ex)
    assert "smoke test Pending" in _ok(out, StepState.RUNNING)
    assert out.retry_after == RETRY_AFTER_WAIT, "the wait did not see the pod change"
    assert "smoke test succeeded" in _ok(w.run(journal, "verify", ex=ex))


def _pools_wait(w: World, ex: Executor) -> None:
    assert ex.await_pools(w.spec, ["shared"], LONG) is True


def _touch_pool(w: World) -> None:
    """A change the controller would make to the GPUPool (a new resourceVersion)."""
    path = f"{tfs.GROUP_PATH}/gpupools/{w.tfc}-shared"
    pool = w.plane.request("GET", path)
    pool["metadata"].setdefault("labels", {})["touched"] = str(next(_counter))
    w.plane.request("PUT", path, pool)


WAITS: dict[tuple[str, str, str], list[WaitCase]] = {
    ("deployments", "watch", "Role"): [
        WaitCase(
            "controller-ready",
            "Deployment",
            _controller_ready,
            change=lambda w: _scale(w, 0),
            setup=_not_ready,
            undo=_rescaled,
        ),
    ],
    ("pods", "watch", "ClusterRole"): [
        WaitCase(
            "verify, pods not Running",
            "Pod",
            _verify_pods,
            change=lambda w: _hypervisor(w, "Running"),
            setup=lambda w: _hypervisor(w, "Pending"),
            undo=lambda w: _hypervisor(w, "Running"),
        ),
        WaitCase(
            "verify, the smoke test",
            "Pod",
            _smoke_waits,
            change=lambda w: tfs.set_pod_phase(w.plane, w.ns, SMOKE, "Succeeded"),
            setup=_smoke_started,
        ),
    ],
    ("gpupools", "watch", "ClusterRole"): [
        WaitCase("a pool pass", "GPUPool", _pools_wait, change=_touch_pool),
    ],
}


def _waiting(w: World, case: WaitCase, caplog: pytest.LogCaptureFixture) -> Waited:
    """``case`` run with a fresh adapter (as the ServiceAccount, wired as production: the
    default poll interval) whose pauses between reads are counted: a wait answered by the
    watch takes none; one that polls (a refused watch, or none opened) takes some."""
    polls: list[float] = []

    def pause(seconds: float) -> None:
        polls.append(seconds)
        time.sleep(seconds)

    kube = KubeCluster.from_kubeconfig(w.bot.kubeconfig, pause=pause)
    ex = Executor(
        cluster=kube,
        helm=w.bot.helm,
        secrets=SecretResolver(kube, default_namespace=w.ns),
        wait_slice=LONG,
    )
    errors: list[BaseException] = []

    def later() -> None:
        time.sleep(CHANGE_AFTER)
        try:
            case.change(w)
        except Exception as e:  # noqa: BLE001 - raised below, not lost on the thread
            errors.append(e)

    case.setup(w)
    thread = threading.Thread(target=later, daemon=True)
    caplog.clear()
    try:
        with caplog.at_level(logging.INFO, logger=KUBE_LOG):
            began = time.monotonic()
            thread.start()
            case.action(w, ex)
            took = time.monotonic() - began
    finally:
        thread.join(timeout=60)
        kube.close()
        case.undo(w)
    if errors:
        raise errors[0]
    refused = [r.getMessage() for r in caplog.records
               if r.name == KUBE_LOG and REFUSED in r.getMessage()]  # fmt: skip
    return Waited(took, len(polls), refused)


@pytest.mark.realkube
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_waits_follow_the_watches_and_poll_without_them(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    """Each ``watch`` of WAITS: with the rules, the bot's wait sees a change made during it
    with no poll and no refusal (the watch answered); bound without the verb, the same
    action still sees the change and succeeds, the adapter logging the refused watch and
    polling. Every other ``watch`` of the rules has a probe of the previous test (needed)."""
    w = world
    _install(w)
    cluster_role, role = tfs.load_rules()
    rules = {"ClusterRole": cluster_role, "Role": role}
    watches = {(resource, verb, kind) for kind, full in rules.items()
               for _, resource, verb in tfs.rule_verbs(full) if verb == "watch"}  # fmt: skip
    # The one other watch is kubectl's, on a CRD it waits for (the audit test shows it used).
    assert watches - {("customresourcedefinitions", "watch", "ClusterRole")} == set(WAITS)
    timings: dict[str, str] = {}
    for (resource, verb, kind), cases in WAITS.items():
        full = rules[kind]
        (index,) = [i for i, r, v in tfs.rule_verbs(full) if (r, v) == (resource, verb)]
        less = tfs.without(full, index, resource, verb)
        for case in cases:
            watched = _waiting(w, case, caplog)
            assert (watched.polls, watched.refused) == (0, []), (case.name, watched)
            assert watched.seconds < EARLY, (case.name, watched)
            w.bot.grant(less if kind == "ClusterRole" else cluster_role,
                        less if kind == "Role" else role)  # fmt: skip
            try:
                polled = _waiting(w, case, caplog)
            finally:
                w.bot.grant(cluster_role, role)
            assert polled.polls > 0, (case.name, polled)
            assert polled.seconds < EARLY, (case.name, polled)
            assert [line for line in polled.refused
                    if f"{REFUSED} {case.kind} (HTTP 403" in line], (case.name, polled)  # fmt: skip
            timings[f"{kind} {verb} {resource}: {case.name}"] = (
                f"watched {watched.seconds:.2f}s, polled {polled.seconds:.2f}s "
                f"({polled.polls} pauses)"
            )
    print(json.dumps(timings, indent=1))
