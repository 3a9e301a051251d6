"""The plan comment (``Proposer.comment``, what ``gitopsbot comment`` posts) ends with the
rehearsal ``rehearse --record`` kept for the request's head, when the watched branch's
gitopsbot.yaml says ``rehearsal: {attachToPlan: true}``: off by default, one section however
often the comment is refreshed, gone once the head moves to a commit nobody rehearsed.

Real Git (the example fleet in a bare repository, the state branch written through
``bot.rehearsal_store``), charts from examples/charts/repo, the forge in memory at the port."""

from __future__ import annotations

import shutil
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path

from gitopsbot import app
from gitopsbot.adapters.builtin_policies import builtin_policy_documents
from gitopsbot.bot import rehearsal_store
from gitopsbot.bot.journal_store import JournalStore
from gitopsbot.bot.proposal_report import plan_marker
from gitopsbot.bot.proposer import Proposer
from gitopsbot.core import rehearsal as rh
from gitopsbot.core.fleet.yamledit import set_value
from gitopsbot.core.forge.forge_types import PullRequestDraft
from gitopsbot.testing import FakeForge

ROOT = Path(__file__).resolve().parents[2]
T0 = datetime(2026, 12, 1, tzinfo=UTC)
RELEASE = "clusters/production/release.yaml"
LINE = "- training: +0s → +27m30s, 27m30s rolling: done"


def _git(*args: str, cwd: Path) -> str:
    done = subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args],
        cwd=cwd,
        check=True,
        capture_output=True,
        text=True,
    )
    return done.stdout.strip()


class _Fleet:
    """examples/fleet with production at 1.8.0 on main, pushed to a bare repository; a
    person's work tree to push from."""

    def __init__(self, tmp: Path) -> None:
        self.work = tmp / "work"
        shutil.copytree(ROOT / "examples" / "fleet", self.work)
        release = self.work / RELEASE
        release.write_text(set_value(release.read_text(), "chart.version", "1.8.0"))
        _git("init", "-q", "-b", "main", cwd=self.work)
        _git("add", "-A", cwd=self.work)
        _git("commit", "-q", "-m", "fleet", cwd=self.work)
        self.bare = tmp / "fleet.git"
        _git("clone", "-q", "--bare", str(self.work), str(self.bare), cwd=tmp)
        _git("remote", "add", "origin", str(self.bare), cwd=self.work)
        self.repo = app.open_repo(self.bare.as_uri(), tmp / "cache")

    def push(self, branch: str, path: str, text: str, message: str) -> str:
        _git("checkout", "-q", "-B", branch, f"origin/{branch}", cwd=self.work)
        (self.work / path).write_text(text)
        _git("commit", "-q", "-am", message, cwd=self.work)
        _git("push", "-q", "origin", branch, cwd=self.work)
        return _git("rev-parse", "HEAD", cwd=self.work)

    def bump(self) -> str:
        """The person's request: production to 1.8.7 on branch ``bump``."""
        _git("fetch", "-q", "origin", cwd=self.work)
        _git("checkout", "-q", "-b", "bump", "origin/main", cwd=self.work)
        release = self.work / RELEASE
        release.write_text(set_value(release.read_text(), "chart.version", "1.8.7"))
        _git("commit", "-q", "-am", "production to 1.8.7", cwd=self.work)
        _git("push", "-q", "origin", "bump", cwd=self.work)
        return _git("rev-parse", "HEAD", cwd=self.work)


def _rehearsal(sha: str) -> rh.Rehearsal:
    pool = rh.PoolRun(
        "training", 24, ("hypervisor",), rh.Outcome.DONE, T0, T0 + timedelta(seconds=1650),
        batches=5, estimate_seconds=1650,
    )  # fmt: skip
    return rh.Rehearsal(
        "production", "tensor-fusion 1.8.7", sha, T0, T0 + timedelta(seconds=1650), (pool,),
        (), (), (), "revert-pr",
    )  # fmt: skip


def _plan_comment(forge: FakeForge, number: int) -> str:
    (body,) = [b for b in forge.comments_on(number) if plan_marker("production") in b]
    return body


def test_the_plan_comment_carries_the_recorded_rehearsal_of_the_head(tmp_path: Path) -> None:
    fleet = _Fleet(tmp_path)
    head = fleet.bump()
    forge = FakeForge()
    pr = forge.open_or_update_pull_request(
        PullRequestDraft(
            branch="bump", base="main", title="production 1.8.7", body="by hand", marker="human"
        )
    )
    proposer = Proposer(
        fleet.repo,
        forge,
        app.chart_source_for([ROOT / "examples" / "charts" / "repo"]),
        policy_documents=builtin_policy_documents(),
    )
    store = JournalStore(fleet.repo, branch="gitopsbot/state", push=True)
    rehearsal_store.save(store, _rehearsal(head))  # `rehearse --to bump --record`

    # Off by default: the record is there, the comment is the plan alone.
    proposer.comment("production", pr.number)
    plain = _plan_comment(forge, pr.number)
    assert "gitopsbot plan for `production`" in plain
    assert rh.SECTION_START not in plain and LINE not in plain

    # The team turns it on (on the watched branch): the compressed timeline ends the comment.
    settings = (fleet.work / "gitopsbot.yaml").read_text()
    fleet.push(
        "main", "gitopsbot.yaml", settings + "rehearsal:\n  attachToPlan: true\n", "rehearsals"
    )
    proposer.comment("production", pr.number)
    body = _plan_comment(forge, pr.number)
    # The section ends the plan; the comment's own marker follows it, as on every comment.
    assert body.count(rh.SECTION_START) == 1
    assert body.rstrip().endswith(f"{rh.SECTION_END}\n\n<!-- gitopsbot:plan/production -->")
    assert "**Rehearsal**" in body and LINE in body
    assert body.index("gitopsbot plan for `production`") < body.index(rh.SECTION_START)

    # Refreshed: still one comment with one section.
    proposer.comment("production", pr.number)
    assert _plan_comment(forge, pr.number) == body
    assert len(forge.comments_on(pr.number)) == 1

    # A new head nobody rehearsed: the section goes (it spoke of the older commit) ...
    release = fleet.work / RELEASE
    moved = fleet.push(
        "bump", RELEASE, release.read_text() + "# reviewed\n", "production: a comment"
    )
    proposer.comment("production", pr.number)
    assert rh.SECTION_START not in _plan_comment(forge, pr.number)

    # ... and comes back once that head is rehearsed in turn, replacing nothing twice.
    rehearsal_store.save(store, _rehearsal(moved))
    proposer.comment("production", pr.number)
    again = _plan_comment(forge, pr.number)
    assert again.count(rh.SECTION_START) == 1 and LINE in again
