"""HelmCli against real helm 3 and helm 4 and the API emulator, beyond the shared contract.

Covers: the post-renderer really rewrites the TensorFusionCluster helm applies (F1: every
switch false, batch settings from Git) on install and on upgrade, for helm 3 (executable)
and helm 4 (``postrenderer/v1`` plugin in the private HELM_PLUGINS); without a policy the
chart's own policy lands (the control case); a canary secret in the values (sent on stdin)
never reaches a file under the helm home (while helm runs, after it, and when helm is
killed mid-upgrade), argv, helm's environment, logs or exceptions; leftover work
directories of dead processes are removed at start; version detection; private helm
directories; ``--wait`` with helm 4; pull of a local chart.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from gitopsbot.adapters import helm_children as children
from gitopsbot.adapters.helm import PLUGIN_NAME, HelmCli
from gitopsbot.adapters.kube import KubeCluster
from gitopsbot.core.charts.observed import HelmReleaseStatus
from gitopsbot.core.fleet.model import MaintenanceWindow, PoolPolicy, RolloutPolicy
from gitopsbot.errors import HelmError
from gitopsbot.ports.helm import ChartRef, UpgradeRequest
from gitopsbot.sandbox.apiserver import ApiServer
from gitopsbot.sandbox.chartrepo import ChartRepo

pytestmark = pytest.mark.slow

Charts = Callable[[str], ChartRef]
TF = "tensor-fusion.ai/v1"
CANARY = "canary-Zq8w3-enroll-token-value"
POLICY = RolloutPolicy(
    pools=(
        PoolPolicy(
            name="shared",
            batch_percentage=10,
            batch_interval_seconds=120,
            max_duration_seconds=3600,
            maintenance_window=MaintenanceWindow("0 3 * * 6", 7200),
        ),
        PoolPolicy(name="training", batch_percentage=50, batch_interval_seconds=5),
    )
)
VALUES = {"cluster": {"extraPools": [{"name": "training"}]}}


def _policies(kube: KubeCluster) -> dict[str, dict[str, Any]]:
    tfc = kube.get(TF, "TensorFusionCluster", None, "tensor-fusion")
    assert tfc is not None, "the chart's TensorFusionCluster was not applied"
    return {
        pool["name"]: pool["specTemplate"]["nodeManagerConfig"]["nodePoolRollingUpdatePolicy"]
        for pool in tfc["spec"]["gpuPools"]
    }


def test_version_and_major_are_detected(helm_cli: HelmCli) -> None:
    assert helm_cli.version.startswith(f"v{helm_cli.major}.")
    assert helm_cli.major in (3, 4)


def test_without_policy_the_charts_own_policy_lands(
    helm_cli: HelmCli, kube: KubeCluster, chart: Charts
) -> None:
    """The control case for F1: the chart opens the hypervisor switch by itself."""
    helm_cli.upgrade(UpgradeRequest(
        release="tf", namespace="default", chart=chart("1.8.7"), version="1.8.7",
        values=VALUES, description="control",
    ))  # fmt: skip
    shared = _policies(kube)["shared"]
    assert shared["autoUpdateHypervisor"] is True
    assert shared["batchPercentage"] == 20


def test_post_renderer_pins_git_policy_with_switches_closed(
    helm_cli: HelmCli, kube: KubeCluster, chart: Charts
) -> None:
    for version, step in (("1.8.0", "install"), ("1.8.7", "helm-upgrade")):
        info = helm_cli.upgrade(UpgradeRequest(
            release="tf", namespace="default", chart=chart(version), version=version,
            values=VALUES, description=f"gitopsbot op=op-9 step={step}",
            post_render_policy=POLICY,
        ))  # fmt: skip
        assert info.chart_version == version
        policies = _policies(kube)
        for name, want in (("shared", (10, "2m")), ("training", (50, "5s"))):
            policy = policies[name]
            assert policy["autoUpdateHypervisor"] is False, (version, name)
            assert policy["autoUpdateWorker"] is False
            assert policy["autoUpdateClient"] is False
            assert (policy["batchPercentage"], policy["batchInterval"]) == want
        assert policies["shared"]["maxDuration"] == "1h"
        assert policies["shared"]["maintenanceWindow"] == {"includes": ["0 3 * * 6"]}
    if helm_cli.major >= 4:
        assert (helm_cli.home / "plugins" / PLUGIN_NAME / "plugin.yaml").is_file()


def test_bot_opens_switch_and_next_upgrade_closes_it(
    helm_cli: HelmCli, kube: KubeCluster, chart: Charts
) -> None:
    """The bot's merge patch opens a switch (R11); the next upgrade renders it closed again."""
    request = UpgradeRequest(
        release="tf", namespace="default", chart=chart("1.8.7"), version="1.8.7",
        values=VALUES, description="d", post_render_policy=POLICY,
    )  # fmt: skip
    helm_cli.upgrade(request)
    tfc = kube.get(TF, "TensorFusionCluster", None, "tensor-fusion")
    assert tfc is not None
    pools = tfc["spec"]["gpuPools"]
    pools[0]["specTemplate"]["nodeManagerConfig"]["nodePoolRollingUpdatePolicy"][
        "autoUpdateHypervisor"
    ] = True
    kube.patch_merge(
        TF, "TensorFusionCluster", None, "tensor-fusion", {"spec": {"gpuPools": pools}}
    )
    assert _policies(kube)["shared"]["autoUpdateHypervisor"] is True
    # Close it again before the next upgrade, as the executor does (docs/rollout-policy.md).
    pools[0]["specTemplate"]["nodeManagerConfig"]["nodePoolRollingUpdatePolicy"][
        "autoUpdateHypervisor"
    ] = False
    kube.patch_merge(
        TF, "TensorFusionCluster", None, "tensor-fusion", {"spec": {"gpuPools": pools}}
    )
    helm_cli.upgrade(replace(request, description="again"))
    assert _policies(kube)["shared"]["autoUpdateHypervisor"] is False


