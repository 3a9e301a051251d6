"""Sandbox fixtures: a fresh Kubernetes API emulator per test, its kubeconfig, and a runner
for the real helm/kubectl binaries with private HOME/XDG/cache dirs (no discovery cache is
shared between tests or with the developer's ~/.kube)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from gitopsbot.sandbox.apiserver import ApiServer

Run = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture
def apiserver() -> Iterator[ApiServer]:
    """A started emulator on a free loopback port, stopped after the test."""
    server = ApiServer(bookmark_interval=0.2)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def kubeconfig(apiserver: ApiServer, tmp_path: Path) -> Path:
    return apiserver.write_kubeconfig(tmp_path / "kubeconfig")


@pytest.fixture
def tool_env(tmp_path: Path, kubeconfig: Path) -> dict[str, str]:
    home = tmp_path / "home"
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "KUBECONFIG": str(kubeconfig),
        "KUBECACHEDIR": str(home / ".kube" / "cache"),
        "XDG_CACHE_HOME": str(home / ".cache"),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "XDG_DATA_HOME": str(home / ".local" / "share"),
        "HELM_CACHE_HOME": str(home / ".cache" / "helm"),
        "HELM_CONFIG_HOME": str(home / ".config" / "helm"),
        "HELM_DATA_HOME": str(home / ".local" / "share" / "helm"),
    }
    home.mkdir()
    return env


@pytest.fixture
def run(binaries: dict[str, Path], tool_env: dict[str, str], kubeconfig: Path) -> Run:
    """run("helm4"|"helm3"|"kubectl", *args, check=True) with --kubeconfig and a private HOME."""

    def _run(tool: str, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        cmd = [str(binaries[tool]), "--kubeconfig", str(kubeconfig), *args]
        proc = subprocess.run(
            cmd, env=tool_env, capture_output=True, text=True, timeout=120, check=False
        )
        if check and proc.returncode != 0:
            raise AssertionError(
                f"{tool} {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
            )
        return proc

    return _run
