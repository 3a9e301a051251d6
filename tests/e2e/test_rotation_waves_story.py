"""rotation × wave hold end to end (issue 28 item 3, docs/decisions.md): two sandbox clusters
in two waves, real helm 4 and the bot as ``gitopsbot run`` builds it (``WaveWorld``,
tests/e2e/test_waves_story.py).

One commit bumps both to 1.8.7; staging's upgrade starts but a person's ``paused: true`` holds
its pool, so production stays held by waves. A GreptimeDB password rotation for production is
merged on top. The rotation waits in the queue behind the held bump, naming it; nothing is
applied to production (the rotation never carries the held version through early). Staging is
resumed, verified and soaked; then production's bump runs, and the rotation after it, alone:
two operations, two Helm revisions, in that order.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from gitopsbot.core.records.journal import Journal, OperationKind, OperationStatus
from gitopsbot.sandbox.story import git
from tests.e2e.conftest import NS, RELEASE
from tests.e2e.test_waves_story import NEW, OLD, SOAK, STAGING, WaveWorld

pytestmark = pytest.mark.slow

PROD = "prod-eu1"
SETTINGS = f"""\
watchedBranch: main
stateBranch: gitopsbot/state
pollInterval: 2s
author:
  name: gitopsbot
  email: gitopsbot@sandbox.invalid
forge:
  kind: git-only
waves:
  - name: staging
    clusters:
      environment: staging
    soak: {SOAK}s
  - name: production
    clusters:
      environment: production
"""
PASSWORD = "rotated-greptime-pw-7e21"  # reaches the cluster only
CREDENTIALS = f"clusters/{PROD}/credentials.yaml"


def commit(world: WaveWorld, files: dict[str, str], message: str) -> str:
    """A person commits ``files`` (path → new text) to main and pushes."""
    h = world.human
    git("pull", "--quiet", "--ff-only", "origin", "main", cwd=h)
    for path, text in files.items():
        (h / path).write_text(text)
        git("add", path, cwd=h)
    git("commit", "--quiet", "-m", message, cwd=h)
    git("push", "--quiet", "origin", "main", cwd=h)
    return git("rev-parse", "HEAD", cwd=h).strip()


def staging_rollout(world: WaveWorld) -> tuple[str, str]:
    path = f"clusters/{STAGING}/rollout.yaml"
    return path, (world.human / path).read_text()


def helm_ops(world: WaveWorld, name: str) -> list[str]:
    """The operation ids of the bot's Helm revisions of ``name``, oldest first."""
    out = world.clusters.helm(
        name, world.binaries["helm4"], "history", RELEASE, "--namespace", NS, "--output", "json"
    )
    found = [str(r.get("description", "")) for r in json.loads(out)]
    return [d.split("op=", 1)[1].split()[0] for d in found if "op=" in d]


@pytest.fixture
def world(
    tmp_path: Path, binaries: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> Iterator[WaveWorld]:
    monkeypatch.setenv("TF_PROD_GREPTIME", PASSWORD)  # the bot reads it at apply time
    made = WaveWorld(tmp_path, binaries, names=(STAGING, PROD), settings=SETTINGS)
    try:
        made.start()
        made.start_bot(monkeypatch)
        made.baselines()
        yield made
    finally:
        made.stop()


def test_a_rotation_merged_on_a_held_bump_waits_behind_it_and_runs_alone(
    world: WaveWorld,
) -> None:
    path, rollout = staging_rollout(world)
    commit(world, {path: rollout + "paused: true\n"}, "staging: hold the pool")
    bump = world.bump_all()
    op_staging, op_bump = f"{STAGING}-{bump[:12]}", f"{PROD}-{bump[:12]}"

    def held(found: dict[str, Journal | None]) -> bool:
        s, p = found[STAGING], found[PROD]
        return (
            s is not None
            and s.op_id == op_staging
            and s.active
            and p is not None
            and (p.op_id, p.status) == (op_bump, OperationStatus.BLOCKED)
        )

    found = world.until("staging to run paused and production to be held", held)
    waits = "WAVES promotion-follows-waves denied: wave production waits for wave staging"
    assert waits in found[PROD].failure  # type: ignore[union-attr]

    rotated = commit(
        world,
        {CREDENTIALS: "rotation: 1\nsecrets:\n  greptime.password:\n    env: TF_PROD_GREPTIME\n"},
        "prod-eu1: rotate the GreptimeDB password",
    )
    op_rotation = f"{PROD}-{rotated[:12]}"
    assert world.reader is not None
    reader = world.reader

    def queued(_found: dict[str, Journal | None]) -> bool:
        q = reader.queued(PROD)
        return q is not None and q.op_id == op_rotation

    found = world.until("the rotation to be queued behind the held bump", queued)
    q = reader.queued(PROD)
    assert q is not None and (q.kind, q.status) == (OperationKind.ROTATION, OperationStatus.QUEUED)
    still = found[PROD]
    assert still is not None and (still.op_id, still.status) == (op_bump, OperationStatus.BLOCKED)
    assert f"rotation {op_rotation} queued: after upgrade {op_bump}, held by waves" in (
        world.state_log()
    )
    # Held as it was: judged again, nothing applied by the rotation's back door.
    assert world.helm_chart(PROD) == f"tensor-fusion-{OLD}"
    assert helm_ops(world, PROD) == []

    commit(world, {path: rollout}, "staging: resume")

    def rotated_done(found: dict[str, Journal | None]) -> bool:
        j = found[PROD]
        return j is not None and j.op_id == op_rotation and not j.active

    found = world.until("the bump then the rotation to finish", rotated_done, timeout=240)
    rotation = found[PROD]
    assert rotation is not None and rotation.kind is OperationKind.ROTATION
    assert rotation.status is OperationStatus.SUCCEEDED, rotation.failure
    assert reader.history(PROD, op_bump) is not None
    bumped = reader.history(PROD, op_bump)
    assert bumped is not None and bumped.status is OperationStatus.SUCCEEDED, bumped
    assert world.helm_chart(PROD) == f"tensor-fusion-{NEW}"
    assert helm_ops(world, PROD) == [op_bump, op_rotation]  # two revisions, in that order
    log = world.state_log()
    assert f"upgrade {op_bump} started: no longer held by waves" in log, log
    assert f"rotation {op_rotation} started" in log, log
    assert PASSWORD not in log
