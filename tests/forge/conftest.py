"""Forge fixtures: a fake clock, the local forges, and one harness per implementation.

The contract suite runs against ``fake`` (gitopsbot.testing.FakeForge) and against each real
provider talking real HTTP on loopback to its local server (gitopsbot.sandbox.forges).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from gitopsbot.sandbox.forges.base import LocalForge
from gitopsbot.testing import FakeForge
from tests.forge.forge_harness import SERVERS, TOKEN, FakeClock, Harness, make_client


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture(params=["github", "gitlab", "gitea"])
def server(request: pytest.FixtureRequest) -> Iterator[LocalForge]:
    with SERVERS[request.param](token=TOKEN) as srv:
        yield srv


@pytest.fixture(params=["fake", "github", "gitlab", "gitea"])
def harness(request: pytest.FixtureRequest, clock: FakeClock) -> Iterator[Harness]:
    if request.param == "fake":
        fake = FakeForge()
        yield Harness("fake", fake, clock, fake=fake)
        return
    with SERVERS[request.param](token=TOKEN) as srv:
        yield Harness(request.param, make_client(srv, clock), clock, server=srv)
