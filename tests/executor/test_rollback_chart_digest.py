"""The chart a rollback installs when ``helm rollback`` cannot be used (#30, docs/plan.md
"Rollbacks"): the bot upgrades to the old version instead, and the archive it installs is
compared with the one the operation that made the old revision applied (its journal's
``chart_archive``, found in the state branch's history). The same bytes: installed, the
rollback's record says so. Other bytes under that version (re-published): the rollback is
blocked, naming both digests and that operation, nothing applied. Nothing recorded (a
revision installed by hand): installed as the repository serves it, and the record says so.

Through the reconciler with real Git (the fleet, the state branch) and the fake helm of
tests/executor; the gate and the executor wired as ``gitopsbot run`` wires them, over the
test charts on disk (``LocalChartSource``: a chart directory's digest is its files')."""

from __future__ import annotations

import zoneinfo
from pathlib import Path

from gitopsbot.adapters.chartrepo import LocalChartSource
from gitopsbot.app.clusters import apply_gate
from gitopsbot.bot.journal_store import JournalStore
from gitopsbot.bot.reconciler import Reconciler
from gitopsbot.bot.steps.executor import Executor
from gitopsbot.core.fleet.model import BotSettings
from gitopsbot.core.records.journal import Journal, OperationKind, OperationStatus
from gitopsbot.fleetrepo import load_fleet
from tests.executor.conftest import NS, RELEASE, Env, fleet_files
from tests.executor.test_reconciler_upgrade import drive

STATE = "gitopsbot/state"


def reconciler(env: Env) -> tuple[Reconciler, LocalChartSource]:
    repo = env.repo("mirror")
    charts = LocalChartSource(sorted((env.tmp / "charts").glob("*/tensor-fusion")))
    secrets = type("NoSecrets", (), {"resolve_all": lambda self, refs: {}})()
    executor = Executor(cluster=env.cluster, helm=env.helm, secrets=secrets, archives=charts)
    rec = Reconciler(
        repo=repo,
        store=JournalStore(repo, branch=STATE),
        executor_for=lambda spec: executor,
        gate=apply_gate(repo, charts, state_branch=STATE),
        clock=env.clock,
        load_fleet=load_fleet,
        resolve_tz=zoneinfo.ZoneInfo,
        settings=BotSettings(),
        forge=env.forge,
    )
    return rec, charts


def upgraded_twice(env: Env) -> tuple[Reconciler, Journal, str]:
    """The bot upgrades to 1.1.0 (operation A, revision 2), then changes values on 1.1.0
    (operation B); revision 2 then ages out of helm's history (``--history-max``)."""
    rec, _ = reconciler(env)
    rec.reconcile("lab")
    env.merge_pr(5, "lab: chart 1.1.0, hv:2", fleet_files("1.1.0", "hv:2"))
    a = drive(env, rec)
    assert a.status is OperationStatus.SUCCEEDED and a.chart_archive, a
    sha = env.merge_pr(6, "lab: hv:3", fleet_files("1.1.0", "hv:3"))
    b = drive(env, rec)
    assert b.status is OperationStatus.SUCCEEDED and b.rollback_point is not None
    assert b.rollback_point.helm_revision == 2
    history = env.helm.releases[(NS, RELEASE)]
    history[:] = [r for r in history if r.info.revision != 2]
    return rec, a, sha


def chart_dir(env: Env, version: str) -> Path:
    return env.tmp / "charts" / version / "tensor-fusion"


def test_the_archive_applied_then_is_installed_and_the_rollback_says_so(env: Env) -> None:
    rec, a, sha = upgraded_twice(env)
    env.human.revert(sha)
    done = drive(env, rec)
    assert done.kind is OperationKind.ROLLBACK and done.status is OperationStatus.SUCCEEDED
    detail = done.step("rollback").detail
    assert "is gone from helm history" in detail
    assert f"chart archive {a.chart_archive} as {a.op_id} applied it" in detail, detail
    assert env.helm.history(RELEASE, NS)[-1].chart_version == "1.1.0"


def test_a_chart_republished_under_the_old_version_blocks_the_rollback(env: Env) -> None:
    rec, a, sha = upgraded_twice(env)
    before = env.helm.history(RELEASE, NS)
    values = chart_dir(env, "1.1.0") / "values.yaml"
    values.write_text(values.read_text() + "# re-published\n")
    env.human.revert(sha)
    done = drive(env, rec)
    assert done.kind is OperationKind.ROLLBACK and done.status is OperationStatus.BLOCKED
    assert a.chart_archive in done.failure and a.op_id in done.failure, done.failure
    assert "re-published" in done.failure and "chart.digest" in done.failure
    assert "nothing was changed" in done.failure
    assert env.helm.history(RELEASE, NS) == before  # nothing applied


def test_a_revision_installed_by_hand_is_rolled_back_to_and_the_record_says_uncompared(
    env: Env,
) -> None:
    rec, _ = reconciler(env)
    rec.reconcile("lab")
    sha = env.merge_pr(6, "lab: chart 1.1.0, hv:2", fleet_files("1.1.0", "hv:2"))
    assert drive(env, rec).status is OperationStatus.SUCCEEDED
    env.human.revert(sha)
    done = drive(env, rec)
    assert done.kind is OperationKind.ROLLBACK and done.status is OperationStatus.SUCCEEDED
    detail = done.step("rollback").detail
    assert "was not rendered by the bot" in detail
    assert "no chart archive was recorded when revision 1 was applied" in detail, detail
    assert "not compared" in detail
