"""The TensorFusion CRDs on the real server (issue 16 part 5e): what ``status.storedVersions``
holds after the crds step's server-side apply, what the server does with a CRD update that
would drop a stored version, and that the bot refuses such a chart before the server sees it
(the CRD-VERSION-DROP policy rule at plan and apply time; the crds step's live guard).

The version-drop scenario needs a CRD with two versions, which no TensorFusion chart has
yet: it runs on a copy of the real WorkloadProfile CRD in a test group
(``<plural>.crdtest.tensor-fusion.ai``), so the session's real TensorFusion CRDs stay as the
chart has them."""

from __future__ import annotations

import copy
import shutil
import urllib.error
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

import pytest
import yaml

from gitopsbot.adapters.builtin_policies import builtin_policy_documents
from gitopsbot.adapters.kube import KubeCluster
from gitopsbot.adapters.kubectl import KubectlCrdApplier
from gitopsbot.bot.steps.crds import crds as crds_step
from gitopsbot.core.charts.chart import Chart, parse_chart_files
from gitopsbot.core.charts.crd_diff import diff_charts
from gitopsbot.core.operations import operation
from gitopsbot.core.policy import Decision, PolicyInput, decide, evaluate, load_rules
from gitopsbot.core.records.journal import OperationKind, StepState
from gitopsbot.ports.helm import ChartRef, Helm
from tests.realkube import tf_support as tfs

pytestmark = [pytest.mark.realkube, pytest.mark.slow]

CRD_PATH = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
TEST_GROUP = "crdtest.tensor-fusion.ai"
_T0 = datetime(2026, 12, 3, tzinfo=UTC)


