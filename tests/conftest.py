"""Shared fixtures: the ../shared data (skipped with a reason where absent), binaries."""

from __future__ import annotations

import os
import subprocess
import sys
import urllib.error
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared"
TENSOR_FUSION = SHARED / "tensor-fusion"


@pytest.fixture(scope="session")
def tensor_fusion() -> Path:
    """../shared/tensor-fusion: the real chart's CRDs, values and index (read-only)."""
    if not TENSOR_FUSION.is_dir():
        pytest.skip("../shared/tensor-fusion is absent: real chart data not available here")
    return TENSOR_FUSION


@pytest.fixture(scope="session")
def binaries() -> dict[str, Path]:
    """Pinned helm 4, helm 3 and kubectl (fetched once into the cache)."""
    from gitopsbot import settings
    from gitopsbot.adapters import binaries as bins

    return {k: v for k, v in bins.ensure_all(settings.cache_dir()).items()}


# ---------------------------------------------------------------- the real control plane
# Tests marked ``realkube`` run against upstream kube-apiserver, kube-controller-manager and
# etcd (gitopsbot/sandbox/controlplane.py), built by tests/realkube/build.sh. Where Go or etcd
# is missing they are skipped with the reason, unless GITOPSBOT_REALKUBE=require (CI sets
# it), where they fail instead. docs/testing.md says how to run them alone.

REALKUBE_BUILD = ROOT / "tests" / "realkube" / "build.sh"
_realkube: dict[str, Any] = {}


def _realkube_binaries() -> Any:
    """The ControlPlaneBinaries, built (or reused) once per session; or the reason why not."""
    if "result" in _realkube:
        return _realkube["result"]
    from gitopsbot.sandbox.controlplane import ControlPlaneBinaries, ControlPlaneError

    result: Any
    sys.stderr.write("\nrealkube: building or reusing the control plane (tests/realkube)\n")
    done = subprocess.run(["bash", str(REALKUBE_BUILD)], capture_output=True, text=True)
    if done.returncode != 0:
        result = f"tests/realkube/build.sh failed: {done.stderr.strip()[-800:]}"
    else:
        try:
            result = ControlPlaneBinaries.in_dir(Path(done.stdout.strip().splitlines()[-1]))
        except ControlPlaneError as e:
            result = str(e)
    _realkube["result"] = result
    return result


def _realkube_required() -> bool:
    return os.environ.get("GITOPSBOT_REALKUBE", "") == "require"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # Build before the first test, outside any test's timeout (a cold build takes minutes).
    if any(item.get_closest_marker("realkube") for item in items):
        found = _realkube_binaries()
        if isinstance(found, str) and not _realkube_required():
            skip = pytest.mark.skip(reason=f"realkube: {found}")
            for item in items:
                if item.get_closest_marker("realkube"):
                    item.add_marker(skip)


@pytest.fixture(scope="session")
def control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """One real control plane for the session (clean data directory), stopped at the end."""
    from gitopsbot.sandbox.controlplane import ControlPlane

    found = _realkube_binaries()
    if isinstance(found, str):
        if _realkube_required():
            pytest.fail(f"realkube required but unavailable: {found}")
        pytest.skip(f"realkube: {found}")
    plane = ControlPlane(found, tmp_path_factory.mktemp("realkube"))
    plane.start()
    try:
        yield plane
    finally:
        plane.stop()


@pytest.fixture
def realkube_namespace(control_plane: Any) -> Iterator[str]:
    """A fresh namespace on the real control plane for one test, deleted after it."""
    name = f"t-{os.urandom(4).hex()}"
    control_plane.request(
        "POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                       "metadata": {"name": name}}
    )  # fmt: skip
    try:
        yield name
    finally:
        try:
            control_plane.request("DELETE", f"/api/v1/namespaces/{name}")
        except urllib.error.HTTPError as e:
            if e.code != 404:  # a test may have deleted it itself
                raise


def pytest_terminal_summary(terminalreporter: Any) -> None:
    # Say plainly whether the real-control-plane tier ran, so a skip is never silent.
    found = _realkube.get("result")
    if found is None:
        return
    if isinstance(found, str):
        terminalreporter.write_line(f"realkube tier NOT run: {found} (see docs/testing.md)")
    else:
        terminalreporter.write_line(f"realkube tier available: {found.apiserver.parent}")
