"""Forge fixtures: a fake clock, the local forges, and one harness per implementation.

The contract suite runs against ``fake`` (gitopsbot.testing.FakeForge), against each real
provider talking real HTTP on loopback to its local server (gitopsbot.sandbox.forges), and,
in the ``realgitea`` tier, against a real Gitea built from its Go module (tests/realgitea).
With GitHub's API descriptions installed (tests/octokit), every request of the GitHub
provider and every answer of the local GitHub forge in a harness test is checked against
them when the test ends.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from gitopsbot.sandbox.forges.base import LocalForge
from gitopsbot.testing import FakeForge
from tests.forge import github_openapi
from tests.forge.forge_harness import SERVERS, TOKEN, FakeClock, Harness, make_client
from tests.forge.realgitea_harness import RealGiteaRepo, RealGiteaSite
from tests.go_tiers import REALGITEA


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
    # Two items a page: every list of the contract paginates. The GitHub provider's requests
    # and the local GitHub forge's answers are recorded, and held to GitHub's REST
    # description after the test (tests/forge/github_openapi.py).
    recorder = (
        github_openapi.Recorder()
        if request.param == "github" and github_openapi.available()
        else None
    )
    with SERVERS[request.param](token=TOKEN, page_size=2) as srv:
        client = make_client(srv, clock, transport=recorder)
        yield Harness(request.param, client, clock, server=srv, recorder=recorder)
    if recorder is not None:
        problems = github_openapi.exchange_problems(recorder.exchanges)
        assert not problems, "not as GitHub's REST description says:\n" + "\n".join(problems)


# ---------------------------------------------------------------- the real Gitea
# Tests marked ``realgitea`` run against upstream Gitea (gitopsbot/sandbox/realgitea.py), built
# by tests/realgitea/build.sh the first time a test needs it (tests/go_tiers.py). Where Go is
# missing (or the build fails) they are skipped with the reason, unless
# GITOPSBOT_REALGITEA=require (CI sets it), where they fail instead.


@pytest.fixture(scope="session")
def real_gitea_site(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[RealGiteaSite]:
    """One real Gitea for the session (fresh database), with the org, the bot and the
    approvers set up; stopped at the end."""
    from gitopsbot.sandbox.realgitea import RealGitea

    found: Path = REALGITEA.built(request)
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
