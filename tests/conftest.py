"""Shared fixtures: the ../shared data (skipped with a reason where absent), binaries."""

from __future__ import annotations

import os
import urllib.error
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests import go_tiers
from tests.go_tiers import REALKUBE

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
# etcd (gitopsbot/sandbox/controlplane.py), built by tests/realkube/build.sh the first time a
# test needs it (tests/go_tiers.py). Where Go or etcd is missing they are skipped with the
# reason, unless GITOPSBOT_REALKUBE=require (CI sets it), where they fail instead.


@pytest.fixture(scope="session")
def control_plane(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[Any]:
    """One real control plane for the session (clean data directory), stopped at the end."""
    from gitopsbot.sandbox.controlplane import ControlPlane

    found = REALKUBE.built(request)
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


_TIER_LINES: dict[str, str] = {}  # from the pytest-xdist workers, by tier


def pytest_sessionfinish(session: pytest.Session) -> None:
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:  # a pytest-xdist worker: tell the controller
        workeroutput["go_tiers"] = go_tiers.summaries()


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: Any) -> None:
    for name, line in getattr(node, "workeroutput", {}).get("go_tiers", {}).items():
        # "NOT run" from one worker is the news, whatever the others say.
        if name not in _TIER_LINES or "NOT run" in line:
            _TIER_LINES[name] = line


def pytest_terminal_summary(terminalreporter: Any) -> None:
    # Say plainly whether each Go-built tier ran, so a skip is never silent.
    for line in {**_TIER_LINES, **go_tiers.summaries()}.values():
        terminalreporter.write_line(line)
