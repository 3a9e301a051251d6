"""Break-glass with real helm 3 and helm 4: what a person does when the bot is out of the way.
A (fault injection) runs against the API emulator; B and C against both servers, the emulator
and the real control plane.

Covers:
- a release left pending-upgrade by a helm killed (SIGKILL) mid-upgrade refuses the next
  ``helm upgrade`` ("another operation ... is in progress");
  ``Cluster.mark_helm_release_failed`` turns that revision failed (``helm history`` says so,
  with the reason), a new ``helm upgrade`` then succeeds, a second call changes nothing, and
  no value of the release reaches the log;
- after the bot's merge patch of a pool switch (field manager "gitopsbot", an update owner of
  the atomic list ``.spec.gpuPools``), a plain helm 4 ``helm upgrade -f values.yaml`` that
  changes a pool value fails with the "gitopsbot" conflict, and succeeds once
  ``Cluster.release_fields`` has dropped the bot's ownership; a helm 4 ``helm rollback``
  behaves the same; helm 3 (client-side) succeeds either way; helm 4 with
  ``--server-side=false`` does not conflict, and the release stays client-side after it
  (``--server-side=auto`` follows the last revision).
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from gitopsbot.adapters.kube import KubeCluster
from gitopsbot.ports.helm import UpgradeRequest
from gitopsbot.sandbox.apiserver import ApiServer
from tests.kube_pods import EMULATOR_ONLY, ON_BOTH_SERVERS

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[3]
WIDGET = ROOT / "tests" / "sandbox" / "charts" / "widget"
TENSOR_FUSION = ROOT / "examples" / "charts" / "tensor-fusion-1.8.7"
TF = "tensor-fusion.ai/v1"
NS = "default"
TFC = "tensor-fusion"  # the chart's cluster.name
OLD_IMAGE = "tensorfusion/tensor-fusion-hypervisor:2.15.0"
NEW_IMAGE = "tensorfusion/tensor-fusion-hypervisor:2.16.0"
SECRET_VALUE = "s3cr3t-in-the-release-values"


class Helm:
    """One real helm binary against the emulator, with a private HOME and caches."""

    def __init__(self, binary: Path, kubeconfig: Path, home: Path) -> None:
        home.mkdir(parents=True, exist_ok=True)
        self.argv = [str(binary), "--kubeconfig", str(kubeconfig)]
        self.env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(home),
            "XDG_CACHE_HOME": str(home / ".cache"),
            "XDG_CONFIG_HOME": str(home / ".config"),
            "XDG_DATA_HOME": str(home / ".local" / "share"),
        }

    def __call__(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            [*self.argv, *args], env=self.env, capture_output=True, text=True, timeout=120
        )
        if check and proc.returncode != 0:
            raise AssertionError(f"helm {' '.join(args)}: {proc.returncode}\n{proc.stderr}")
        return proc

    def start(self, *args: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [*self.argv, *args],
            env=self.env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            text=True,
        )

    def history(self, release: str) -> list[dict[str, Any]]:
        entries: list[dict[str, Any]] = json.loads(self("history", release, "-o", "json").stdout)
        return entries


@pytest.fixture(params=["helm3", "helm4"])
def helm(
    request: pytest.FixtureRequest, binaries: dict[str, Path], kubeconfig: Path, tmp_path: Path
) -> Helm:
    return Helm(binaries[request.param], kubeconfig, tmp_path / "home")


def _helm(tool: str, binaries: dict[str, Path], kubeconfig: Path, tmp_path: Path) -> Helm:
    return Helm(binaries[tool], kubeconfig, tmp_path / f"home-{tool}")


def _wait_for(what: str, condition: Any, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


# -- A: a release stuck in pending-upgrade by a killed helm -------------------------------------


@EMULATOR_ONLY  # fault injection holds the upgrade where it is killed
def test_unlock_a_release_a_killed_helm_left_pending(
    helm: Helm, api: ApiServer, kube: KubeCluster, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    helm("install", "w", str(WIDGET), "-n", NS)
    # The upgrade stalls on its first Deployment request (the release Secret of revision 2,
    # pending-upgrade, is written before any resource), and is killed there.
    deployments = f"/apis/apps/v1/namespaces/{NS}/deployments*"

    def answered() -> int:
        return sum(1 for _, path, _ in list(api.requests) if "/deployments" in path)

    before = answered()
    held = api.faults.latency(3.0, path=deployments)
    upgrade = helm.start(
        "upgrade", "w", str(WIDGET), "-n", NS, "--set", "image=registry.example/widget:2.0.0",
        "--set-string", f"password={SECRET_VALUE}",
    )  # fmt: skip
    try:
        _wait_for("helm to reach the held Deployment request", lambda: held.hits > 0)
        secret = api.store.get("v1", "Secret", NS, "sh.helm.release.v1.w.v2")
        assert secret is not None and secret["metadata"]["labels"]["status"] == "pending-upgrade"
    finally:
        upgrade.kill()  # SIGKILL: helm gets no chance to record anything
        upgrade.wait()
    api.faults.clear()
    hits = held.hits
    # The held requests are answered before the next helm starts.
    _wait_for("held requests to finish", lambda: answered() - before >= hits)
    assert helm.history("w")[-1]["status"] == "pending-upgrade"

    refused = helm("upgrade", "w", str(WIDGET), "-n", NS, check=False)
    assert refused.returncode != 0
    assert "another operation (install/upgrade/rollback) is in progress" in refused.stderr

    with caplog.at_level(logging.DEBUG):
        assert kube.mark_helm_release_failed(NS, "w", 2, "helm killed; unlocked by alice") is True
    assert SECRET_VALUE not in caplog.text
    last = helm.history("w")[-1]
    assert (last["revision"], last["status"]) == (2, "failed")
    assert last["description"].endswith("; helm killed; unlocked by alice")
    assert kube.mark_helm_release_failed(NS, "w", 2, "again") is False

    helm("upgrade", "w", str(WIDGET), "-n", NS, "--set", "image=registry.example/widget:2.0.0")
    history = helm.history("w")
    assert [(h["revision"], h["status"]) for h in history] == [
        (1, "superseded"),
        (2, "failed"),
        (3, "deployed"),
    ]
    deployment = api.store.get("apps/v1", "Deployment", NS, "w-app")
    assert deployment is not None
    image = deployment["spec"]["template"]["spec"]["containers"][0]["image"]
    assert image == "registry.example/widget:2.0.0"


# -- B: the bot's field ownership and a person's helm upgrade ------------------------------------


def _bot_switch(kube: KubeCluster, *, open_: bool) -> None:
    """What the executor's set_switch sends: the whole gpuPools list by merge patch, with the
    resourceVersion read (field manager "gitopsbot")."""
    tfc = kube.get(TF, "TensorFusionCluster", None, TFC)
    assert tfc is not None
    pools = tfc["spec"]["gpuPools"]
    policy = pools[0]["specTemplate"]["nodeManagerConfig"]["nodePoolRollingUpdatePolicy"]
    policy["autoUpdateHypervisor"] = open_
    patch = {"metadata": {"resourceVersion": tfc["metadata"]["resourceVersion"]},
             "spec": {"gpuPools": pools}}  # fmt: skip
    kube.patch_merge(TF, "TensorFusionCluster", None, TFC, patch)


def _tfc(kube: KubeCluster) -> dict[str, Any]:
    tfc = kube.get(TF, "TensorFusionCluster", None, TFC)
    assert tfc is not None
    return tfc


def _pool_image(kube: KubeCluster) -> str:
    components = _tfc(kube)["spec"]["gpuPools"][0]["specTemplate"]["componentConfig"]
    image: str = components["hypervisor"]["image"]
    return image


def _owners_of_pools(kube: KubeCluster) -> list[tuple[str, str]]:
    return [
        (e["manager"], e["operation"])
        for e in _tfc(kube)["metadata"].get("managedFields") or []
        if "f:gpuPools" in (e.get("fieldsV1") or {}).get("f:spec", {})
    ]


@pytest.fixture
def values(tmp_path: Path) -> Path:
    """A person's values file: a pool value changed (the hypervisor image, in .spec.gpuPools)."""
    path = tmp_path / "values.yaml"
    path.write_text(f"cluster:\n  hypervisorImage: {NEW_IMAGE}\n")
    return path


