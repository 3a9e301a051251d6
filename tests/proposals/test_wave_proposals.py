"""One proposal per wave (``proposals.groupBy: wave``, issue 14) over real transports: a bare
Git repository, the local GitHub REST server and a chart repository on loopback. A fleet of
four clusters in two waves (staging, staging-b; production, production-b)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from gitopsbot.bot.journal_store import JournalStore
from gitopsbot.core.fleet.commit_classes import PROPOSAL_TRAILER
from gitopsbot.core.fleet.model import RolloutPolicy
from gitopsbot.core.operations import operation
from gitopsbot.core.proposing.proposals import LEDGER_FILE
from gitopsbot.core.records.journal import OperationStatus, StepState
from gitopsbot.ports.forge import Forge
from tests.proposals.conftest import World, git
from tests.proposals.test_pass import open_pulls, writes

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
STAGING = "gitopsbot/upgrade/staging/1.8.3"
PRODUCTION = "gitopsbot/upgrade/production/1.8.3"


def copy_cluster(world: World, src: str, name: str) -> dict[str, str]:
    files: dict[str, str] = {}
    listed = git("--git-dir", str(world.bare), "ls-tree", "--name-only", f"main:clusters/{src}")
    for f in listed.split():
        text = world.show("main", f"clusters/{src}/{f}")
        if f == "release.yaml":
            text = re.sub(r"(?m)^kubeContext: (\S+)", rf"kubeContext: \1-{name}", text)
        files[f"clusters/{name}/{f}"] = text
    (world.tmp / "human" / "clusters" / name).mkdir(parents=True, exist_ok=True)
    return files


def wave_world(world_factory: Callable[..., World], *, group_by: str = "wave") -> World:
    world = world_factory(versions={"staging": "1.8.0", "production": "1.8.0"}, max_open=3)
    settings = world.show("main", "gitopsbot.yaml")
    settings = settings.replace("proposals:\n", f"proposals:\n  groupBy: {group_by}\n", 1)
    world.human_commit({"gitopsbot.yaml": settings + WAVES}, "waves, proposals per wave")
    files = {**copy_cluster(world, "staging", "staging-b")}
    files.update(copy_cluster(world, "production", "production-b"))
    world.human_commit(files, "two more clusters")
    return world


def release_version(world: World, ref: str, cluster: str) -> str:
    m = re.search(r"(?m)^  version: (\S+)", world.show(ref, f"clusters/{cluster}/release.yaml"))
    assert m is not None
    return m.group(1)


def run_staging(world: World, tmp: Path, *, verified_ago: timedelta) -> list[str]:
    """Staging and staging-b merged 1.8.3 on main; the state branch records both verified."""
    work = tmp / "person"
    if not work.exists():
        git("clone", "--quiet", world.remote_url, str(work))
    git("fetch", "--quiet", "origin", cwd=work)
    git("checkout", "--quiet", "-B", "main", "origin/main", cwd=work)
    for cluster in ("staging", "staging-b"):
        release = work / "clusters" / cluster / "release.yaml"
        release.write_text(release.read_text().replace("version: 1.8.0", "version: 1.8.3"))
    git("commit", "--quiet", "-am", "staging wave to 1.8.3", cwd=work)
    git("push", "--quiet", "origin", "main", cwd=work)
    sha = git("rev-parse", "HEAD", cwd=work).strip()
    verified = datetime.now(UTC) - verified_ago
    repo = world.repo()
    repo.fetch()
    store = JournalStore(repo, branch="gitopsbot/state")
    ops = []
    for cluster in ("staging", "staging-b"):
        j = operation.new_operation(
            kind=operation.OperationKind.UPGRADE,
            cluster=cluster,
            desired_sha=sha,
            created_at=verified - timedelta(minutes=10),
            policy=RolloutPolicy(),
        )
        steps = tuple(replace(s, state=StepState.SUCCEEDED, finished_at=verified) for s in j.steps)
        store.save(replace(j, status=OperationStatus.SUCCEEDED, steps=steps), f"{cluster} up")
        ops.append(j.op_id)
    return ops


def ledger(world: World) -> list[dict[str, object]]:
    return list(json.loads(world.show("gitopsbot/state", LEDGER_FILE))["proposals"])


@pytest.mark.slow
def test_wave_request_opens_after_the_earlier_wave_soaked(
    world_factory: Callable[..., World], tmp_path: Path
) -> None:
    world = wave_world(world_factory)

    # Pass 1: one request for the first wave, bumping both its clusters and nothing else.
    report = world.proposer().run_once()
    assert report.problems == []
    assert [(p.cluster, p.version, p.opened) for p in report.proposals] == [
        ("wave staging", "1.8.3", True)
    ]
    assert list(open_pulls(world)) == [STAGING]
    assert release_version(world, STAGING, "staging") == "1.8.3"
    assert release_version(world, STAGING, "staging-b") == "1.8.3"
    assert release_version(world, STAGING, "production") == "1.8.0"
    assert release_version(world, STAGING, "production-b") == "1.8.0"
    (held,) = [n for n in report.notes if n.startswith("wave production: 1.8.3 not proposed yet")]
    assert "wave production waits for wave staging: staging not on 1.8.3 yet" in held
    (pr,) = world.forge_server.pulls.values()
    assert pr.title == "Upgrade wave staging to tensor-fusion 1.8.3"
    assert "| `staging` | 1.8.0 |" in pr.body and "| `staging-b` | 1.8.0 |" in pr.body
    assert "gitopsbot plan for `staging`" in pr.body
    assert "gitopsbot plan for `staging-b`" in pr.body
    repo = world.repo()
    repo.fetch()
    (commit,) = repo.log(STAGING, repo.head("main"), 5)
    assert f"{PROPOSAL_TRAILER}: staging/1.8.3" in commit.message
    assert f"{PROPOSAL_TRAILER}: staging-b/1.8.3" in commit.message
    assert [(p["wave"], p["state"]) for p in ledger(world)] == [("staging", "open")]
    assert "gitopsbot/staging/1.8.3" not in world.branches()  # no per-cluster request
    # The plan comment (`gitopsbot comment`) works per cluster on the wave's request.
    for cluster in ("staging", "staging-b"):
        _, plan = world.proposer().comment(cluster, pr.number)
        assert plan.decision.value == "allowed"
    comments = [c.body for c in world.forge_server.comments.values() if c.number == pr.number]
    assert sorted("`staging-b`" in c for c in comments) == [False, True]

    # The staging wave runs 1.8.3, verified 10 minutes ago: soak (1h) not over, still held.
    ops = run_staging(world, tmp_path, verified_ago=timedelta(minutes=10))
    report = world.proposer().run_once()
    assert PRODUCTION not in open_pulls(world)
    (held,) = [n for n in report.notes if n.startswith("wave production: 1.8.3 not proposed")]
    assert "soak ends" in held
    # Staging's own request became pointless (its clusters are on 1.8.3): closed.
    assert STAGING not in open_pulls(world)

    # A person shortens the soak to 5m: soaked now, the production wave's request opens.
    settings = world.show("main", "gitopsbot.yaml").replace("soak: 1h", "soak: 5m")
    world.human_commit({"gitopsbot.yaml": settings}, "staging soaks 5m")
    report = world.proposer().run_once()
    assert [(p.cluster, p.opened) for p in report.proposals] == [("wave production", True)], (
        report.lines()
    )
    assert list(open_pulls(world)) == [PRODUCTION]
    for cluster in ("production", "production-b"):
        assert release_version(world, PRODUCTION, cluster) == "1.8.3"
    body = world.forge_server.pulls[open_pulls(world)[PRODUCTION]].body
    assert "Earlier waves ran 1.8.3, verified and soaked" in body
    assert f"`clusters/staging/history/{ops[0]}.yaml`" in body
    assert f"`clusters/staging-b/history/{ops[1]}.yaml`" in body
    assert "| `production` | 1.8.0 |" in body and "| `production-b` | 1.8.0 |" in body
    assert "| `staging`" not in body  # already on the version: left out

    # A quiet pass writes nothing.
    before = writes(world)
    report = world.proposer().run_once()
    assert writes(world) == before and not any(p.opened or p.updated for p in report.proposals)


class Killed(BaseException):
    """The process dies here (not an error the pass could handle)."""


class Dying:
    """The forge, with the process killed at one call."""

    def __init__(self, inner: Forge, at: str) -> None:
        self._inner, self._at = inner, at

    def __getattr__(self, name: str) -> object:
        if name == self._at:

            def die(*args: object, **kwargs: object) -> None:
                raise Killed(name)

            return die
        return getattr(self._inner, name)


@pytest.mark.slow
def test_killed_between_push_and_open_opens_once(world_factory: Callable[..., World]) -> None:
    world = wave_world(world_factory)
    with pytest.raises(Killed):
        world.proposer(forge=Dying(world.forge(), "open_or_update_pull_request")).run_once()
    assert STAGING in world.branches() and open_pulls(world) == {}
    head = world.sha(STAGING)

    # Killed after opening, before the ledger: the request is found again, not doubled.
    with pytest.raises(Killed):
        world.proposer(forge=Dying(world.forge(), "set_status")).run_once()
    assert list(open_pulls(world)) == [STAGING]
    assert world.sha(STAGING) == head  # the pushed bump was reused, not committed again

    report = world.proposer().run_once()
    assert [(p.cluster, p.opened) for p in report.proposals] == [("wave staging", False)]
    assert len(world.forge_server.pulls) == 1
    assert [(p["wave"], p["state"]) for p in ledger(world)] == [("staging", "open")]
    before = writes(world)
    world.proposer().run_once()
    assert writes(world) == before


@pytest.mark.slow
def test_declined_wave_request_is_not_reopened(world_factory: Callable[..., World]) -> None:
    world = wave_world(world_factory)
    world.proposer().run_once()
    number = open_pulls(world)[STAGING]
    world.forge().close_pull_request(number)  # a person closes it without merging
    report = world.proposer().run_once()
    assert open_pulls(world) == {}
    assert any(f"#{number}" in n and "not proposed again" in n for n in report.notes), (
        report.lines()
    )
    assert [(p["wave"], p["state"]) for p in ledger(world)] == [("staging", "closed")]
    before = writes(world)
    world.proposer().run_once()
    assert open_pulls(world) == {} and writes(world) == before


@pytest.mark.slow
def test_newer_version_supersedes_and_membership_changes_update(
    world_factory: Callable[..., World],
) -> None:
    world = wave_world(world_factory)
    world.proposer().run_once()
    old = open_pulls(world)[STAGING]

    # A third cluster joins the staging wave; staging-b leaves it (now production).
    files = copy_cluster(world, "staging", "staging-c")
    release_b = world.show("main", "clusters/staging-b/release.yaml")
    files["clusters/staging-b/release.yaml"] = release_b.replace(
        "environment: staging", "environment: production"
    )
    world.human_commit(files, "staging-c joins, staging-b leaves the staging wave")
    report = world.proposer().run_once()
    assert [(p.cluster, p.opened, p.updated) for p in report.proposals] == [
        ("wave staging", False, True)
    ], report.lines()
    assert open_pulls(world) == {STAGING: old}
    assert release_version(world, STAGING, "staging-c") == "1.8.3"
    for name in ("rollout.yaml", "credentials.yaml"):  # its directory came with it
        path = f"clusters/staging-c/{name}"
        assert world.show(STAGING, path) == world.show("main", path)
    assert release_version(world, STAGING, "staging-b") == "1.8.0"  # its bump went
    body = world.forge_server.pulls[old].body
    assert "| `staging-c` | 1.8.0 |" in body and "`staging-b`" not in body

    # A newer version: the wave's request is replaced, the old one closed with a comment.
    world.charts.add_example("1.8.7")
    report = world.proposer().run_once()
    new = open_pulls(world)["gitopsbot/upgrade/staging/1.8.7"]
    assert STAGING not in open_pulls(world)
    comments = [c.body for c in world.forge_server.comments.values() if c.number == old]
    assert any(f"#{new}" in c and "superseded by chart 1.8.7" in c for c in comments)
    states = {(p["wave"], p["version"]): p["state"] for p in ledger(world)}
    assert states == {("staging", "1.8.3"): "superseded", ("staging", "1.8.7"): "open"}


@pytest.mark.slow
def test_max_open_bounds_wave_requests_and_unwaved_clusters_stay_per_cluster(
    world_factory: Callable[..., World],
) -> None:
    world = world_factory(versions={"staging": "1.8.0", "production": "1.8.0"}, max_open=1)
    settings = world.show("main", "gitopsbot.yaml")
    settings = settings.replace("proposals:\n", "proposals:\n  groupBy: wave\n", 1)
    # Only staging is waved; production is unwaved: it keeps a per-cluster request.
    waves = "\nwaves:\n  - name: staging\n    clusters:\n      environment: staging\n"
    world.human_commit({"gitopsbot.yaml": settings + waves}, "one wave")
    report = world.proposer().run_once()
    assert list(open_pulls(world)) == [STAGING]
    assert any("maxOpen is 1" in n for d in report.decisions for n in d.notes), report.lines()
    world.forge().close_pull_request(open_pulls(world)[STAGING])
    world.proposer().run_once()
    assert list(open_pulls(world)) == ["gitopsbot/production/1.8.3"]