class _LocalChart:
    """What the crds step needs of Helm (``pull``): the chart directory at hand."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def pull(self, chart: ChartRef, version: str, dest: Path) -> Path:
        return self.path


def _chart(path: Path) -> Chart:
    files = {str(p.relative_to(path)): p.read_bytes() for p in path.rglob("*") if p.is_file()}
    return parse_chart_files(files, digest="test", source=str(path))


@pytest.fixture
def admin(control_plane: Any, binaries: dict[str, Path], tmp_path: Path) -> Iterator[Any]:
    """The admin's KubeCluster with the bot's kubectl CRD applier, as production wires it."""
    kubeconfig = control_plane.write_kubeconfig(tmp_path / "admin.kubeconfig")
    kubectl = KubectlCrdApplier(binaries["kubectl"], home=tmp_path / "kubectl",
                                kubeconfig=kubeconfig, retry_delays=())  # fmt: skip
    kube = KubeCluster.from_kubeconfig(
        kubeconfig, poll_seconds=0.05, crd_applier=kubectl.apply_crds
    )
    try:
        yield kube
    finally:
        kube.close()


def _crd(plane: Any, name: str) -> dict[str, Any]:
    found: dict[str, Any] = plane.request("GET", f"{CRD_PATH}/{name}")
    return found


def test_the_real_crds_are_stored_at_v1_and_a_second_apply_changes_nothing(
    control_plane: Any, admin: KubeCluster, tensor_fusion: Path, realkube_namespace: str
) -> None:
    docs = tfs.real_crds(tensor_fusion)
    names = tfs.crd_names(docs)
    assert len(names) == 12
    first = admin.apply_crds(docs)
    assert [(r.name, r.ok) for r in first] == [(n, True) for n in names], first
    assert {r.stored_versions for r in first} == {("v1",)}
    # Objects written at v1 keep v1 the only stored version.
    ns = realkube_namespace
    admin.create({"apiVersion": tfs.TF, "kind": "WorkloadProfile",
                  "metadata": {"name": "small", "namespace": ns}, "spec": {}})  # fmt: skip
    assert _crd(control_plane, "workloadprofiles.tensor-fusion.ai")["status"]["storedVersions"] == [
        "v1"
    ]
    before = {n: _crd(control_plane, n)["metadata"] for n in names}

    again = admin.apply_crds(docs)
    assert all(r.ok for r in again), again
    after = {n: _crd(control_plane, n)["metadata"] for n in names}
    # Server-side apply of the same content is a no-op: no new generation, not even a write.
    assert {n: m["generation"] for n, m in after.items()} == {
        n: m["generation"] for n, m in before.items()
    }
    assert {n: m["resourceVersion"] for n, m in after.items()} == {
        n: m["resourceVersion"] for n, m in before.items()
    }
    for meta in after.values():
        managers = {(e["manager"], e["operation"]) for e in meta["managedFields"]}
        assert ("gitopsbot", "Apply") in managers, managers


def test_a_changed_field_is_applied_and_taken_back_from_a_person(
    control_plane: Any, admin: KubeCluster, tensor_fusion: Path
) -> None:
    docs = tfs.real_crds(tensor_fusion)
    assert all(r.ok for r in admin.apply_crds(docs))
    name = "gpupools.tensor-fusion.ai"
    generation = _crd(control_plane, name)["metadata"]["generation"]
    # A person edits a field of the CRD (as ``kubectl edit`` does: an Update by another
    # manager), then the crds step applies the chart's CRDs again with --force-conflicts.
    edited = _crd(control_plane, name)
    edited["spec"]["names"]["shortNames"] = ["gp-by-hand"]
    control_plane.request("PUT", f"{CRD_PATH}/{name}?fieldManager=kubectl-edit", edited)
    assert _crd(control_plane, name)["spec"]["names"]["shortNames"] == ["gp-by-hand"]

    # The chart's change: one more printer column, as a chart version would add.
    changed = dict(docs)
    file = "tensor-fusion.ai_gpupools.yaml"
    crd = yaml.safe_load(changed[file])
    crd["spec"]["versions"][0].setdefault("additionalPrinterColumns", []).append(
        {"name": "Test", "type": "string", "jsonPath": ".status.phase"}
    )
    changed[file] = yaml.safe_dump(crd)
    results = admin.apply_crds(changed)
    assert all(r.ok and r.established for r in results), results
    live = _crd(control_plane, name)
    columns = [c["name"] for c in live["spec"]["versions"][0]["additionalPrinterColumns"]]
    assert "Test" in columns
    assert live["metadata"]["generation"] > generation
    # The person's field: the chart does not set shortNames, so it is not taken back (server-side
    # apply only touches the fields the applier sends); the person stays its owner.
    assert live["spec"]["names"].get("shortNames") == ["gp-by-hand"]
    owners = {e["manager"] for e in live["metadata"]["managedFields"]}
    assert {"gitopsbot", "kubectl-edit"} <= owners, owners
    # Put the real CRD back as the chart has it (for the session's other tests).
    edited = _crd(control_plane, name)
    edited["spec"]["names"].pop("shortNames", None)
    control_plane.request("PUT", f"{CRD_PATH}/{name}", edited)
    assert all(r.ok for r in admin.apply_crds(docs))


# -- a CRD update that would drop a stored version -------------------------------------------


def _two_version_copy(tensor_fusion: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """The real WorkloadProfile CRD in the test group: as shipped (v1 only), and as a later
    chart would ship it (v1 served, v2 added and made the storage version)."""
    text = (
        tensor_fusion / "chart-1.8.7" / "crds" / "tensor-fusion.ai_workloadprofiles.yaml"
    ).read_text()
    crd = yaml.safe_load(text)
    crd["spec"]["group"] = TEST_GROUP
    crd["metadata"] = {"name": f"{crd['spec']['names']['plural']}.{TEST_GROUP}"}
    v1 = crd["spec"]["versions"][0]
    v2 = copy.deepcopy(v1)
    v2["name"] = "v2"
    both = copy.deepcopy(crd)
    v1_served = copy.deepcopy(v1)
    v1_served["storage"] = False
    both["spec"]["versions"] = [v1_served, v2]
    return crd, both


@pytest.fixture
def test_crd(
    control_plane: Any, tensor_fusion: Path
) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    one, both = _two_version_copy(tensor_fusion)
    try:
        yield one, both
    finally:
        try:
            control_plane.request("DELETE", f"{CRD_PATH}/{one['metadata']['name']}")
        except urllib.error.HTTPError as e:
            if e.code != 404:
                raise


def test_the_server_refuses_dropping_a_stored_version_and_the_bot_refuses_first(
    control_plane: Any,
    admin: KubeCluster,
    tensor_fusion: Path,
    test_crd: tuple[dict[str, Any], dict[str, Any]],
    realkube_namespace: str,
    tmp_path: Path,
) -> None:
    one, both = test_crd
    name = one["metadata"]["name"]
    assert all(r.ok for r in admin.apply_crds({"v1.yaml": yaml.safe_dump(one)}))
    meta = {"name": "at-v1", "namespace": realkube_namespace}
    admin.create(
        {"apiVersion": f"{TEST_GROUP}/v1", "kind": "WorkloadProfile", "metadata": meta, "spec": {}}
    )
    results = admin.apply_crds({"both.yaml": yaml.safe_dump(both)})
    assert all(r.ok for r in results), results
    # The new storage version is recorded at once; v1 stays: objects may still be stored at v1.
    assert _crd(control_plane, name)["status"]["storedVersions"] == ["v1", "v2"]
    assert results[0].stored_versions == ("v1", "v2")

    # A chart that drops v1 while it is still stored: the real server refuses the update.
    dropped = copy.deepcopy(both)
    dropped["spec"]["versions"] = [both["spec"]["versions"][1]]
    refused = admin.apply_crds({"dropped.yaml": yaml.safe_dump(dropped)})
    assert not refused[0].ok
    assert "status.storedVersions[0]" in refused[0].message, refused[0].message
    assert '"v1": missing from spec.versions' in refused[0].message, refused[0].message
    assert "must remain in spec.versions until a storage migration" in refused[0].message
    served = [v["name"] for v in _crd(control_plane, name)["spec"]["versions"]]
    assert served == ["v1", "v2"]  # unchanged

    # The bot's crds step refuses such a chart before applying anything (R7), by the live
    # storedVersions: the server never sees the request.
    chart = tmp_path / "chart"
    (chart / "crds").mkdir(parents=True)
    (chart / "Chart.yaml").write_text("apiVersion: v2\nname: tensor-fusion\nversion: 1.9.0\n")
    (chart / "crds" / "wp.yaml").write_text(yaml.safe_dump(dropped))
    spec = tfs.fleet_spec(tmp_path / "fleet", namespace=realkube_namespace, repo=None,
                          tfc="unused", version="1.9.0")  # fmt: skip
    journal = operation.new_operation(
        kind=OperationKind.UPGRADE,
        cluster=tfs.CLUSTER,
        desired_sha="a" * 40,
        created_at=_T0,
        policy=spec.rollout,
    )
    version_before = _crd(control_plane, name)["metadata"]["resourceVersion"]
    out = crds_step(admin, cast(Helm, _LocalChart(chart)), journal, spec)
    assert out.state is StepState.FAILED, out.detail
    assert f"{name}: version(s) v1 still in status.storedVersions" in out.detail
    assert _crd(control_plane, name)["metadata"]["resourceVersion"] == version_before

    # And at plan and apply time, the policy gate denies the chart by comparing it with the
    # deployed chart's CRDs (CRD-VERSION-DROP, a hard rule): no operation starts.
    deployed_chart = tmp_path / "deployed"
    shutil.copytree(chart, deployed_chart)
    (deployed_chart / "Chart.yaml").write_text(
        "apiVersion: v2\nname: tensor-fusion\nversion: 1.8.7\n"
    )
    (deployed_chart / "crds" / "wp.yaml").write_text(yaml.safe_dump(both))
    verdicts = evaluate(
        load_rules(builtin_policy_documents()),
        PolicyInput(cluster=spec, crd_diff=diff_charts(_chart(deployed_chart), _chart(chart))),
    )
    denied = [v for v in verdicts if v.rule_id == "CRD-VERSION-DROP"]
    assert denied and "version-removed v1" in denied[0].message, verdicts
    assert decide(verdicts) is Decision.DENIED
