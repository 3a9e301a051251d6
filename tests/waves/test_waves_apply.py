"""Waves at apply time, through the reconciler, real Git (fleet and state branch) and the
real apply gate: a chart bump merged for a staging cluster and a production cluster at once.
The production cluster's operation is blocked by the WAVES deny (naming the staging cluster
and, later, when its soak ends), judged again on later passes, and starts by itself once
staging ran the version, verified, for the soak. Each cluster has its own fake cluster and
Helm (``World``, tests/executor/conftest.py)."""

from __future__ import annotations

import zoneinfo
from datetime import timedelta
from pathlib import Path

import pytest

from gitopsbot.bot.journal_store import JournalStore
from gitopsbot.bot.reconciler import Reconciler
from gitopsbot.bot.steps.executor import Executor
from gitopsbot.cli import main
from gitopsbot.core.fleet.model import BotSettings
from gitopsbot.core.records.journal import Journal, OperationKind, OperationStatus
from gitopsbot.fleetrepo import load_fleet
from gitopsbot.ports.helm import ChartRef, UpgradeRequest
from gitopsbot.testing import FakeCluster, FakeHelm
from tests.executor.conftest import (
    CRD,
    NS,
    RELEASE,
    Env,
    World,
    fleet_files,
    git,
    load_fleet_dir,
    make_env,
)

M = timedelta(minutes=1)
WAVES = (
    "watchedBranch: main\nstateBranch: gitopsbot/state\n"
    "waves:\n"
    "  - name: staging\n    clusters:\n      environment: staging\n    soak: 10m\n"
    "  - name: production\n    clusters:\n      environment: production\n"
)


def two_clusters(version: str, image: str = "hv:1") -> dict[str, str]:
    """``lab`` in production, ``stage`` in staging, both at ``version``."""
    files = fleet_files(version, image)
    out = {"gitopsbot.yaml": WAVES}
    for name, env in (("lab", "production"), ("stage", "staging")):
        for base in ("release.yaml", "values.yaml", "rollout.yaml"):
            text = files[f"clusters/lab/{base}"]
            if base == "release.yaml":
                text = text.replace("environment: staging", f"environment: {env}")
            out[f"clusters/{name}/{base}"] = text
    return out


class Fleet2:
    def __init__(self, tmp_path: Path) -> None:
        self.env: Env = make_env(tmp_path)
        self.env.human.commit("two waves", two_clusters("1.0.0"))
        # The staging cluster: its own fake API server and Helm, installed by hand at 1.0.0.
        self.stage_cluster = FakeCluster()
        self.stage_world = World(self.stage_cluster)
        charts = {v: tmp_path / "charts" / v / "tensor-fusion" for v in ("1.0.0", "1.1.0")}
        self.stage_helm = FakeHelm(
            on_deploy=self.stage_world.deploy, clock=self.env.clock.now, charts=charts
        )
        spec = load_fleet_dir(self.env.human.path).clusters["stage"]
        self.stage_helm.upgrade(
            UpgradeRequest(
                release=RELEASE,
                namespace=NS,
                chart=ChartRef.of(spec.release),
                version="1.0.0",
                values=spec.values,
                description="install by hand",
                post_render_policy=spec.rollout,
            )
        )
        self.stage_cluster.apply_crds({"gpupools.yaml": CRD})

    def reconciler(self, mirror: str = "mirror") -> Reconciler:
        env = self.env
        repo = env.repo(mirror)
        secrets = type("NoSecrets", (), {"resolve_all": lambda self, refs: {}})()
        executors = {
            "lab": Executor(cluster=env.cluster, helm=env.helm, secrets=secrets),
            "stage": Executor(cluster=self.stage_cluster, helm=self.stage_helm, secrets=secrets),
        }
        return Reconciler(
            repo=repo,
            store=JournalStore(repo, branch="gitopsbot/state"),
            executor_for=lambda spec: executors[spec.name],
            gate=env.gate(repo),
            clock=env.clock,
            load_fleet=load_fleet,
            resolve_tz=zoneinfo.ZoneInfo,
            settings=BotSettings(),
            forge=env.forge,
        )

    def drive_stage(self, rec: Reconciler) -> Journal:
        for _ in range(60):
            rec.reconcile("stage")
            self.stage_world.tick()
            current = rec.store.current("stage")
            if current is not None and not current.active:
                return current
            self.env.clock.t += M
        raise AssertionError(f"stage not finished: {rec.store.current('stage')}")

    def drive_lab(self, rec: Reconciler) -> Journal:
        for _ in range(60):
            rec.reconcile("lab")
            self.env.world.tick()
            current = rec.store.current("lab")
            if current is not None and not current.active:
                return current
            self.env.clock.t += M
        raise AssertionError(f"lab not finished: {rec.store.current('lab')}")


