"""Signed charts end to end (#30): gitopsbot.yaml's ``chartKeyrings`` covers the sandbox chart
repository with a publisher's public keyring (a real GnuPG key); real helm verifies.

(a) 1.8.7 is served without a provenance file: the proposal's plan says NOT VERIFIED (the
CHART-PROVENANCE deny), and the merge is blocked naming the chart, its version, its repository
and what to fix; Helm stays at 1.8.0.
(b) The publisher signs 1.8.7 (``helm package --sign``, its ``.prov`` beside it): the plan names
the signer, and the merge goes through with Helm at 1.8.7.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from gitopsbot.core.records.journal import Journal, OperationKind, OperationStatus
from gitopsbot.sandbox.chartrepo import sign
from gitopsbot.sandbox.environment import DEFAULT_CHARTS
from gitopsbot.sandbox.story import StoryWorld
from gitopsbot.sandbox.story_bot import BotRunner
from gitopsbot.sandbox.story_fleet import CLUSTER
from gitopsbot.sandbox.story_waits import finished_op, wait_for
from tests.e2e.conftest import helm_history
from tests.signing import Signer, signers

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def publisher() -> Iterator[Signer]:
    with signers("Publisher") as made:
        yield made["Publisher"]


def _blocked(store: object) -> Journal | None:
    j = store.current(CLUSTER)  # type: ignore[attr-defined]
    return j if j is not None and j.status is OperationStatus.BLOCKED else None


def _plan(world: StoryWorld, number: int) -> str:
    assert world.forge is not None
    with world.forge.lock:
        comments = [c.body for c in world.forge.comments.values() if c.number == number]
    return next(c for c in comments if "gitopsbot plan" in c)


@pytest.mark.parametrize("signed", [False, True], ids=["unsigned-blocked", "signed-applied"])
def test_a_keyring_holds_the_merge_to_signed_charts(
    signed: bool,
    publisher: Signer,
    tmp_path: Path,
    binaries: dict[str, Path],
    make_world: Callable[..., StoryWorld],
    make_bot: Callable[..., BotRunner],
) -> None:
    charts = tmp_path / "charts"
    shutil.copytree(DEFAULT_CHARTS, charts)
    if signed:
        sign(charts, "tensor-fusion", "1.8.7", helm=binaries["helm4"], key="Publisher",
             secret_keyring=publisher.secret)  # fmt: skip
    world = make_world(charts_dir=charts, chart_keyring=publisher.public, window_lead_seconds=None)
    make_bot(world)
    proposal = world.propose()
    plan = _plan(world, proposal.number)
    world.merge(proposal.number)

    if not signed:
        assert "provenance: **NOT VERIFIED**" in plan and "CHART-PROVENANCE" in plan
        journal = wait_for(world, _blocked, what="the operation blocked", timeout=120)
        assert "tensor-fusion 1.8.7" in journal.failure
        assert world.chart_repo_url in journal.failure  # the repository
        assert "has no provenance file (.prov)" in journal.failure  # what to fix
        assert "nothing applied" in journal.failure and "\n" not in journal.failure
        assert journal.steps == () or all(s.started_at is None for s in journal.steps)
        assert [h["chart"] for h in helm_history(world)] == ["tensor-fusion-1.8.0"]
        return
    assert f"provenance: verified, signed by {publisher.name}" in plan
    journal = wait_for(world, finished_op(OperationKind.UPGRADE), what="the upgrade", timeout=240)
    assert (journal.status, journal.failure) == (OperationStatus.SUCCEEDED, "")
    assert any(f"signed by {publisher.name}" in v for v in journal.verdicts), journal.verdicts
    last = helm_history(world)[-1]
    assert (last["chart"], last["status"]) == ("tensor-fusion-1.8.7", "deployed")
