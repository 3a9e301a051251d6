"""After a rollback in the staging wave, the proposal pass opens one pull request adding the
version to ``failedVersions:`` (real Git remote, local GitHub server, chart repository on
loopback); the records on the state branch are the bot's own journal format, written by its
JournalStore."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from gitopsbot.bot.journal_store import JournalStore
from gitopsbot.core.fleet.model import FailedVersion, RolloutPolicy
from gitopsbot.core.fleet.settings_file import parse_settings
from gitopsbot.core.operations import operation
from gitopsbot.core.records.journal import OperationKind, OperationStatus, StepState
from tests.proposals.conftest import TOKEN, World, charts, git, world_factory
from tests.waves.test_waves_plan import WAVES, bump

__all__ = ["charts", "world_factory"]  # fixtures, used by name


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("GITOPSBOT_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("GITOPSBOT_FORGE_TOKEN", TOKEN)
    monkeypatch.delenv("GITOPSBOT_CHARTS", raising=False)


@pytest.mark.slow
@pytest.mark.usefixtures("env")
def test_a_rollback_in_staging_proposes_the_failed_version(
    world_factory: Callable[..., World], tmp_path: Path
) -> None:
    world = world_factory(versions={"staging": "1.8.0", "production": "1.8.0"})
    settings = world.show("main", "gitopsbot.yaml")
    world.human_commit({"gitopsbot.yaml": settings + WAVES}, "waves")
    work = tmp_path / "person"
    git("clone", "--quiet", world.remote_url, str(work))
    up_sha = bump(world, work, "main", "staging", "1.8.3")
    git("revert", "--no-edit", up_sha, cwd=work)
    git("push", "--quiet", "origin", "main", cwd=work)
    back_sha = git("rev-parse", "HEAD", cwd=work).strip()

    # The records the bot made: the upgrade failed after its helm step, the revert rolled back.
    t = datetime.now(UTC) - timedelta(hours=1)
    up = operation.new_operation(
        kind=OperationKind.UPGRADE,
        cluster="staging",
        desired_sha=up_sha,
        created_at=t,
        policy=RolloutPolicy(),
    )
    up = up.with_step(replace(up.step("helm-upgrade"), state=StepState.SUCCEEDED, finished_at=t))
    up = replace(up, status=OperationStatus.FAILED, failure="verify failed")
    back = operation.new_operation(
        kind=OperationKind.ROLLBACK,
        cluster="staging",
        desired_sha=back_sha,
        created_at=t + timedelta(minutes=5),
        policy=RolloutPolicy(),
        reverts_op=up.op_id,
    )
    back = replace(back, status=OperationStatus.SUCCEEDED)
    repo = world.repo()
    repo.fetch()
    store = JournalStore(repo, branch="gitopsbot/state")
    store.save(up, "staging upgrade failed")
    store.save(back, "staging rolled back")

    report = world.proposer().run_once()
    (line,) = [n for n in report.notes if n.startswith("failed version")]
    assert line.startswith("failed version 1.8.3 from wave staging: #"), report.lines()
    branch = "gitopsbot/failed-version/1.8.3"
    edited = parse_settings(world.show(branch, "gitopsbot.yaml"))
    assert edited.failed_versions[-1] == FailedVersion(
        "1.8.3",
        "staging",
        f"rolled back on staging ({back.op_id})",
        edited.failed_versions[-1].line,
    )
    assert world.show(branch, "gitopsbot.yaml").startswith(settings.splitlines()[0])
    pr = world.forge().find_pull_request(branch, "failed-version/1.8.3")
    assert pr is not None and pr.base == "main"
    assert pr.title == "Mark tensor-fusion chart 1.8.3 failed from wave staging on"
    assert f"`clusters/staging/history/{back.op_id}.yaml`" in pr.body
    assert f"`clusters/staging/history/{up.op_id}.yaml`" in pr.body

    # Proposed once: the next pass leaves it be.
    again = world.proposer().run_once()
    assert not [n for n in again.notes if n.startswith("failed version")]