@ON_BOTH_SERVERS
def test_helm4_upgrade_conflicts_with_the_bot_until_its_fields_are_released(
    binaries: dict[str, Path],
    kubeconfig: Path,
    tmp_path: Path,
    ns: str,
    kube: KubeCluster,
    values: Path,
) -> None:
    helm = _helm("helm4", binaries, kubeconfig, tmp_path)
    helm("install", "tf", str(TENSOR_FUSION), "-n", ns)
    assert _owners_of_pools(kube) == [("helm", "Apply")]
    _bot_switch(kube, open_=False)
    assert _owners_of_pools(kube) == [("gitopsbot", "Update")]

    refused = helm("upgrade", "tf", str(TENSOR_FUSION), "-n", ns, "-f", str(values), check=False)
    assert refused.returncode != 0
    assert 'conflict with "gitopsbot"' in refused.stderr
    assert ".spec.gpuPools" in refused.stderr
    assert _pool_image(kube) == OLD_IMAGE

    assert kube.release_fields(TF, "TensorFusionCluster", None, TFC) is True
    managers = [e["manager"] for e in _tfc(kube)["metadata"]["managedFields"]]
    assert "gitopsbot" not in managers and "helm" in managers
    helm("upgrade", "tf", str(TENSOR_FUSION), "-n", ns, "-f", str(values))
    assert _pool_image(kube) == NEW_IMAGE
    assert _owners_of_pools(kube) == [("helm", "Apply")]
    assert kube.release_fields(TF, "TensorFusionCluster", None, TFC) is False

    # A rollback is a server-side apply too: the same conflict, the same way out.
    _bot_switch(kube, open_=False)
    refused = helm("rollback", "tf", "1", "-n", ns, check=False)
    assert refused.returncode != 0
    assert 'conflict with "gitopsbot"' in refused.stderr
    assert kube.release_fields(TF, "TensorFusionCluster", None, TFC) is True
    helm("rollback", "tf", "1", "-n", ns)
    assert _pool_image(kube) == OLD_IMAGE