def _files_holding(root: Path, needle: str) -> list[Path]:
    """Every file under ``root`` whose bytes contain ``needle`` (grep -r); files and
    directories removed while it looks are skipped."""
    found = []
    for directory, _, names in os.walk(root):
        for name in names:
            path = Path(directory, name)
            try:
                if not path.is_symlink() and needle.encode() in path.read_bytes():
                    found.append(path)
            except OSError:
                continue
    return found


def _spy_popen(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """Record the argv of every process started (values must never be in one)."""
    seen: list[list[str]] = []
    real = subprocess.Popen

    def spy(argv: list[str], *args: Any, **kwargs: Any) -> Any:
        seen.append([str(a) for a in argv])
        return real(argv, *args, **kwargs)

    monkeypatch.setattr(subprocess, "Popen", spy)
    return seen


def test_canary_secret_never_touches_disk_argv_or_logs(
    helm_cli: HelmCli,
    chart: Charts,
    kubeconfig: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Values reach helm on stdin: while helm runs and afterwards, no file under the helm
    home holds the secret (grep of every file), nor any argv, log line or exception."""
    caplog.set_level(logging.DEBUG)
    seen = _spy_popen(monkeypatch)
    holding: list[Path] = []
    done = threading.Event()

    def watch() -> None:  # grep the whole home again and again while helm runs
        while not done.is_set():
            holding.extend(_files_holding(helm_cli.home, CANARY))
            time.sleep(0.02)

    watcher = threading.Thread(target=watch)
    watcher.start()
    values = {"agent": {"enrollToken": CANARY, "agentId": "agent-1"}}
    try:
        helm_cli.upgrade(UpgradeRequest(
            release="tf", namespace="default", chart=chart("1.8.7"), version="1.8.7",
            values=values, description="d", post_render_policy=POLICY,
        ))  # fmt: skip
    finally:
        done.set()
        watcher.join()
    assert helm_cli.get_values("tf", "default")["agent"]["enrollToken"] == CANARY  # it got there
    # A failing upgrade (a repository that is not there, retried without waiting).
    quick = HelmCli(
        helm_cli.binary, home=helm_cli.home, kubeconfig=kubeconfig, sleep=lambda _: None
    )
    with pytest.raises(HelmError) as failure:
        quick.upgrade(UpgradeRequest(
            release="tf", namespace="default",
            chart=ChartRef(name="tensor-fusion", repo_url="http://127.0.0.1:9/charts"),
            version="9.9.9", values=values, description="d",
        ))  # fmt: skip
    assert any("--values" in argv and "-" in argv for argv in seen)
    assert not any(CANARY in arg for argv in seen for arg in argv)
    assert CANARY not in str(failure.value)
    assert CANARY not in caplog.text
    assert holding == []
    assert _files_holding(helm_cli.home, CANARY) == []
    assert not any((helm_cli.home / "work").iterdir())


def test_canary_secret_not_on_disk_when_helm_is_killed(
    helm_cli: HelmCli, api: ApiServer, chart: Charts
) -> None:
    """helm killed (SIGKILL) in the middle of an upgrade: nothing under the helm home holds
    the secret, during the run or after; helm's own argv and environment do not either."""
    helm_cli.upgrade(UpgradeRequest(
        release="tf", namespace="default", chart=chart("1.8.0"), version="1.8.0",
        values={}, description="install",
    ))  # fmt: skip
    slow = api.faults.latency(3.0, path="*/tensorfusionclusters*")
    values = {"agent": {"enrollToken": CANARY}}
    errors: list[BaseException] = []

    def upgrade() -> None:
        try:
            helm_cli.upgrade(UpgradeRequest(
                release="tf", namespace="default", chart=chart("1.8.7"), version="1.8.7",
                values=values, description="gitopsbot op=op-c step=helm-upgrade",
                post_render_policy=POLICY,
            ))  # fmt: skip
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    worker = threading.Thread(target=upgrade)
    worker.start()
    pid = _wait_for_helm(helm_cli, "gitopsbot op=op-c step=helm-upgrade")
    _wait_until(lambda: slow.hits > 0)  # helm is applying the chart now
    assert _files_holding(helm_cli.home, CANARY) == []
    assert CANARY not in Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    assert CANARY not in Path(f"/proc/{pid}/environ").read_bytes().decode(errors="replace")
    os.killpg(pid, signal.SIGKILL)
    worker.join(timeout=30)
    assert errors and isinstance(errors[0], HelmError)
    assert CANARY not in str(errors[0])
    latest = helm_cli.status("tf", "default")  # helm had no chance to record anything
    assert latest is not None and latest.status is HelmReleaseStatus.PENDING_UPGRADE
    assert _files_holding(helm_cli.home, CANARY) == []
    assert not any((helm_cli.home / "work").iterdir())


def test_leftover_work_directories_are_removed_at_start(
    binaries: dict[str, Path], tmp_path: Path
) -> None:
    """A values file an older version left behind (a kill -9 while helm ran) and the work
    directory of a dead process are removed when a HelmCli starts; a live one's stays."""
    home = tmp_path / "home"
    legacy = home / "work" / "helm-a1b2c3"
    legacy.mkdir(parents=True)
    (legacy / "values.json").write_text(json.dumps({"token": CANARY}))
    dead = home / "work" / "helm-999999-12345-xyz"
    dead.mkdir()
    (dead / "policy.json").write_text("{}")
    live = home / "work" / f"helm-{children.process_tag()}-abc"
    live.mkdir()
    HelmCli(binaries["helm4"], home=home)
    assert not legacy.exists() and not dead.exists()
    assert live.is_dir()
    assert _files_holding(home, CANARY) == []


def _wait_until(condition: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.02)


def _runs(pid: int, binary: str) -> bool:
    """Process ``pid`` runs ``binary`` (the death-signal shim has exec'd helm)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().startswith(binary.encode())
    except OSError:
        return False


def _wait_for_helm(helm: HelmCli, description: str) -> int:
    """The pid of the running helm recorded with ``description`` (once it is helm itself)."""
    found: list[int] = []

    def recorded() -> bool:
        for path in (helm.home / "run").glob("helm-*.json"):
            try:
                record = json.loads(path.read_text())
            except (OSError, ValueError):
                continue
            if record["description"] == description and _runs(int(record["pid"]), helm.binary):
                found.append(int(record["pid"]))
                return True
        return False

    _wait_until(recorded)
    return found[0]


def test_secret_echoed_by_helm_is_masked(helm_cli: HelmCli, chart: Charts, tmp_path: Path) -> None:
    """If helm's stderr carries a value (e.g. in a template error), the error masks it."""
    broken = tmp_path / "echo-chart"
    (broken / "templates").mkdir(parents=True)
    (broken / "Chart.yaml").write_text("apiVersion: v2\nname: echo\nversion: 0.1.0\n")
    (broken / "templates" / "fail.yaml").write_text('{{ fail (printf "bad %s" .Values.token) }}\n')
    with pytest.raises(HelmError) as failure:
        helm_cli.upgrade(UpgradeRequest(
            release="echo", namespace="default", chart=ChartRef(path=str(broken)),
            version="0.1.0", values={"token": CANARY}, description="d",
        ))  # fmt: skip
    assert "bad ***" in str(failure.value)
    assert CANARY not in str(failure.value)


def test_private_directories(helm_cli: HelmCli, chart: Charts) -> None:
    helm_cli.upgrade(UpgradeRequest(
        release="tf", namespace="default", chart=chart("1.8.7"), version="1.8.7",
        values={}, description="d", post_render_policy=POLICY,
    ))  # fmt: skip
    env = helm_cli._env()
    for key in ("HELM_CONFIG_HOME", "HELM_CACHE_HOME", "HELM_DATA_HOME", "HELM_PLUGINS"):
        assert Path(env[key]).is_relative_to(helm_cli.home)
    assert Path(env["KUBECACHEDIR"]).is_relative_to(helm_cli.home)
    assert (helm_cli.home / "cache" / "kube").is_dir()  # helm really used the private cache
    assert stat.S_IMODE((helm_cli.home / "work").stat().st_mode) == 0o700


def test_wait_with_helm4(
    binaries: dict[str, Path], kubeconfig: Path, tmp_path: Path, chart: Charts
) -> None:
    helm = HelmCli(binaries["helm4"], home=tmp_path / "h", kubeconfig=kubeconfig)
    info = helm.upgrade(UpgradeRequest(
        release="tf", namespace="default", chart=chart("1.8.7"), version="1.8.7",
        values={}, description="waited", wait=True, timeout_seconds=120,
    ))  # fmt: skip
    assert info.status == "deployed"


def test_pull_local_chart(helm_cli: HelmCli, chart: Charts, tmp_path: Path) -> None:
    target = helm_cli.pull(chart("1.8.7"), "1.8.7", tmp_path / "pulled")
    assert (target / "Chart.yaml").is_file()
    assert (target / "crds").is_dir()


def test_pull_and_upgrade_from_a_chart_repository(
    helm_cli: HelmCli, kube: KubeCluster, tmp_path: Path
) -> None:
    """``--repo URL`` (R7's ``helm pull --repo``, R8's ``upgrade --repo``) over real HTTP."""
    repo_dir = Path(__file__).resolve().parents[3] / "examples" / "charts" / "repo"
    if not (repo_dir / "index.yaml").is_file():
        pytest.skip("examples/charts/repo is absent")
    with ChartRepo(repo_dir) as repo:
        ref = ChartRef(name="tensor-fusion", repo_url=repo.url)
        pulled = helm_cli.pull(ref, "1.8.0", tmp_path / "pulled")
        assert pulled.name == "tensor-fusion"
        assert "version: 1.8.0" in (pulled / "Chart.yaml").read_text()
        assert any((pulled / "crds").iterdir())
        info = helm_cli.upgrade(UpgradeRequest(
            release="tf", namespace="default", chart=ref, version="1.8.7", values={},
            description="from repo", post_render_policy=POLICY,
        ))  # fmt: skip
    assert (info.chart_version, info.app_version) == ("1.8.7", "2.17.0")
    assert _policies(kube)["shared"]["autoUpdateHypervisor"] is False


@pytest.mark.parametrize("tool", ["helm3", "helm4"])
def test_failing_post_renderer_aborts_the_upgrade(
    tool: str, binaries: dict[str, Path], kubeconfig: Path, tmp_path: Path, kube: KubeCluster,
    chart: Charts,
) -> None:  # fmt: skip
    """A broken policy never reaches the cluster: helm stops when the post-renderer fails."""
    failing = (sys.executable, "-c", "import sys; sys.exit(3)")
    helm = HelmCli(
        binaries[tool], home=tmp_path / "h", kubeconfig=kubeconfig, post_render_command=failing
    )
    with pytest.raises(HelmError, match="post"):
        helm.upgrade(UpgradeRequest(
            release="tf", namespace="default", chart=chart("1.8.7"), version="1.8.7",
            values={}, description="d", post_render_policy=POLICY,
        ))  # fmt: skip
    assert helm.history("tf", "default") == []
    assert kube.get(TF, "TensorFusionCluster", None, "tensor-fusion") is None
