"""The whole sandbox on the real control plane (``SandboxOptions(control_plane=...)``), with a
hand-made ``helm upgrade --wait`` by real helm 3 and helm 4.

Aspects: the sandbox installs the chart with helm 4 on the real server and its cluster
becomes Running; ``helm upgrade --wait`` to 1.8.7 returns once the real Deployment
controller reports the new controller ready (helm 3's legacy wait reads ReplicaSets and
pods, helm 4's watcher the Deployment's status); the chart's new hypervisor image rolls to
every node; what the sandbox made is gone after it stops.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from gitopsbot.sandbox.environment import Sandbox, SandboxOptions
from gitopsbot.sandbox.simulator.controller import CONTROLLER_SELECTOR

pytestmark = [pytest.mark.realkube, pytest.mark.slow]

TF = "tensor-fusion.ai/v1"
NS = "tensor-fusion-sys"
NEW = "tensorfusion/tensor-fusion-hypervisor:2.15.0"


@pytest.mark.parametrize("helm", ["helm3", "helm4"])
def test_helm_upgrade_wait_on_the_real_server_and_a_clean_exit(
    control_plane: Any, binaries: dict[str, Path], tmp_path: Path, helm: str
) -> None:
    sb = Sandbox(
        SandboxOptions(
            state_dir=tmp_path / "sandbox",
            nodes=2,
            chart_version="1.8.0",
            controller_ready_delay=1.0,
            hypervisor_ready_delay=0.2,
            control_plane=control_plane,
        )
    )
    try:
        state = sb.start()
        assert state.apiserver_url == control_plane.url
        assert sb.repo is not None
        store = sb.store
        started = time.monotonic()
        proc = subprocess.run(
            [str(binaries[helm]), "upgrade", "tensor-fusion-sys", "tensor-fusion",
             "--repo", sb.repo.url, "--version", "1.8.7", "-n", NS, "--wait",
             "--timeout", "90s", "--kubeconfig", str(sb.kubeconfig)],
            capture_output=True, text=True, env=sb.helm_env(), timeout=150,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        # --wait waited for the new controller pod: bound, run after its delay, and counted
        # by the real Deployment controller.
        assert time.monotonic() - started >= 1.0
        dep = store.get("apps/v1", "Deployment", NS, "tensor-fusion-sys-controller")
        assert dep is not None
        status = dep.get("status") or {}
        assert status.get("updatedReplicas") == status.get("readyReplicas") == 1
        assert status.get("observedGeneration") == dep["metadata"]["generation"]
        pods = store.list("v1", "Pod", NS, label_selector=CONTROLLER_SELECTOR)
        running = [p for p in pods if (p.get("status") or {}).get("phase") == "Running"]
        assert running and all(p["spec"]["nodeName"] for p in running)

        deadline = time.monotonic() + 60
        while True:
            hypervisors = store.list(
                "v1", "Pod", NS, label_selector={"tensor-fusion.ai/component": "hypervisor"}
            )
            images = {p["spec"]["containers"][0]["image"] for p in hypervisors}
            pool = store.get(TF, "GPUPool", None, "tensor-fusion-shared") or {}
            synced = ((pool.get("status") or {}).get("componentStatus") or {}).get(
                "hypervisorConfigSynced"
            )
            if images == {NEW} and synced:
                break
            assert time.monotonic() < deadline, (images, pool.get("status"))
            time.sleep(0.2)
    finally:
        sb.stop()
    leftovers = control_plane.request("GET", "/api/v1/namespaces")["items"]
    assert NS not in {n["metadata"]["name"] for n in leftovers}
    crds = control_plane.request("GET", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions")
    assert not [c for c in crds["items"] if c["metadata"]["name"].endswith(".tensor-fusion.ai")]