@ON_BOTH_SERVERS
@pytest.mark.parametrize("released", [False, True], ids=["as-is", "released"])
def test_helm3_upgrade_succeeds_either_way(
    released: bool,
    binaries: dict[str, Path],
    kubeconfig: Path,
    tmp_path: Path,
    ns: str,
    kube: KubeCluster,
    values: Path,
) -> None:
    helm = _helm("helm3", binaries, kubeconfig, tmp_path)
    helm("install", "tf", str(TENSOR_FUSION), "-n", ns)
    _bot_switch(kube, open_=False)
    if released:
        assert kube.release_fields(TF, "TensorFusionCluster", None, TFC) is True
    helm("upgrade", "tf", str(TENSOR_FUSION), "-n", ns, "-f", str(values))
    assert _pool_image(kube) == NEW_IMAGE
    # helm 3's three-way merge patch replaces the list: the bot's switch is gone with it.
    policy = _tfc(kube)["spec"]["gpuPools"][0]["specTemplate"]["nodeManagerConfig"]
    assert policy["nodePoolRollingUpdatePolicy"]["autoUpdateHypervisor"] is True


@ON_BOTH_SERVERS
def test_helm4_client_side_upgrade_does_not_conflict(
    binaries: dict[str, Path],
    kubeconfig: Path,
    tmp_path: Path,
    ns: str,
    kube: KubeCluster,
    values: Path,
) -> None:
    helm = _helm("helm4", binaries, kubeconfig, tmp_path)
    helm("install", "tf", str(TENSOR_FUSION), "-n", ns)
    _bot_switch(kube, open_=False)
    helm("upgrade", "tf", str(TENSOR_FUSION), "-n", ns, "-f", str(values), "--server-side=false")
    assert _pool_image(kube) == NEW_IMAGE
    # --server-side=auto follows the last revision: the release is client-side from now on.
    _bot_switch(kube, open_=False)
    helm("upgrade", "tf", str(TENSOR_FUSION), "-n", ns, "--reset-values")
    assert _pool_image(kube) == OLD_IMAGE


