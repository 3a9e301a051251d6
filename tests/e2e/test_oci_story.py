"""The fleet's chart in an OCI registry: the real one (CNCF distribution, tests/realregistry),
the sandbox chart pushed to it with ``helm push``, gitopsbot.yaml's ``chartRegistries`` login
with its password from the environment.

(a) The proposal's plan, the apply gate and the upgrade read ``oci://`` through helm: a
pull request for 1.8.0 → 1.8.7 with its plan, merged, the upgrade succeeds with Helm at
1.8.7 pulled from the registry.
(b) A registry refusing the bot's login (a wrong password): the pass fails with one line
naming the repository and the entry to fix; no operation starts, Helm is untouched.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gitopsbot.core.records.journal import OperationKind, OperationStatus, StepState
from gitopsbot.errors import ChartUnauthorized
from gitopsbot.sandbox.story import StoryWorld, git
from gitopsbot.sandbox.story_bot import BotRunner
from gitopsbot.sandbox.story_fleet import CLUSTER, REGISTRY_PASSWORD_ENV
from gitopsbot.sandbox.story_waits import finished_op, wait_for
from tests.conftest import REGISTRY_PASSWORD, REGISTRY_USER
from tests.e2e.conftest import helm_history

pytestmark = [pytest.mark.slow, pytest.mark.realregistry]

REPO = Path(__file__).resolve().parents[2] / "examples" / "charts" / "repo"


def _oci_world(
    make_world: Callable[..., StoryWorld], registry: Any, binaries: dict[str, Path], path: str
) -> StoryWorld:
    for version in ("1.8.0", "1.8.7"):
        registry.push(binaries["helm4"], REPO / f"tensor-fusion-{version}.tgz", path)
    return make_world(
        chart_repo_url=registry.url(path),
        chart_registry=(registry.host, REGISTRY_USER),
        window_lead_seconds=None,
    )


def test_plan_and_upgrade_from_an_oci_registry(
    make_world: Callable[..., StoryWorld],
    make_bot: Callable[..., BotRunner],
    real_registry: Any,
    binaries: dict[str, Path],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(REGISTRY_PASSWORD_ENV, REGISTRY_PASSWORD)
    world = _oci_world(make_world, real_registry, binaries, "story-ok")
    make_bot(world)
    proposal = world.propose()  # the versions are the registry's tags
    assert proposal.version == "1.8.7"
    assert world.forge is not None
    with world.forge.lock:
        comments = [c.body for c in world.forge.comments.values() if c.number == proposal.number]
    plans = [c for c in comments if "gitopsbot plan for `sandbox`" in c]
    assert len(plans) == 1 and "1.8.7" in plans[0], comments
    world.merge(proposal.number)
    journal = wait_for(world, finished_op(OperationKind.UPGRADE), what="the upgrade", timeout=240)
    assert (journal.status, journal.failure) == (OperationStatus.SUCCEEDED, "")
    assert journal.step("helm-upgrade").state is StepState.SUCCEEDED
    last = helm_history(world)[-1]
    assert (last["chart"], last["status"]) == ("tensor-fusion-1.8.7", "deployed")


def test_a_registry_refusing_the_login_applies_nothing(
    make_world: Callable[..., StoryWorld],
    real_registry: Any,
    binaries: dict[str, Path],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(REGISTRY_PASSWORD_ENV, "not-the-registry-password")
    world = _oci_world(make_world, real_registry, binaries, "story-denied")
    bot = BotRunner(world)  # not started: its passes are run here, one by one
    first = bot.reconciler.reconcile(CLUSTER)  # the fleet as it is: the baseline
    assert first.action == "baseline", first
    # A person moves the cluster to 1.8.7 on main.
    release = world.human / "clusters" / CLUSTER / "release.yaml"
    release.write_text(release.read_text().replace("version: 1.8.0", "version: 1.8.7"))
    git("commit", "--quiet", "-am", "tensor-fusion 1.8.7", cwd=world.human)
    git("push", "--quiet", "origin", "main", cwd=world.human)
    with pytest.raises(ChartUnauthorized) as failed:
        bot.reconciler.reconcile(CLUSTER)
    refused = failed.value
    url = real_registry.url("story-denied")
    assert str(refused) == (
        f"{url}: the registry refused the login of user '{REGISTRY_USER}' (HTTP 401); check "
        f"chartRegistries[0] (host {real_registry.host}) in gitopsbot.yaml: its username, and "
        "the password its secret reference holds, and restart the bot after changing the secret"
    )
    assert bot.store.current(CLUSTER) is None  # no operation was started
    history = helm_history(world)
    assert [(h["chart"], h["status"]) for h in history] == [("tensor-fusion-1.8.0", "deployed")]
