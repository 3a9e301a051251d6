"""The sandbox environment and `gitopsbot sandbox up/down`.

Aspects: `up` (detached) installs the chosen chart with real helm, prints the KUBECONFIG to
export, and real kubectl/helm see pools, GPU nodes, hypervisors and the release; `down` stops
the process and closes every port, leaving nothing running; a helm upgrade to a chart with a
new hypervisor image, through the sandbox's chart repository, is rolled out by the simulator;
bad options are refused; registered services start and stop with the sandbox.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gitopsbot.sandbox import environment as env
from gitopsbot.sandbox.environment import Sandbox, SandboxOptions

ROOT = Path(__file__).resolve().parents[2]
TF = "tensor-fusion.ai/v1"


def _cli(*args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gitopsbot", "sandbox", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        env={**os.environ},
    )


def _port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.slow
def test_up_then_down_leaves_nothing_running(tmp_path: Path, binaries: dict[str, Path]) -> None:
    state_dir = tmp_path / "sbx"
    state: dict[str, Any] = {"pid": 0, "ports": []}
    up = _cli(
        "up",
        "--state-dir",
        str(state_dir),
        "--pools",
        "2",
        "--nodes",
        "2",
        "--chart-version",
        "1.8.0",
    )
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        kubeconfig = state_dir / "kubeconfig"
        assert f"export KUBECONFIG={kubeconfig}" in up.stdout
        state = json.loads((state_dir / "sandbox.json").read_text())
        assert state["ready"] and state["chart_version"] == "1.8.0"
        assert all(_port_open(p) for p in state["ports"])

        kenv = {**os.environ, "KUBECONFIG": str(kubeconfig), "HOME": str(tmp_path)}
        out = subprocess.run(
            [str(binaries["kubectl"]), "get", "gpupools", "-o", "name"],
            capture_output=True,
            text=True,
            env=kenv,
            check=True,
        ).stdout.split()
        assert sorted(out) == [
            "gpupool.tensor-fusion.ai/tensor-fusion-pool-2",
            "gpupool.tensor-fusion.ai/tensor-fusion-shared",
        ]
        pods = subprocess.run(
            [
                str(binaries["kubectl"]),
                "-n",
                "tensor-fusion-sys",
                "get",
                "pods",
                "-o",
                "json",
                "-l",
                "tensor-fusion.ai/component=hypervisor",
            ],
            capture_output=True,
            text=True,
            env=kenv,
            check=True,
        ).stdout
        images = {p["spec"]["containers"][0]["image"] for p in json.loads(pods)["items"]}
        assert images == {"tensorfusion/tensor-fusion-hypervisor:2.13.0"}
        assert len(json.loads(pods)["items"]) == 4
        listed = subprocess.run(
            [str(binaries["helm4"]), "-n", "tensor-fusion-sys", "list", "-o", "json"],
            capture_output=True,
            text=True,
            env={**kenv, "HELM_CACHE_HOME": str(tmp_path / "h")},
            check=True,
        ).stdout
        (release,) = json.loads(listed)
        assert release["chart"] == "tensor-fusion-1.8.0" and release["status"] == "deployed"

        again = _cli("up", "--state-dir", str(state_dir))
        assert again.returncode == 1 and "already running" in again.stderr
    finally:
        down = _cli("down", "--state-dir", str(state_dir))
    assert down.returncode == 0, down.stdout + down.stderr
    assert not _pid_alive(state["pid"])
    assert not any(_port_open(p) for p in state["ports"])
    assert not (state_dir / "sandbox.json").exists()
    # A second down is harmless.
    assert _cli("down", "--state-dir", str(state_dir)).returncode == 0


def test_bad_options_refused(tmp_path: Path) -> None:
    proc = _cli("up", "--state-dir", str(tmp_path), "--pools", "0")
    assert proc.returncode == 2
    assert "--pools" in proc.stderr


def test_help_mentions_up_and_down() -> None:
    proc = _cli("--help")
    assert proc.returncode == 0
    assert "up" in proc.stdout and "down" in proc.stdout
    up = _cli("up", "--help")
    assert "--chart-version" in up.stdout and "--foreground" in up.stdout


class _Marker:
    """A registered service: proves the hook starts and stops extra parts."""

    def __init__(self) -> None:
        self.url = "marker://started"
        self.events: list[str] = []

    def start(self) -> _Marker:
        self.events.append("start")
        return self

    def stop(self) -> None:
        self.events.append("stop")


@pytest.fixture
def sandbox(tmp_path: Path, binaries: dict[str, Path]) -> Iterator[tuple[Sandbox, _Marker]]:
    marker = _Marker()
    env.register_service("marker", lambda _sb: marker)
    options = SandboxOptions(
        state_dir=tmp_path / "sbx",
        nodes=3,
        chart_version="1.8.0",
        controller_ready_delay=0.2,
        hypervisor_ready_delay=0.1,
    )
    sb = Sandbox(options, helm=binaries["helm4"])
    try:
        sb.start()
        yield sb, marker
    finally:
        sb.stop()
        env.SERVICE_FACTORIES.pop("marker", None)


@pytest.mark.slow
def test_helm_upgrade_through_chart_repo_rolls_hypervisors(
    sandbox: tuple[Sandbox, _Marker], binaries: dict[str, Path]
) -> None:
    sb, marker = sandbox
    assert marker.events == ["start"]
    assert sb.state is not None and sb.state.services == {"marker": "marker://started"}
    assert sb.api is not None and sb.repo is not None
    store = sb.api.store

    def hypervisor_images() -> set[str]:
        pods = store.list(
            "v1",
            "Pod",
            "tensor-fusion-sys",
            label_selector={"tensor-fusion.ai/component": "hypervisor"},
        )
        return {p["spec"]["containers"][0]["image"] for p in pods}

    assert hypervisor_images() == {"tensorfusion/tensor-fusion-hypervisor:2.13.0"}
    proc = subprocess.run(
        [
            str(binaries["helm4"]),
            "upgrade",
            "tensor-fusion-sys",
            "tensor-fusion",
            "--repo",
            sb.repo.url,
            "--version",
            "1.8.7",
            "-n",
            "tensor-fusion-sys",
            "--kubeconfig",
            str(sb.kubeconfig),
        ],
        capture_output=True,
        text=True,
        env=sb.helm_env(),
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    deadline = time.monotonic() + 60

    def pool() -> dict[str, Any]:
        p = store.get(TF, "GPUPool", None, "tensor-fusion-shared")
        assert p is not None
        return p

    progress: set[int] = set()
    while time.monotonic() < deadline:
        comp = pool()["status"].get("componentStatus", {})
        progress.add(int(comp.get("hypervisorUpdateProgress") or 0))
        if hypervisor_images() == {"tensorfusion/tensor-fusion-hypervisor:2.15.0"} and comp.get(
            "hypervisorConfigSynced"
        ):
            break
        time.sleep(0.05)
    else:
        raise AssertionError(f"rollout did not finish: {pool()['status']}")
    # F1: the chart's hard-coded 20% batches at a 1 s interval, observed mid-way.
    assert progress & {20, 40, 60, 80}
    dep = store.get("apps/v1", "Deployment", "tensor-fusion-sys", "tensor-fusion-sys-controller")
    assert dep is not None
    assert dep["spec"]["template"]["spec"]["containers"][0]["image"].endswith(":2.17.0")


def test_stop_stops_services_and_removes_state(
    sandbox: tuple[Sandbox, _Marker],
) -> None:
    sb, marker = sandbox
    assert sb.state is not None
    ports = list(sb.state.ports)
    assert all(_port_open(p) for p in ports)
    sb.stop()
    assert marker.events == ["start", "stop"]
    assert not any(_port_open(p) for p in ports)
    assert not (sb.state_dir / "sandbox.json").exists()


@pytest.mark.slow
def test_rollout_status_and_replica_sets_follow_the_controller_upgrade(
    sandbox: tuple[Sandbox, _Marker], binaries: dict[str, Path]
) -> None:
    # The simulator owns the controller Deployment's readiness (with a delay). kubectl rollout
    # status reads the Deployment status; helm 3's legacy --wait also needs the new
    # ReplicaSet, ready, with the old one scaled to 0. (helm 3 --wait as a whole also waits for
    # the Service's clusterIP, which the emulator does not allocate yet.)
    sb, _ = sandbox
    assert sb.repo is not None and sb.api is not None
    proc = subprocess.run(
        [
            str(binaries["helm3"]),
            "upgrade",
            "tensor-fusion-sys",
            "tensor-fusion",
            "--repo",
            sb.repo.url,
            "--version",
            "1.8.7",
            "-n",
            "tensor-fusion-sys",
            "--kubeconfig",
            str(sb.kubeconfig),
        ],
        capture_output=True,
        text=True,
        env=sb.helm_env(),
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    status = subprocess.run(
        [
            str(binaries["kubectl"]),
            "--kubeconfig",
            str(sb.kubeconfig),
            "-n",
            "tensor-fusion-sys",
            "rollout",
            "status",
            "deploy/tensor-fusion-sys-controller",
            "--timeout=30s",
        ],
        capture_output=True,
        text=True,
        env=sb.helm_env(),
        timeout=60,
    )
    assert status.returncode == 0, status.stdout + status.stderr
    assert "successfully rolled out" in status.stdout
    dep = sb.api.store.get(
        "apps/v1", "Deployment", "tensor-fusion-sys", "tensor-fusion-sys-controller"
    )
    assert dep is not None
    image = dep["spec"]["template"]["spec"]["containers"][0]["image"]
    assert image.endswith(":2.17.0")
    rs = sb.api.store.list("apps/v1", "ReplicaSet", "tensor-fusion-sys")
    by_replicas = sorted(
        (r["spec"]["replicas"], r["spec"]["template"]["spec"]["containers"][0]["image"]) for r in rs
    )
    assert by_replicas == [(0, image.replace("2.17.0", "2.13.0")), (1, image)]


@pytest.mark.slow
def test_foreground_runs_until_interrupted(tmp_path: Path) -> None:
    state_dir = tmp_path / "fg"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gitopsbot",
            "sandbox",
            "up",
            "--foreground",
            "--nodes",
            "1",
            "--state-dir",
            str(state_dir),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        # A stop that does not end is dumped, every thread's stack, by SIGABRT (below).
        env={**os.environ, "PYTHONFAULTHANDLER": "1"},
        # Ctrl-C as a terminal delivers it, whatever pytest's parent did with SIGINT.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    err: list[str] = []
    try:
        assert proc.stdout is not None and proc.stderr is not None
        # Both pipes read to the end: a child blocked writing to a full pipe cannot exit.
        drain = threading.Thread(target=lambda: err.extend(proc.stderr), daemon=True)  # type: ignore[arg-type]
        drain.start()
        lines = []
        for line in proc.stdout:
            lines.append(line)
            if "export KUBECONFIG=" in line:
                break
        threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True).start()  # type: ignore[arg-type]
        assert any(f"export KUBECONFIG={state_dir / 'kubeconfig'}" in x for x in lines), lines
        state = json.loads((state_dir / "sandbox.json").read_text())
        assert state["pid"] == proc.pid and all(_port_open(p) for p in state["ports"])
        proc.send_signal(signal.SIGINT)
        # 130 as for every interrupted command (docs/commands.md, "Exit status"). A child that
        # does not exit is dumped, every thread's stack (the flake this caught: the main thread
        # asleep for an hour while another thread had taken the SIGINT).
        try:
            code = proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGABRT)
            proc.wait(timeout=30)
            drain.join(10)
            pytest.fail("no exit within 30 s of SIGINT; its threads:\n" + "".join(err)[-6000:])
        assert code == 130, "".join(err)[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert not any(_port_open(p) for p in state["ports"])
    assert not (state_dir / "sandbox.json").exists()