# -- C: the bot's own switch step leaves no ownership behind; its helm 4 after helm 3 ------------


def _spec_for_the_chart(tmp_path: Path, ns: str) -> Any:
    """A ClusterSpec naming this chart's TensorFusionCluster and its first pool."""
    from gitopsbot.adapters.localfiles import DirectoryTree
    from gitopsbot.fleetrepo import load_cluster

    root = tmp_path / "fleet" / "clusters" / "lab"
    root.mkdir(parents=True)
    (root / "release.yaml").write_text(
        "chart:\n  repository: https://charts.example.invalid\n  name: tensor-fusion\n"
        f"  version: 1.8.7\nrelease:\n  name: tf\n  namespace: {ns}\nenvironment: staging\n"
    )
    (root / "values.yaml").write_text(f"cluster:\n  name: {TFC}\n")
    (root / "rollout.yaml").write_text(
        "order: [shared]\npools:\n  shared:\n    autoUpdateHypervisor: true\n"
        "    batchPercentage: 50\n    phases: [hypervisor]\n"
    )
    return load_cluster(DirectoryTree(tmp_path / "fleet"), "lab")


@ON_BOTH_SERVERS
def test_the_bots_switch_step_leaves_a_plain_helm4_upgrade_possible(
    binaries: dict[str, Path],
    kubeconfig: Path,
    tmp_path: Path,
    ns: str,
    kube: KubeCluster,
    values: Path,
) -> None:
    from gitopsbot.bot.steps.pool_switch import set_switch
    from gitopsbot.core.fleet.model import Component

    helm = _helm("helm4", binaries, kubeconfig, tmp_path)
    helm("install", "tf", str(TENSOR_FUSION), "-n", ns)
    pool = _tfc(kube)["spec"]["gpuPools"][0]["name"]
    spec = _spec_for_the_chart(tmp_path, ns)
    set_switch(kube, spec, pool, Component.HYPERVISOR, open_=True)
    set_switch(kube, spec, pool, Component.HYPERVISOR, open_=False)
    managers = [e.get("manager") for e in _tfc(kube)["metadata"].get("managedFields") or []]
    assert "gitopsbot" not in managers, managers
    # The product page's manual command, as typed: no --force-conflicts.
    helm("upgrade", "tf", str(TENSOR_FUSION), "-n", ns, "-f", str(values))
    assert _pool_image(kube) == NEW_IMAGE


@ON_BOTH_SERVERS
def test_the_bots_helm4_upgrades_a_release_helm3_installed(
    binaries: dict[str, Path], kubeconfig: Path, tmp_path: Path, ns: str, kube: KubeCluster
) -> None:
    from gitopsbot.adapters.helm import HelmCli
    from gitopsbot.ports.helm import ChartRef

    helm3 = _helm("helm3", binaries, kubeconfig, tmp_path)
    helm3("install", "tf", str(TENSOR_FUSION), "-n", ns)  # client-side
    bot = HelmCli(binaries["helm4"], home=tmp_path / "bot-helm", kubeconfig=kubeconfig)
    info = bot.upgrade(
        UpgradeRequest(
            release="tf",
            namespace=ns,
            chart=ChartRef(path=str(TENSOR_FUSION)),
            version="1.8.7",
            values={"cluster": {"hypervisorImage": NEW_IMAGE}},
            description="gitopsbot op=lab-aaaaaaaaaaaa step=helm-upgrade",
        )
    )
    assert info.status.value == "deployed", info
    assert _pool_image(kube) == NEW_IMAGE
