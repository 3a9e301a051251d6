"""Shared fixtures: the ../shared data (skipped with a reason where absent), binaries."""

from __future__ import annotations

import os
import shutil
import sys
import urllib.error
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests import go_tiers, shared_dirs
from tests.go_tiers import REALKUBE, REALREGISTRY

ROOT = Path(__file__).resolve().parent.parent

if os.environ.get("PYTEST_XDIST_WORKER"):
    # A pytest-xdist worker starts with COLUMNS=80 and LINES=24 of its own; the commands the
    # tests start (in a pty of a set size, or in a pipe) must see the environment a person's
    # shell gives them, as without workers: rich would take 80 columns over the pty's size.
    for _name in ("COLUMNS", "LINES"):
        os.environ.pop(_name, None)
# Bytecode is cached even where the environment says not to (PYTHONDONTWRITEBYTECODE=1, as
# on this project's machines): without it every worker rewrote and compiled every test module
# on each run (collection 11 s instead of 3 s, once per worker), and every `gitopsbot` the
# tests start compiled the modules it imports. __pycache__ is ignored by Git.
sys.dont_write_bytecode = False
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
SHARED = ROOT.parent / "shared"
TENSOR_FUSION = SHARED / "tensor-fusion"


# ---------------------------------------------------------------- running on workers
# The README's command runs the suite on pytest-xdist workers (pyproject's addopts,
# docs/testing.md). Two things keep that fast and honest:
# - a module whose tests share an expensive module- or session-scoped world says so with
#   ``pytest.mark.module_world`` (optionally naming the parametrized fixture that makes one
#   world per parameter): its tests go to one worker as one group (``--dist loadgroup``), so
#   the world is made once, not once per worker or per interleaving;
# - the slow tests are handed out first, so the quick ones fill the gaps at the end instead
#   of one long test finishing alone.


REALKUBE_GROUPS = 4


@pytest.hookimpl(tryfirst=True)  # before xdist's worker reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    slots: dict[str, str] = {}
    realkube: dict[str, list[pytest.Item]] = {}
    for item in items:
        module = getattr(item, "module", None)
        if item.get_closest_marker("realkube") or "control_plane" in getattr(
            item, "fixturenames", ()
        ):
            # A worker that runs a test on the real control plane starts one (a session
            # fixture: about 45 CPU-seconds over a run, idle included); REALKUBE_GROUPS groups,
            # a module's tests in one (so a module_world is still made once), keep that to a
            # few control planes instead of one per worker (_balance_realkube).
            name = module.__name__ if module is not None else item.nodeid
            item.add_marker(pytest.mark.xdist_group(slots.setdefault(name, "")))
            realkube.setdefault(name, []).append(item)
            continue
        if item.get_closest_marker("realgitea"):
            # One worker starts the real Gitea (a session fixture) and runs every test of it.
            item.add_marker(pytest.mark.xdist_group("realgitea"))
            continue
        mark = item.get_closest_marker("module_world")
        if mark is None:
            continue
        group = module.__name__ if module is not None else item.nodeid
        callspec = getattr(item, "callspec", None)
        for name in mark.args:
            if callspec is not None and name in callspec.params:
                # Not "[...]": xdist reads a group only after a node id's last "]".
                group += f"/{callspec.params[name]}"
        item.add_marker(pytest.mark.xdist_group(group))
    _balance_realkube(realkube)
    if os.environ.get("PYTEST_XDIST_WORKER"):
        # Every worker sorts alike (xdist checks the collections are equal); stable, so a
        # module's tests keep their order within each weight.
        items.sort(key=_weight)


# Seconds a realkube module took on a busy run (docs/testing.md), to spread the heavy ones
# over the groups; a module not named counts REALKUBE_TEST_SECONDS a test.
REALKUBE_MODULE_SECONDS = {
    "tests.realkube.test_rbac": 310,
    "tests.realkube.test_helm_killed": 100,
    "tests.e2e.test_story": 90,
    "tests.realkube.test_person_helm_upgrade": 80,
    "tests.realkube.test_rbac_story": 80,
}
REALKUBE_TEST_SECONDS = 3


def _balance_realkube(modules: dict[str, list[pytest.Item]]) -> None:
    """Each realkube module's tests into one of REALKUBE_GROUPS groups, heaviest module
    first into the lightest group: the same on every worker (xdist compares collections)."""
    load = [0] * REALKUBE_GROUPS

    def weight(name: str) -> int:
        return REALKUBE_MODULE_SECONDS.get(name, REALKUBE_TEST_SECONDS * len(modules[name]))

    for name in sorted(modules, key=lambda n: (-weight(n), n)):
        slot = load.index(min(load))
        load[slot] += weight(name)
        for item in modules[name]:
            # Replaces the placeholder group added above (xdist reads the closest marker).
            item.own_markers = [m for m in item.own_markers if m.name != "xdist_group"]
            item.add_marker(pytest.mark.xdist_group(f"realkube-{slot}"))


def pytest_collection_finish(session: pytest.Session) -> None:
    # Loud, not slow: a pytest/pytest-xdist pair that drops the groups (pytest 9.2 with
    # xdist 3.8, pytest-dev/pytest-xdist#1386) would make each world once per worker.
    if not getattr(session.config.option, "loadgroup", False):
        return
    # xdist's own reading of a group: after the last "@" that follows the last "]".
    lost = [i.nodeid for i in session.items if i.get_closest_marker("xdist_group")
            and i.nodeid.rfind("@") < i.nodeid.rfind("]")]  # fmt: skip
    if lost:
        raise pytest.UsageError(f"--dist loadgroup ignored the xdist_group of {lost[0]} ...")


def _weight(item: pytest.Item) -> int:
    if any(item.get_closest_marker(m) for m in ("module_world", "image", "realgitea")):
        return 0
    if item.get_closest_marker("realkube") or item.get_closest_marker("slow"):
        return 1
    return 2


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


# ---------------------------------------------------------------- the real OCI registry
# Tests marked ``realregistry`` pull charts from CNCF distribution's registry
# (gitopsbot/sandbox/registry.py), built by tests/realregistry/build.sh the first time a test
# needs it; skipped where it cannot be built, unless GITOPSBOT_REALREGISTRY=require (CI).

REGISTRY_USER = "gitopsbot"
REGISTRY_PASSWORD = "sandbox-registry-password"  # a loopback-only registry made for this run


@pytest.fixture(scope="session")
def real_registry(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[Any]:
    """One registry for the session (plain HTTP, htpasswd login REGISTRY_USER), stopped at
    the end. Each test pushes under a path of its own."""
    from gitopsbot.sandbox.registry import RealRegistry

    found: Path = REALREGISTRY.built(request)
    registry = RealRegistry(
        found, tmp_path_factory.mktemp("realregistry"), {REGISTRY_USER: REGISTRY_PASSWORD}
    )
    registry.start()
    try:
        yield registry
    finally:
        registry.stop()


_TIER_LINES: dict[str, str] = {}  # from the pytest-xdist workers, by tier


def pytest_sessionfinish(session: pytest.Session) -> None:
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:  # a pytest-xdist worker: tell the controller
        workeroutput["go_tiers"] = go_tiers.summaries()
        return
    # The controller (or a run without workers): every worker is done with what they shared.
    factory = getattr(session.config, "_tmp_path_factory", None)
    if factory is not None:
        shutil.rmtree(factory.getbasetemp() / shared_dirs.SHARED, ignore_errors=True)


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
