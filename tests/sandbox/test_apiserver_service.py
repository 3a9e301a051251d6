"""Services get a cluster IP as a real API server allocates them (10.96.0.0/12, stable across
updates, immutable, none for headless), so helm 3's ``--wait`` (which waits for
``spec.clusterIP``) finishes on a chart with a Service: the example TensorFusion chart."""

from __future__ import annotations

import ipaddress
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gitopsbot.sandbox.apiserver import ApiServer, Invalid
from gitopsbot.sandbox.apiserver.store import Store

ROOT = Path(__file__).resolve().parents[2]
CHART_1_8_0 = ROOT / "examples" / "charts" / "repo" / "tensor-fusion-1.8.0.tgz"
POOL = ipaddress.ip_network("10.96.0.0/12")

Run = Callable[..., subprocess.CompletedProcess[str]]  # the `run` fixture (conftest.py)


def svc(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"selector": {"app": name}, "ports": [{"port": 80}], **spec},
    }


def test_cluster_ip_allocated_from_the_service_range_and_unique() -> None:
    s = Store()
    ips = []
    for i in range(20):
        spec = s.create(svc(f"s{i}"))["spec"]
        ip = spec["clusterIP"]
        assert ipaddress.ip_address(ip) in POOL
        assert spec["clusterIPs"] == [ip]
        assert spec["type"] == "ClusterIP"
        ips.append(ip)
    assert len(set(ips)) == len(ips)
    assert "10.96.0.1" not in ips  # the kubernetes Service's address


def test_cluster_ip_stable_across_updates_and_immutable() -> None:
    s = Store()
    ip = s.create(svc("web"))["spec"]["clusterIP"]
    patched = s.patch_merge("v1", "Service", "default", "web", {"spec": {"selector": {"a": "b"}}})
    assert patched["spec"]["clusterIP"] == ip
    stored = s.get("v1", "Service", "default", "web")
    assert stored is not None
    # A full update that omits the address keeps it, as the real API server does.
    blank = {**stored, "spec": {k: v for k, v in stored["spec"].items() if "clusterIP" not in k}}
    assert s.update(blank)["spec"]["clusterIP"] == ip
    moved = s.get("v1", "Service", "default", "web")
    assert moved is not None
    moved["spec"]["clusterIP"] = "10.96.7.7" if ip != "10.96.7.7" else "10.96.7.8"
    moved["spec"]["clusterIPs"] = [moved["spec"]["clusterIP"]]
    with pytest.raises(Invalid, match="immutable"):
        s.update(moved)


def test_requested_headless_and_external_name() -> None:
    s = Store()
    assert s.create(svc("pinned", clusterIP="10.100.0.10"))["spec"]["clusterIPs"] == ["10.100.0.10"]
    with pytest.raises(Invalid, match="already allocated"):
        s.create(svc("clash", clusterIP="10.100.0.10"))
    headless = s.create(svc("headless", clusterIP="None"))["spec"]
    assert headless["clusterIP"] == "None" and headless["clusterIPs"] == ["None"]
    ext = s.create(svc("ext", type="ExternalName", externalName="example.com"))["spec"]
    assert "clusterIP" not in ext


@pytest.mark.slow
def test_helm3_upgrade_install_wait_of_the_example_chart(apiserver: ApiServer, run: Run) -> None:
    # helm 3's ReadyChecker waits for the Service's clusterIP and the controller Deployment;
    # the emulator's kubelet makes the Deployment ready (no simulator needed for this).
    proc = run(
        "helm3",
        "upgrade",
        "--install",
        "tf",
        str(CHART_1_8_0),
        "--namespace",
        "tensor-fusion-sys",
        "--create-namespace",
        "--wait",
        "--timeout",
        "30s",
    )
    assert "STATUS: deployed" in proc.stdout
    services = apiserver.store.list("v1", "Service", "tensor-fusion-sys")
    assert services and all(ipaddress.ip_address(s["spec"]["clusterIP"]) in POOL for s in services)
