"""Rehearsals on the state branch (bot/rehearsal_store.py), on a real Git repository: the
predictions under ``rehearsals/<cluster>/<sha>.yaml``, and, once the operation for that
commit has finished, the comparison next to them, written once."""

from __future__ import annotations

import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path

from gitopsbot import app
from gitopsbot.bot import rehearsal_store
from gitopsbot.bot.journal_store import JournalStore
from gitopsbot.core import rehearsal as rh
from gitopsbot.core.fleet.model import BotSettings, Component, RehearsalSettings
from gitopsbot.core.records.journal import (
    Journal,
    OperationKind,
    OperationStatus,
    PhaseProgress,
    Step,
    StepKind,
    StepState,
)

T0 = datetime(2026, 12, 1, tzinfo=UTC)
SHA = "0123456789abcdef0123456789abcdef01234567"


def _git(*args: str, cwd: Path) -> None:
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args],
        cwd=cwd,
        check=True,
        capture_output=True,
    )


def _store(tmp_path: Path) -> JournalStore:
    work = tmp_path / "work"
    work.mkdir()
    _git("init", "-q", "-b", "main", cwd=work)
    (work / "README").write_text("fleet\n")
    _git("add", "README", cwd=work)
    _git("commit", "-q", "-m", "init", cwd=work)
    _git("clone", "-q", "--bare", str(work), str(tmp_path / "fleet.git"), cwd=tmp_path)
    repo = app.open_repo((tmp_path / "fleet.git").as_uri(), tmp_path / "cache")
    return JournalStore(repo, branch="gitopsbot/state", push=True)


def _rehearsal() -> rh.Rehearsal:
    pool = rh.PoolRun(
        "training", 24, ("hypervisor",), rh.Outcome.DONE, T0, T0 + timedelta(seconds=1650),
        batches=5, estimate_seconds=1650,
    )  # fmt: skip
    return rh.Rehearsal(
        "production", "tensor-fusion 1.8.7", SHA, T0, T0 + timedelta(seconds=1650), (pool,),
        (), (), (), "revert-pr",
    )  # fmt: skip


def _journal(status: OperationStatus) -> Journal:
    step = Step(
        "pool/training/hypervisor", StepKind.POOL_PHASE, StepState.SUCCEEDED, T0,
        T0 + timedelta(hours=30), pool="training", component=Component.HYPERVISOR,
    )  # fmt: skip
    return Journal(
        op_id=f"production-{SHA[:12]}",
        kind=OperationKind.UPGRADE,
        cluster="production",
        desired_sha=SHA,
        created_at=T0,
        status=status,
        steps=(step,),
        phases=(PhaseProgress("pool/training/hypervisor", open_seconds=1800),),
    )


def test_predictions_then_the_comparison_kept_once(tmp_path: Path) -> None:
    store = _store(tmp_path)
    assert rehearsal_store.compare_finished(store, _journal(OperationStatus.SUCCEEDED)) is None
    rehearsal_store.save(store, _rehearsal())
    record = rehearsal_store.load(store, "production", SHA)
    assert record is not None and rh.predicted_from_record(record) == {"training": 1650}
    assert rehearsal_store.compare_finished(store, _journal(OperationStatus.RUNNING)) is None
    found = rehearsal_store.compare_finished(store, _journal(OperationStatus.SUCCEEDED))
    assert found is not None
    (row,) = found.rows
    assert (row.predicted_seconds, row.other_seconds, row.within) == (1650, 1800, True)
    head = store.repo.head(store.branch)
    again = rehearsal_store.compare_finished(store, _journal(OperationStatus.SUCCEEDED))
    assert again == found and store.repo.head(store.branch) == head  # no second commit
    assert head is not None
    kept = store.repo.read(head, rh.comparison_path("production", SHA))
    assert kept is not None
    stored = rh.loads(kept.decode())
    assert stored is not None and stored["pools"]["training"]["measured_seconds"] == 1800


def test_plan_section_only_when_the_team_turned_it_on(tmp_path: Path) -> None:
    store = _store(tmp_path)
    on = BotSettings(rehearsal=RehearsalSettings(attach_to_plan=True))
    assert rehearsal_store.plan_section(store, on, "production", SHA) == ""  # not rehearsed
    rehearsal_store.save(store, _rehearsal())
    assert rehearsal_store.plan_section(store, BotSettings(), "production", SHA) == ""
    text = rehearsal_store.plan_section(store, on, "production", SHA)
    assert "- training: +0s → +27m30s, 27m30s rolling: done" in text
