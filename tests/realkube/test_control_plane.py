"""The real control plane itself: it starts, it is the pinned release, it authenticates by
token and authorizes by RBAC alone, its controllers run Deployments, and it stops — also when
the process that started it is killed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.realkube, pytest.mark.slow]

HERE = Path(__file__).resolve().parent


def _pinned_version() -> str:
    for line in (HERE / "go.mod").read_text().splitlines():
        parts = line.split()
        if "k8s.io/kubernetes" in parts:
            return parts[parts.index("k8s.io/kubernetes") + 1]
    raise AssertionError("go.mod pins no k8s.io/kubernetes")


def test_it_is_the_pinned_release_and_kubectl_parses_it(
    control_plane: Any, binaries: dict[str, Path], tmp_path: Path
) -> None:
    kubeconfig = control_plane.write_kubeconfig(tmp_path / "kubeconfig")
    out = subprocess.run(
        [str(binaries["kubectl"]), "--kubeconfig", str(kubeconfig), "version", "-o", "json"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    server = json.loads(out.stdout)["serverVersion"]
    assert server["gitVersion"] == _pinned_version()
    assert server["minor"] == _pinned_version().split(".")[1]


def test_a_service_account_without_roles_is_forbidden(
    control_plane: Any, realkube_namespace: str
) -> None:
    token = control_plane.service_account_token(realkube_namespace, "nobody")
    with pytest.raises(urllib.error.HTTPError) as err:
        control_plane.request(
            "GET", f"/api/v1/namespaces/{realkube_namespace}/configmaps", token=token
        )
    assert err.value.code == 403
    with pytest.raises(urllib.error.HTTPError) as err:
        control_plane.request("GET", "/api/v1/namespaces", token="not-a-token")
    assert err.value.code == 401


def test_the_deployment_controller_makes_a_replica_set_and_a_pending_pod(
    control_plane: Any, realkube_namespace: str
) -> None:
    ns = realkube_namespace
    labels = {"app": "web"}
    control_plane.request(
        "POST",
        f"/apis/apps/v1/namespaces/{ns}/deployments",
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "web"},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {"containers": [{"name": "c", "image": "busybox:1"}]},
                },
            },
        },
    )
    deadline = time.monotonic() + 30
    pods: list[Any] = []
    while time.monotonic() < deadline and not pods:
        pods = control_plane.request("GET", f"/api/v1/namespaces/{ns}/pods")["items"]
        time.sleep(0.2)
    assert pods, "kube-controller-manager made no pod"
    assert pods[0]["status"]["phase"] == "Pending"  # no scheduler, no kubelet
    owner = pods[0]["metadata"]["ownerReferences"][0]
    assert owner["kind"] == "ReplicaSet"


CHILD = """
import sys, time
from pathlib import Path
from gitopsbot.sandbox.controlplane import ControlPlane, ControlPlaneBinaries
plane = ControlPlane(ControlPlaneBinaries.in_dir(Path(sys.argv[1])), Path(sys.argv[2])).start()
print(plane.port, flush=True)
time.sleep(600)
"""


def test_its_processes_end_when_the_starter_is_killed(control_plane: Any, tmp_path: Path) -> None:
    bin_dir = control_plane.binaries.apiserver.parent
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(bin_dir), str(tmp_path / "cp")],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert child.stdout is not None
        port = int(child.stdout.readline())
        assert port
        pids = _pids_under(tmp_path / "cp")
        assert len(pids) == 3, pids  # etcd, kube-apiserver, kube-controller-manager
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and _alive(pids):
        time.sleep(0.2)
    assert not _alive(pids), "control plane processes outlived the killed test process"


def _pids_under(work_dir: Path) -> list[int]:
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if str(work_dir) in cmdline and "DEATH" not in cmdline and "-c\x00" not in cmdline:
            found.append(int(proc.name))
    return found


def _alive(pids: list[int]) -> bool:
    alive = []
    for pid in pids:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            continue
        state = Path(f"/proc/{pid}/stat").read_text().split()[2]
        if state != "Z":
            alive.append(pid)
    return bool(alive)