@pytest.fixture
def fleet2(tmp_path: Path) -> Fleet2:
    return Fleet2(tmp_path)


def test_production_waits_for_staging_then_starts_after_the_soak(
    fleet2: Fleet2,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    monkeypatch.setenv("GITOPSBOT_CACHE", str(tmp_path / "cache"))
    env = fleet2.env
    rec = fleet2.reconciler()
    assert rec.reconcile("lab").action == "baseline"
    assert rec.reconcile("stage").action == "baseline"
    env.merge_pr(8, "chart 1.1.0 everywhere", two_clusters("1.1.0", "hv:2"))

    # Production first: blocked, nothing applied, the message names the staging cluster.
    upgrades = env.helm.calls.count("upgrade")
    result = rec.reconcile("lab")
    assert result.action == "blocked", result
    held = rec.store.current("lab")
    assert held is not None and held.status is OperationStatus.BLOCKED
    assert "WAVES promotion-follows-waves denied" in held.failure
    assert "wave production waits for wave staging: stage not on 1.1.0 yet" in (held.failure)
    assert env.helm.calls.count("upgrade") == upgrades
    line = next(v for v in held.verdicts if "WAVES" in v)
    assert line.startswith("clusters/lab/release.yaml:"), line

    # Judged again on the next pass: still held, nothing new recorded. A held promotion
    # never rests: it is judged again every poll interval as the waves progress
    # (docs/decisions.md#resting-clusters).
    head = rec.store.head()
    again = rec.reconcile("lab")
    assert again.action == "held" and again.rest_until is None
    assert rec.store.head() == head

    # Staging runs the version to the end, verified.
    done = fleet2.drive_stage(rec)
    assert done.status is OperationStatus.SUCCEEDED, done.failure
    verified = done.step("verify").finished_at
    assert verified is not None

    # Production is held by the soak now: the message says when it ends.
    result = rec.reconcile("lab")
    assert result.action == "held"
    held = rec.store.current("lab")
    ends = verified + timedelta(minutes=10)
    assert f"soak ends {ends:%H:%M} UTC" in held.failure, held.failure
    assert result.next_at == ends  # the scheduler comes back when the soak ends
    # The pull request's comment says so too (edited in place: one comment for the operation).
    assert any(f"soak ends {ends:%H:%M} UTC" in c for c in env.forge.comments_on(8))
    assert env.helm.calls.count("upgrade") == upgrades

    # `gitopsbot status --fleet CLONE` shows the fleet by wave, the hold under production.
    git("fetch", "--quiet", "origin", cwd=env.human.path)
    text = status_of(env.human.path, capsys)
    lines = text.splitlines()
    staging = next(i for i, line in enumerate(lines) if line.startswith("wave staging"))
    production = next(i for i, line in enumerate(lines) if line.startswith("wave production"))
    assert staging < production
    assert lines[staging].startswith("wave staging (soak 10m): stage 1.1.0 verified "), text
    assert lines[production] == "wave production (soak 0s): lab nothing applied by the bot yet"
    assert lines[production + 1] == (
        f"  hold: lab: wave production waits for wave staging: stage verified 1.1.0 at "
        f"{verified:%H:%M} UTC, soak ends {ends:%H:%M} UTC"
    )

    # The soak is over: the same operation starts by itself and runs to the end.
    env.clock.t = ends
    result = rec.reconcile("lab")
    assert result.action == "started", result
    finished = fleet2.drive_lab(rec)
    assert finished.status is OperationStatus.SUCCEEDED, finished.failure
    assert finished.op_id == held.op_id
    assert env.helm.status(RELEASE, NS).chart_version == "1.1.0"
    git("fetch", "--quiet", "origin", cwd=env.human.path)
    text = status_of(env.human.path, capsys)
    assert "wave production (soak 0s): lab 1.1.0 verified " in text, text
    assert "hold:" not in text


def status_of(clone: Path, capsys: pytest.CaptureFixture[str]) -> str:
    capsys.readouterr()
    assert main(["status", "--fleet", str(clone)]) == 0
    return capsys.readouterr().out


def test_a_rollback_in_staging_holds_production(fleet2: Fleet2) -> None:
    env = fleet2.env
    rec = fleet2.reconciler()
    rec.reconcile("lab")
    rec.reconcile("stage")
    sha = env.human.commit(
        "stage: chart 1.1.0",
        {
            **two_clusters("1.0.0"),
            **{k: v for k, v in two_clusters("1.1.0", "hv:2").items() if "/stage/" in k},
        },
    )
    assert fleet2.drive_stage(rec).status is OperationStatus.SUCCEEDED
    env.human.revert(sha)
    back = fleet2.drive_stage(rec)
    assert back.kind.value == "rollback" and back.status is OperationStatus.SUCCEEDED

    env.human.pull()
    env.human.commit(
        "lab: chart 1.1.0", {k: v for k, v in two_clusters("1.1.0", "hv:2").items() if "/lab/" in k}
    )
    env.clock.t += timedelta(hours=5)  # long past any soak
    assert rec.reconcile("lab").action == "blocked"
    held = rec.store.current("lab")
    assert "stage rolled back at" in held.failure, held.failure


def test_a_bot_killed_before_the_start_starts_it_after_the_restart(fleet2: Fleet2) -> None:
    env = fleet2.env
    rec = fleet2.reconciler()
    rec.reconcile("lab")
    rec.reconcile("stage")
    env.merge_pr(8, "chart 1.1.0 everywhere", two_clusters("1.1.0", "hv:2"))
    assert rec.reconcile("lab").action == "blocked"
    fleet2.drive_stage(rec)
    env.clock.t += timedelta(hours=1)  # past the soak

    # Judged allowed, then killed before the start is recorded: nothing recorded, nothing run.
    class Killed(BaseException):
        pass

    def killed(*args: object, **kwargs: object) -> object:
        raise Killed

    rec.backed_up = killed  # type: ignore[method-assign]
    with pytest.raises(Killed):
        rec.reconcile("lab")
    assert rec.store.current("lab").status is OperationStatus.BLOCKED
    upgrades = env.helm.calls.count("upgrade")

    # A new process (its own mirror, nothing in memory) judges again and starts it.
    fresh = fleet2.reconciler(mirror="restarted")
    assert fresh.reconcile("lab").action == "started"
    assert fleet2.drive_lab(fresh).status is OperationStatus.SUCCEEDED
    assert env.helm.calls.count("upgrade") > upgrades


def test_unreadable_evidence_blocks_with_the_reason(fleet2: Fleet2) -> None:
    env = fleet2.env
    rec = fleet2.reconciler()
    rec.reconcile("lab")
    rec.reconcile("stage")
    rec.store.commit({"clusters/stage/history/broken.yaml": b"op_id: [unclosed\n"}, "garbage")
    env.merge_pr(8, "chart 1.1.0 everywhere", two_clusters("1.1.0", "hv:2"))
    assert rec.reconcile("lab").action == "blocked"
    failure = rec.store.current("lab").failure
    held = "WAVES promotion-follows-waves denied: held: the promotion evidence cannot be read"
    assert f"{held} (gitopsbot/state: " in failure
    assert "clusters/stage/history/broken.yaml" in failure, failure
    assert "without evidence: wave production waits for wave staging" in failure
    # The first wave needs no evidence: staging is not held.
    assert rec.reconcile("stage").action == "started"


def test_values_only_changes_wait_only_with_gate_values(fleet2: Fleet2) -> None:
    env = fleet2.env
    rec = fleet2.reconciler()
    rec.reconcile("lab")
    rec.reconcile("stage")
    # Both clusters at 1.1.0 through the waves first.
    env.merge_pr(8, "chart 1.1.0 everywhere", two_clusters("1.1.0", "hv:2"))
    rec.reconcile("lab")
    fleet2.drive_stage(rec)
    env.clock.t += timedelta(hours=1)
    fleet2.drive_lab(rec)

    # gateValues off (the default): a values-only change goes to production at once.
    env.merge_pr(9, "hypervisor hv:3", two_clusters("1.1.0", "hv:3"))
    assert rec.reconcile("lab").action == "started"
    fleet2.drive_lab(rec)

    # gateValues on: production's next values change waits for staging to settle and soak.
    gated = two_clusters("1.1.0", "hv:4")
    gated["gitopsbot.yaml"] = WAVES + "    gateValues: true\n"
    env.merge_pr(10, "hypervisor hv:4, production values gated", gated)
    assert rec.reconcile("lab").action == "blocked"
    failure = rec.store.current("lab").failure
    # stage has not taken in hv:3 nor hv:4 yet: a change in flight there.
    assert "wave production waits for wave staging: stage has a change in flight" in failure
    done = fleet2.drive_stage(rec)
    assert done.status is OperationStatus.SUCCEEDED
    assert rec.reconcile("lab").action == "held"
    assert "soak ends" in rec.store.current("lab").failure
    env.clock.t += timedelta(minutes=11)
    assert rec.reconcile("lab").action == "started"


def test_a_failed_version_mark_blocks_until_a_person_removes_it(fleet2: Fleet2) -> None:
    env = fleet2.env
    rec = fleet2.reconciler()
    rec.reconcile("lab")
    rec.reconcile("stage")
    marked = two_clusters("1.1.0", "hv:2")
    marked["gitopsbot.yaml"] = WAVES + "failedVersions:\n  - version: 1.1.0\n    reason: leak\n"
    env.merge_pr(8, "chart 1.1.0, marked failed", marked)
    assert rec.reconcile("stage").action == "blocked"
    failure = rec.store.current("stage").failure
    assert "gitopsbot.yaml:" in failure and "1.1.0 is marked failed for every cluster" in failure
    assert rec.reconcile("stage").action == "held"  # judged again, still marked

    # A person removes the mark: a commit to gitopsbot.yaml only; the held change starts.
    env.human.commit("1.1.0 is fine after all", {"gitopsbot.yaml": WAVES})
    assert rec.reconcile("stage").action == "started"
    assert fleet2.drive_stage(rec).status is OperationStatus.SUCCEEDED


GREPTIME = "rotation: 1\nsecrets:\n  greptime.password:\n    env: LAB_GREPTIME\n"


def test_a_rotation_merged_on_a_held_bump_waits_behind_it_then_runs_alone(
    fleet2: Fleet2,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    monkeypatch.setenv("GITOPSBOT_CACHE", str(tmp_path / "cache"))
    """rotation × wave hold (docs/decisions.md): the bump stays held by waves as it was, the
    rotation is queued behind it naming it, nothing is applied before the wave is due; then the
    bump runs, then the rotation, alone (R17), each its own operation."""
    env = fleet2.env
    rec = fleet2.reconciler()
    rec.reconcile("lab")
    rec.reconcile("stage")
    env.merge_pr(8, "chart 1.1.0 everywhere", two_clusters("1.1.0", "hv:2"))
    assert rec.reconcile("lab").action == "blocked"
    held = rec.store.current("lab")
    assert held is not None and held.status is OperationStatus.BLOCKED
    rotated = env.human.commit(
        "lab: greptime password", {"clusters/lab/credentials.yaml": GREPTIME}
    )

    upgrades = env.helm.calls.count("upgrade")
    result = rec.reconcile("lab")
    assert result.action == "queued", result
    queued = rec.store.queued("lab")
    assert queued is not None and queued.desired_sha == rotated
    assert queued.kind is OperationKind.ROTATION, queued
    clone = env.human.path
    git("fetch", "--quiet", "origin", "+gitopsbot/state:refs/remotes/origin/state", cwd=clone)
    log = git("log", "--format=%s", "origin/state", cwd=clone)
    assert f"rotation {queued.op_id} queued: after upgrade {held.op_id}, held by waves" in log
    still = rec.store.current("lab")
    assert still is not None and (still.op_id, still.status) == (held.op_id, held.status)
    assert rec.reconcile("lab").action == "held"  # judged again, the rotation still waits
    git("fetch", "--quiet", "origin", cwd=clone)
    lines = status_of(clone, capsys).splitlines()  # the held bump, the rotation after it
    assert f"lab: upgrade {held.op_id} — blocked (PR #8)" in lines
    assert f"  next: rotation queued ({queued.op_id})" in lines
    assert env.helm.calls.count("upgrade") == upgrades  # nothing applied by the back door

    assert fleet2.drive_stage(rec).status is OperationStatus.SUCCEEDED
    env.clock.t += timedelta(minutes=11)  # past the soak
    assert rec.reconcile("lab").action == "started"
    bump = fleet2.drive_lab(rec)
    assert (bump.op_id, bump.kind, bump.status) == (
        held.op_id,
        OperationKind.UPGRADE,
        OperationStatus.SUCCEEDED,
    ), bump.failure
    rotation = fleet2.drive_lab(rec)
    assert (rotation.op_id, rotation.kind) == (queued.op_id, OperationKind.ROTATION)
    assert rotation.status is OperationStatus.SUCCEEDED, rotation.failure
    assert env.helm.status(RELEASE, NS).chart_version == "1.1.0"
