"""HelmCli against real helm 3 and helm 4 and the API emulator, beyond the shared contract.

Covers: the post-renderer really rewrites the TensorFusionCluster helm applies (F1: every
switch false, batch settings from Git) on install and on upgrade, for helm 3 (executable)
and helm 4 (``postrenderer/v1`` plugin in the private HELM_PLUGINS); without a policy the
chart's own policy lands (the control case); a canary secret in the values never reaches
argv, logs or exceptions, and the 0600 values file is gone afterwards; version detection;
private helm directories; ``--wait`` with helm 4; pull of a local chart.
"""

from __future__ import annotations

import logging
import stat
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gitopsbot.adapters.helm import PLUGIN_NAME, HelmCli
from gitopsbot.adapters.kube import KubeCluster
from gitopsbot.core.model import MaintenanceWindow, PoolPolicy, RolloutPolicy
from gitopsbot.errors import HelmError
from gitopsbot.ports.helm import ChartRef
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
    helm_cli.upgrade(
        release="tf", namespace="default", chart=chart("1.8.7"), version="1.8.7",
        values=VALUES, description="control",
    )  # fmt: skip
    shared = _policies(kube)["shared"]
    assert shared["autoUpdateHypervisor"] is True
    assert shared["batchPercentage"] == 20


def test_post_renderer_pins_git_policy_with_switches_closed(
    helm_cli: HelmCli, kube: KubeCluster, chart: Charts
) -> None:
    for version, step in (("1.8.0", "install"), ("1.8.7", "helm-upgrade")):
        info = helm_cli.upgrade(
            release="tf", namespace="default", chart=chart(version), version=version,
            values=VALUES, description=f"gitopsbot op=op-9 step={step}",
            post_render_policy=POLICY,
        )  # fmt: skip
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
    args: dict[str, Any] = dict(
        release="tf", namespace="default", chart=chart("1.8.7"), version="1.8.7",
        values=VALUES, description="d", post_render_policy=POLICY,
    )  # fmt: skip
    helm_cli.upgrade(**args)
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
    helm_cli.upgrade(**{**args, "description": "again"})
    assert _policies(kube)["shared"]["autoUpdateHypervisor"] is False


def test_canary_secret_never_leaks(
    helm_cli: HelmCli,
    chart: Charts,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    seen: list[list[str]] = []
    files: list[tuple[Path, int, str]] = []
    real_run = subprocess.run

    def spy(argv: list[str], **kwargs: Any) -> Any:
        seen.append(list(argv))
        for arg in argv:  # the values file exists while helm runs, 0600, holding the secret
            path = Path(arg)
            if path.name == "values.json" and path.is_file():
                files.append((path, stat.S_IMODE(path.stat().st_mode), path.read_text()))
        return real_run(argv, **kwargs)

    monkeypatch.setattr(subprocess, "run", spy)
    values = {"agent": {"enrollToken": CANARY, "agentId": "agent-1"}}
    helm_cli.upgrade(
        release="tf", namespace="default", chart=chart("1.8.7"), version="1.8.7",
        values=values, description="d", post_render_policy=POLICY,
    )  # fmt: skip
    # A failing upgrade whose error text would echo the value: broken YAML in a template
    # value is not possible to force portably, so use a bad version of a repo chart instead
    # and check the secret is not in the error either.
    with pytest.raises(HelmError) as failure:
        helm_cli.upgrade(
            release="tf", namespace="default",
            chart=ChartRef(name="tensor-fusion", repo_url="http://127.0.0.1:9/charts"),
            version="9.9.9", values=values, description="d",
        )  # fmt: skip
    assert files, "helm was never given a values file"
    for path, mode, text in files:
        assert mode == 0o600
        assert CANARY in text
        assert not path.exists(), "the values file outlived the helm call"
    assert not any(CANARY in arg for argv in seen for arg in argv)
    assert CANARY not in str(failure.value)
    assert CANARY not in caplog.text
    assert not any((helm_cli.home / "work").iterdir())


def test_secret_echoed_by_helm_is_masked(helm_cli: HelmCli, chart: Charts, tmp_path: Path) -> None:
    """If helm's stderr carries a value (e.g. in a template error), the error masks it."""
    broken = tmp_path / "echo-chart"
    (broken / "templates").mkdir(parents=True)
    (broken / "Chart.yaml").write_text("apiVersion: v2\nname: echo\nversion: 0.1.0\n")
    (broken / "templates" / "fail.yaml").write_text('{{ fail (printf "bad %s" .Values.token) }}\n')
    with pytest.raises(HelmError) as failure:
        helm_cli.upgrade(
            release="echo", namespace="default", chart=ChartRef(path=str(broken)),
            version="0.1.0", values={"token": CANARY}, description="d",
        )  # fmt: skip
    assert "bad ***" in str(failure.value)
    assert CANARY not in str(failure.value)


def test_private_directories(helm_cli: HelmCli, chart: Charts) -> None:
    helm_cli.upgrade(
        release="tf", namespace="default", chart=chart("1.8.7"), version="1.8.7",
        values={}, description="d", post_render_policy=POLICY,
    )  # fmt: skip
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
    info = helm.upgrade(
        release="tf", namespace="default", chart=chart("1.8.7"), version="1.8.7",
        values={}, description="waited", wait=True, timeout_seconds=120,
    )  # fmt: skip
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
        info = helm_cli.upgrade(
            release="tf", namespace="default", chart=ref, version="1.8.7", values={},
            description="from repo", post_render_policy=POLICY,
        )  # fmt: skip
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
        helm.upgrade(
            release="tf", namespace="default", chart=chart("1.8.7"), version="1.8.7",
            values={}, description="d", post_render_policy=POLICY,
        )  # fmt: skip
    assert helm.history("tf", "default") == []
    assert kube.get(TF, "TensorFusionCluster", None, "tensor-fusion") is None
