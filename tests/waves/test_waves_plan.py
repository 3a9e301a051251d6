"""Waves on a pull request's plan comment (``gitopsbot comment``'s ``Proposer.comment``),
against a real Git remote, the local GitHub server and a chart repository on loopback: the
WAVES deny names the staging cluster still missing, then, once the state branch records
staging verified on the version, when its soak ends; the status on the request fails."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from gitopsbot.bot.journal_store import JournalStore
from gitopsbot.cli import main
from gitopsbot.core.fleet.model import RolloutPolicy
from gitopsbot.core.forge.forge_types import PullRequestDraft
from gitopsbot.core.operations import operation
from gitopsbot.core.records.journal import OperationStatus, StepState
from tests.proposals.conftest import TOKEN, World, charts, git, world_factory

__all__ = ["charts", "world_factory"]  # fixtures, used by name

WAVES = """
waves:
  - name: staging
    clusters:
      environment: staging
    soak: 1h
  - name: production
    clusters:
      environment: production
"""


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("GITOPSBOT_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("GITOPSBOT_FORGE_TOKEN", TOKEN)
    monkeypatch.delenv("GITOPSBOT_CHARTS", raising=False)


def bump(world: World, work: Path, branch: str, cluster: str, version: str) -> str:
    git("fetch", "--quiet", "origin", cwd=work)
    git("checkout", "--quiet", "-B", branch, "origin/main", cwd=work)
    release = work / "clusters" / cluster / "release.yaml"
    release.write_text(release.read_text().replace("version: 1.8.0", f"version: {version}"))
    git("commit", "--quiet", "-am", f"{cluster} to {version}", cwd=work)
    git("push", "--quiet", "origin", branch, cwd=work)
    return git("rev-parse", "HEAD", cwd=work).strip()


@pytest.mark.slow
@pytest.mark.usefixtures("env")
def test_plan_comment_shows_the_wave_hold(
    world_factory: Callable[..., World], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    world = world_factory(versions={"staging": "1.8.0", "production": "1.8.0"})
    settings = world.show("main", "gitopsbot.yaml")
    world.human_commit({"gitopsbot.yaml": settings + WAVES}, "waves")
    work = tmp_path / "person"
    git("clone", "--quiet", world.remote_url, str(work))
    bump(world, work, "prod-1.8.3", "production", "1.8.3")
    pr = world.forge().open_or_update_pull_request(
        PullRequestDraft(
            branch="prod-1.8.3", base="main", title="production 1.8.3", body="", marker="human"
        )
    )

    # The bot has recorded nothing yet (no state branch): denied, fail closed, and why.
    _, plan = world.proposer().comment("production", pr.number)
    waves = [v for v in plan.verdicts if v.rule_id == "WAVES"]
    assert len(waves) == 1 and waves[0].outcome.value == "denied"
    message = waves[0].message
    assert "the promotion evidence cannot be read (no gitopsbot/state branch" in message
    assert "wave production waits for wave staging: staging not on 1.8.3 yet" in message
    assert plan.decision.value == "denied"
    (body,) = [c.body for c in world.forge_server.comments.values() if c.number == pr.number]
    assert "staging not on 1.8.3 yet" in body
    assert "failure" in {s.state for s in world.forge_server.statuses}

    # Staging got 1.8.3 (merged on main) and the bot recorded it verified five minutes ago.
    staging_sha = bump(world, work, "main", "staging", "1.8.3")
    verified = datetime.now(UTC) - timedelta(minutes=5)
    j = operation.new_operation(
        kind=operation.OperationKind.UPGRADE,
        cluster="staging",
        desired_sha=staging_sha,
        created_at=verified - timedelta(minutes=10),
        policy=RolloutPolicy(),
    )
    steps = tuple(replace(s, state=StepState.SUCCEEDED, finished_at=verified) for s in j.steps)
    repo = world.repo()
    repo.fetch()
    store = JournalStore(repo, branch="gitopsbot/state")
    store.save(replace(j, status=OperationStatus.SUCCEEDED, steps=steps), "staging upgraded")

    _, plan = world.proposer().comment("production", pr.number)
    (waves,) = [v for v in plan.verdicts if v.rule_id == "WAVES"]
    ends = verified + timedelta(hours=1)
    fmt = "%H:%M UTC" if ends.date() == datetime.now(UTC).date() else "%Y-%m-%d %H:%M UTC"
    expected = f"staging verified 1.8.3 at {verified:%H:%M} UTC, soak ends {ends:{fmt}}"
    assert expected in waves.message, waves.message
    (body,) = [c.body for c in world.forge_server.comments.values() if c.number == pr.number]
    assert expected in body

    # `gitopsbot plan` in a clone judges the same, from the clone's origin/gitopsbot/state.
    git("fetch", "--quiet", "origin", cwd=work)
    capsys.readouterr()
    code = main(
        [
            "plan",
            "--cluster",
            "production",
            "--fleet",
            str(work),
            "--from",
            "origin/main",
            "--to",
            "origin/prod-1.8.3",
            "--output",
            "json",
            "--check",
        ]
    )
    out = json.loads(capsys.readouterr().out)
    assert code == 1
    (cli,) = [v for v in out["verdicts"] if v["rule"] == "WAVES"]
    assert expected in cli["message"]


@pytest.mark.slow
@pytest.mark.usefixtures("env")
def test_proposals_follow_the_waves(world_factory: Callable[..., World], tmp_path: Path) -> None:
    """The proposal pass opens production's proposal only once staging ran the version,
    verified and soaked, and its description links staging's record."""
    world = world_factory(versions={"staging": "1.8.0", "production": "1.8.0"})
    settings = world.show("main", "gitopsbot.yaml")
    world.human_commit({"gitopsbot.yaml": settings + WAVES}, "waves")

    report = world.proposer().run_once()
    assert [p.cluster for p in report.proposals] == ["staging"], report.lines()
    (held,) = [n for n in report.notes if n.startswith("production: 1.8.3 not proposed yet")]
    assert "wave production waits for wave staging: staging not on 1.8.3 yet" in held

    # Staging runs 1.8.3 (merged), verified two hours ago: past its soak of 1h.
    work = tmp_path / "person"
    git("clone", "--quiet", world.remote_url, str(work))
    staging_sha = bump(world, work, "main", "staging", "1.8.3")
    verified = datetime.now(UTC) - timedelta(hours=2)
    j = operation.new_operation(
        kind=operation.OperationKind.UPGRADE,
        cluster="staging",
        desired_sha=staging_sha,
        created_at=verified - timedelta(minutes=10),
        policy=RolloutPolicy(),
    )
    steps = tuple(replace(s, state=StepState.SUCCEEDED, finished_at=verified) for s in j.steps)
    repo = world.repo()
    repo.fetch()
    store = JournalStore(repo, branch="gitopsbot/state")
    store.save(replace(j, status=OperationStatus.SUCCEEDED, steps=steps), "staging upgraded")

    report = world.proposer().run_once()
    (proposal,) = [p for p in report.proposals if p.cluster == "production"]
    assert proposal.opened
    body = world.forge().get_pull_request(proposal.number).body
    assert "Earlier waves ran 1.8.3, verified and soaked" in body
    assert f"`clusters/staging/history/{j.op_id}.yaml`" in body
