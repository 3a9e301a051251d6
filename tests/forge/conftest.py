"""Forge fixtures: a fake clock, the local forges, and one harness per implementation.

The contract suite runs against ``fake`` (gitopsbot.testing.FakeForge), against each real
provider talking real HTTP on loopback to its local server (gitopsbot.sandbox.forges), and,
in the ``realgitea`` tier, against a real Gitea built from its Go module (tests/realgitea).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gitopsbot.sandbox.forges.base import LocalForge
from gitopsbot.testing import FakeForge
from tests.forge.forge_harness import SERVERS, TOKEN, FakeClock, Harness, make_client
from tests.forge.realgitea_harness import RealGiteaRepo, RealGiteaSite

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture(params=["github", "gitlab", "gitea"])
def server(request: pytest.FixtureRequest) -> Iterator[LocalForge]:
    with SERVERS[request.param](token=TOKEN) as srv:
        yield srv


REAL_GITEA = pytest.param("realgitea", marks=[pytest.mark.realgitea, pytest.mark.slow])


@pytest.fixture(params=["fake", "github", "gitlab", "gitea", REAL_GITEA])
def harness(request: pytest.FixtureRequest, clock: FakeClock) -> Iterator[Harness]:
    if request.param == "fake":
        fake = FakeForge()
        yield Harness("fake", fake, clock, fake=fake)
        return
    if request.param == "realgitea":
        repo: RealGiteaRepo = request.getfixturevalue("real_gitea_repo")
        yield Harness("realgitea", make_client(repo, clock), clock, real=repo)
        return
    with SERVERS[request.param](token=TOKEN) as srv:
        yield Harness(request.param, make_client(srv, clock), clock, server=srv)


# ---------------------------------------------------------------- the real Gitea
# Tests marked ``realgitea`` run against upstream Gitea (gitopsbot/sandbox/realgitea.py), built
# by tests/realgitea/build.sh. Where Go is missing (or the build fails) they are skipped with
# the reason, unless GITOPSBOT_REALGITEA=require (CI sets it), where they fail instead.

REALGITEA_BUILD = ROOT / "tests" / "realgitea" / "build.sh"
_realgitea: dict[str, Any] = {}


def _realgitea_dir() -> Path | str:
    """The directory build.sh built (or reused), once per session; or the reason why not."""
    if "result" in _realgitea:
        found: Path | str = _realgitea["result"]
        return found
    sys.stderr.write("\nrealgitea: building or reusing Gitea (tests/realgitea)\n")
    done = subprocess.run(["bash", str(REALGITEA_BUILD)], capture_output=True, text=True)
    result: Path | str
    if done.returncode != 0:
        result = f"tests/realgitea/build.sh failed: {done.stderr.strip()[-800:]}"
    else:
        result = Path(done.stdout.strip().splitlines()[-1])
        if not os.access(result / "gitea", os.X_OK):
            result = f"{result}/gitea: missing after tests/realgitea/build.sh"
    _realgitea["result"] = result
    return result


def _realgitea_required() -> bool:
    return os.environ.get("GITOPSBOT_REALGITEA", "") == "require"


@pytest.hookimpl(trylast=True)  # after -m/-k deselection: no build for a run without the tier
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # Build before the first test, outside any test's timeout (a cold build takes minutes).
    if any(item.get_closest_marker("realgitea") for item in items):
        found = _realgitea_dir()
        if isinstance(found, str) and not _realgitea_required():
            skip = pytest.mark.skip(reason=f"realgitea: {found}")
            for item in items:
                if item.get_closest_marker("realgitea"):
                    item.add_marker(skip)


@pytest.fixture(scope="session")
def real_gitea_site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealGiteaSite]:
    """One real Gitea for the session (fresh database), with the org, the bot and the
    approvers set up; stopped at the end."""
    from gitopsbot.sandbox.realgitea import RealGitea

    found = _realgitea_dir()
    if isinstance(found, str):
        if _realgitea_required():
            pytest.fail(f"realgitea required but unavailable: {found}")
        pytest.skip(f"realgitea: {found}")
    work = tmp_path_factory.mktemp("realgitea")
    # Lists answer two items at most, as the local forges do: every list paginates.
    gitea = RealGitea(found, work / "gitea", page_size=2)
    gitea.start()
    try:
        yield RealGiteaSite(gitea, work)
    finally:
        gitea.stop()


@pytest.fixture
def real_gitea_repo(real_gitea_site: RealGiteaSite) -> RealGiteaRepo:
    """A fresh repository on the real Gitea for one test."""
    return real_gitea_site.new_repo()


def pytest_terminal_summary(terminalreporter: Any) -> None:
    # Say plainly whether the real-Gitea tier ran, so a skip is never silent.
    found = _realgitea.get("result")
    if found is None:
        return
    if isinstance(found, str):
        terminalreporter.write_line(f"realgitea tier NOT run: {found} (see docs/forges.md)")
    else:
        terminalreporter.write_line(f"realgitea tier ran against {found}")
