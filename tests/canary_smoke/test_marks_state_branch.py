"""bot.failed_marks: the GPU canary's mark written to and read from a real state branch
(a pygit2 mirror of a file:// remote), once per standing version."""

from __future__ import annotations

import subprocess
from datetime import UTC, datetime
from pathlib import Path

from gitopsbot.adapters.git import GitRepo, GitSettings
from gitopsbot.bot.canary_marks_store import read_canary_marks, record_canary_failure
from gitopsbot.bot.journal_store import JournalStore
from gitopsbot.core.fleet.model import ClearedVersion
from gitopsbot.core.waves.canary_marks import CanaryFailure

AT = datetime(2026, 12, 4, 18, 0, tzinfo=UTC)
BRANCH = "gitopsbot/state"


def _repo(tmp_path: Path) -> GitRepo:
    work = tmp_path / "work"
    work.mkdir()

    def git(*args: str) -> None:
        subprocess.run(["git", *args], cwd=work, check=True, capture_output=True)

    git("init", "--quiet", "-b", "main")
    (work / "gitopsbot.yaml").write_text("{}\n")
    git("add", "gitopsbot.yaml")
    git("-c", "user.name=t", "-c", "user.email=t@e", "commit", "--quiet", "-m", "init")
    subprocess.run(
        ["git", "clone", "--quiet", "--bare", str(work), str(tmp_path / "remote.git")],
        check=True,
        capture_output=True,
    )
    repo = GitRepo(
        GitSettings(
            url=f"file://{tmp_path / 'remote.git'}",
            mirror_dir=tmp_path / "mirror",
            author_name="gitopsbot",
            author_email="bot@example.com",
        )
    )
    repo.fetch()
    return repo


def test_recorded_once_read_back_and_replaced_after_a_clear(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    store = JournalStore(repo, branch=BRANCH)
    assert read_canary_marks(repo, BRANCH) == ((), ())
    first = CanaryFailure("1.8.7", "c1", "a", "op-1", AT, "smoke failed", "n1")
    again = CanaryFailure("1.8.7", "c2", "b", "op-2", AT, "smoke failed again")
    assert record_canary_failure(store, repo, first, ())
    assert not record_canary_failure(store, repo, first, ())  # a restarted step
    assert not record_canary_failure(store, repo, again, ())  # the first one holds it
    repo.fetch()
    assert read_canary_marks(repo, BRANCH) == ((first,), ())
    # Cleared for op-1 only: a later failure of the version stands again.
    assert record_canary_failure(store, repo, again, (ClearedVersion("1.8.7", "ok", "op-1"),))
    assert read_canary_marks(repo, BRANCH) == ((again,), ())
