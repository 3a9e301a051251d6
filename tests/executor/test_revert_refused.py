"""``onFailure: rollback`` when the watched branch refuses the bot's revert (issue 5, part 5).

A real remote that refuses: the fleet's bare repository served over smart HTTP (``git
http-backend``, which runs hooks; libgit2's file:// transport runs none) with an ``update``
hook protecting ``main`` from the bot's HTTP user, as a forge's protected branch does. People
push over file:// with the git CLI, which the hook lets through.

- the adapter raises PushRefused with the hook's words, never the bot's password (a canary),
  and moves the local branch back to the remote's head;
- refused → the rollback runs anyway, from the revert commit of ``gitopsbot/revert/<op>``,
  whose pull request says the cluster is ALREADY rolled back; the journal and log say so;
- that pull request merged later (merge commit, squash, rebase) or a person's own revert
  while the rollback runs → recorded as seen: no second operation, no helm call;
- a transient failure of the revert push → the next pass pushes the same commit: exactly one
  revert on the remote; a kill between any two of (revert commit, journal record, push,
  rollback start) resumes to exactly one revert and one rollback.
"""

from __future__ import annotations

import logging
import socket
import subprocess
import zoneinfo
from collections.abc import Iterator, Mapping
from datetime import timedelta
from pathlib import Path

import pytest

from gitopsbot.adapters.git import GitRepo, GitSettings
from gitopsbot.adapters.git_credentials import HttpsPassword
from gitopsbot.bot.journal_store import JournalStore
from gitopsbot.bot.reconciler import MANUAL_CHECK_WATCHED, PassResult, Reconciler
from gitopsbot.bot.reverts import REVERT_PR_RETRY
from gitopsbot.bot.steps.executor import Executor
from gitopsbot.core.fleet.model import BotSettings
from gitopsbot.core.forge.forge_types import PullRequestDraft, PullRequestInfo
from gitopsbot.core.records.journal import Journal, OperationKind, OperationStatus
from gitopsbot.errors import ForgeServerError, GitUnavailable, PushRefused
from gitopsbot.fleetrepo import load_fleet
from gitopsbot.sandbox.gitremote import GitRemote
from gitopsbot.testing import FakeForge, FakeReleaseWatch
from tests.executor.conftest import Env, fleet_files, git
from tests.executor.test_reconciler_upgrade import drive

# slow: each test runs the command line, a Git remote or real helm in subprocesses (seconds)
pytestmark = pytest.mark.slow

BOT = "gitopsbot"
CANARY = "canary-pw-7c1e94d2"  # the bot's password on the remote: must never show up
REASON = "GH006: Protected branch update failed for refs/heads/main."
M = timedelta(minutes=1)


class Killed(BaseException):  # a kill: no `except Exception` of the bot sees it
    """The process died here."""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def served(env: Env) -> Iterator[GitRemote]:
    """The env's bare fleet repository over smart HTTP with basic auth (a fixed port, so a
    test can stop and restart it)."""
    server = GitRemote(env.tmp / "remote", username=BOT, password=CANARY, port=_free_port())
    server.start()
    yield server
    server.stop()


def bare(env: Env) -> Path:
    return env.tmp / "remote" / "fleet.git"


def remote_git(env: Env, *args: str) -> str:
    return git("--git-dir", str(bare(env)), *args, cwd=env.tmp)


def remote_head(env: Env, branch: str) -> str:
    return remote_git(env, "rev-parse", f"refs/heads/{branch}").strip()


def reverts_on_remote_main(env: Env, sha: str) -> list[str]:
    out = remote_git(env, "log", "--format=%H%x00%B%x01", "main")
    shas = []
    for entry in out.split("\x01"):
        commit, _, message = entry.strip().partition("\x00")
        if f"This reverts commit {sha}" in message:
            shas.append(commit)
    return shas


def settings(env: Env, server: GitRemote, name: str) -> GitSettings:
    return GitSettings(
        url=server.repo_url("fleet"),
        mirror_dir=env.tmp / name,
        credentials=HttpsPassword(BOT, CANARY),
        author_email="bot@example.com",
    )


def reconciler(env: Env, repo: GitRepo) -> Reconciler:
    repo.fetch()
    secrets = type("NoSecrets", (), {"resolve_all": lambda self, refs: {}})()
    executor = Executor(cluster=env.cluster, helm=env.helm, secrets=secrets)
    return Reconciler(
        repo=repo,
        store=JournalStore(repo, branch="gitopsbot/state"),
        executor_for=lambda spec: executor,
        gate=env.gate(repo),
        clock=env.clock,
        load_fleet=load_fleet,
        resolve_tz=zoneinfo.ZoneInfo,
        settings=BotSettings(),
        forge=env.forge,
    )


def fail_upgrade(env: Env, rec: Reconciler, number: int = 41) -> str:
    """Baseline, merge hv:2 with a 3-minute deadline the controller never meets (it never
    moves without ``world.tick``): the upgrade halts. Returns the merge sha."""
    rec.reconcile("lab")
    return env.merge_pr(number, "lab: hv:2", fleet_files("1.0.0", "hv:2", max_duration="3m"))


def until_remediated(env: Env, rec: Reconciler) -> PassResult:
    for _ in range(30):
        result = rec.reconcile("lab")
        env.clock.t += M
        if result.action == "rollback":
            return result
    raise AssertionError(f"no rollback: {rec.store.current('lab')}")


def rollbacks(env: Env) -> int:
    """Helm revisions that took the release back to hv:1 after the bot's hv:2 (a helm
    rollback, or the upgrade with the Git policy that replaces it for a hand-made target)."""
    revisions = env.helm.releases[("tf-system", "tf")]
    images = [r.values.get("cluster", {}).get("hypervisorImage") for r in revisions]
    first_upgrade = images.index("hv:2") if "hv:2" in images else len(images)
    return sum(1 for image in images[first_upgrade:] if image == "hv:1")


def refused_rollback(env: Env, rec: Reconciler) -> tuple[str, Journal, Journal]:
    sha = fail_upgrade(env, rec)
    until_remediated(env, rec)
    rollback = rec.store.current("lab")
    assert rollback is not None and rollback.kind is OperationKind.ROLLBACK
    failed = rec.store.history("lab", rollback.reverts_op)
    assert failed is not None
    return sha, rollback, failed


# -- the adapter and the sandbox remote -------------------------------------------------------


def test_push_refused_by_a_hook_carries_its_reason_not_the_password(
    env: Env, served: GitRemote, caplog: pytest.LogCaptureFixture
) -> None:
    served.protect_branch("fleet", "main", users=(BOT,), message=REASON)
    repo = GitRepo(settings(env, served, "adapter"))
    repo.fetch()
    before = remote_head(env, "main")
    mine = repo.commit_files("main", {"notes.txt": b"bot\n"}, "bot change", parent=None)
    caplog.set_level(logging.DEBUG)
    with pytest.raises(PushRefused) as refused:
        repo.push("main")
    text = str(refused.value)
    assert REASON in text and "hook declined" in text and "push main" in text
    assert CANARY not in text and CANARY not in caplog.text
    assert refused.value.refused_sha == mine
    # The remote kept its head; the local branch follows it again (nothing left pending).
    assert remote_head(env, "main") == before
    assert repo.head("main") == before
    # Only main, only for the bot: another branch is accepted, a person's push to main too.
    repo.commit_files("side", {"notes.txt": b"bot\n"}, "side", parent=before)
    assert repo.push("side") == remote_head(env, "side")
    person = env.human.commit("a person's change", {"notes.txt": "person\n"})
    assert remote_head(env, "main") == person


def test_protect_branch_without_users_refuses_everyone(env: Env) -> None:
    from gitopsbot.sandbox.gitremote import protect_branch

    hook = protect_branch(env.tmp / "remote", "fleet", "main", message="closed for the night")
    assert hook.name == "update" and hook.stat().st_mode & 0o111
    (env.human.path / "x.txt").write_text("x\n")
    git("add", "--all", cwd=env.human.path)
    git("commit", "--quiet", "-m", "x", cwd=env.human.path)
    done = subprocess.run(
        ["git", "push", "origin", "main"], cwd=env.human.path, capture_output=True, text=True
    )
    assert done.returncode != 0 and "closed for the night" in done.stderr
    with pytest.raises(FileNotFoundError, match="no bare repository"):
        protect_branch(env.tmp / "remote", "nope", "main")


# -- refused: roll back anyway, revert by pull request ----------------------------------------


def test_refused_revert_rolls_back_and_opens_a_revert_pr(
    env: Env, served: GitRemote, caplog: pytest.LogCaptureFixture
) -> None:
    served.protect_branch("fleet", "main", users=(BOT,), message=REASON)
    rec = reconciler(env, GitRepo(settings(env, served, "mirror")))
    caplog.set_level(logging.DEBUG)
    sha, rollback, failed = refused_rollback(env, rec)

    # Main is as it was, on the remote and in the bot's view.
    assert remote_head(env, "main") == sha and rec.repo.head("main") == sha
    assert reverts_on_remote_main(env, sha) == []
    # The journal says what happened.
    assert failed.status is OperationStatus.FAILED and "maxDuration" in failed.failure
    assert failed.remediation.startswith(f"rollback:{rollback.op_id}; main refused")
    assert rollback.status is OperationStatus.RUNNING and rollback.reverts_op == failed.op_id
    number = int(failed.remediation.split("revert-pr:#")[1].split()[0])
    # The revert is on its own branch, and the rollback runs from that very commit.
    branch = f"gitopsbot/revert/{failed.op_id}"
    assert remote_head(env, branch) == rollback.desired_sha
    message = remote_git(env, "log", "-1", "--format=%B", branch)
    assert f"This reverts commit {sha}" in message
    pr = env.forge.pulls[number]
    assert pr.branch == branch and pr.base == "main"
    assert "already rolled back" in pr.title
    assert "ALREADY been rolled back" in pr.body and rollback.op_id in pr.body
    assert REASON in pr.body
    state_log = remote_git(env, "log", "--format=%B", "gitopsbot/state")
    assert "main refused the revert push" in state_log
    assert "refused" in caplog.text and f"revert PR #{number} opened" in caplog.text
    # The canary reaches no log, no PR, no journal, no state-branch file.
    assert CANARY not in caplog.text and CANARY not in pr.body + pr.title
    assert CANARY not in failed.remediation + failed.failure
    assert failed.op_id in remote_git(env, "grep", "-F", "-l", failed.op_id, "gitopsbot/state")
    found = subprocess.run(
        ["git", "--git-dir", str(bare(env)), "grep", "-F", CANARY, "gitopsbot/state"],
        capture_output=True,
        text=True,
    )
    assert found.returncode == 1, found.stdout  # 1: no match

    done = drive(env, rec)
    assert done.op_id == rollback.op_id and done.status is OperationStatus.SUCCEEDED
    # Revision 1 was installed by hand: reached by an upgrade with the Git policy (issue 10).
    latest = env.helm.history("tf", "tf-system")[-1]
    assert (latest.description, latest.chart_version) == (
        f"gitopsbot op={done.op_id} step=helm-upgrade",
        "1.0.0",
    )
    assert env.world.images() == {"hv:1"}


def test_refused_without_a_forge_still_rolls_back_and_says_so(
    env: Env, served: GitRemote, caplog: pytest.LogCaptureFixture
) -> None:
    served.protect_branch("fleet", "main", users=(BOT,), message=REASON)
    rec = reconciler(env, GitRepo(settings(env, served, "mirror")))
    rec.forge = None
    caplog.set_level(logging.WARNING)
    sha, rollback, failed = refused_rollback(env, rec)
    assert "no forge configured: revert PR not opened" in failed.remediation
    branch = f"gitopsbot/revert/{failed.op_id}"
    assert branch in failed.remediation and remote_head(env, branch) == rollback.desired_sha
    assert "revert PR not opened" in caplog.text
    assert drive(env, rec).status is OperationStatus.SUCCEEDED
    assert remote_head(env, "main") == sha


class DownForge(FakeForge):
    """The forge is down for pull requests until ``up`` is set."""

    up: bool = False

    def open_or_update_pull_request(self, draft: PullRequestDraft) -> PullRequestInfo:
        if not self.up:
            raise ForgeServerError("502 Bad Gateway (test)")
        return super().open_or_update_pull_request(draft)


def test_a_revert_pr_that_could_not_be_opened_is_retried_until_it_is(
    env: Env, served: GitRemote, caplog: pytest.LogCaptureFixture
) -> None:
    served.protect_branch("fleet", "main", users=(BOT,), message=REASON)
    rec = reconciler(env, GitRepo(settings(env, served, "mirror")))
    forge = DownForge(pulls=env.forge.pulls)
    rec.forge = forge
    sha, rollback, failed = refused_rollback(env, rec)
    assert "revert PR not opened: 502 Bad Gateway" in failed.remediation
    done = drive(env, rec)  # the rollback itself does not wait for the forge
    assert done.op_id == rollback.op_id and done.status is OperationStatus.SUCCEEDED
    assert [p for p in forge.pulls.values() if "already rolled back" in p.title] == []

    # At rest, but no longer than the next try of the pull request (a healthy release
    # watch alone would let it rest ten minutes: docs/decisions.md#resting-clusters).
    rec.release_watch = FakeReleaseWatch(healthy=True)
    env.clock.t += timedelta(minutes=5)
    tried = env.clock.now()
    assert rec.reconcile("lab").action == "idle"  # tried now, refused again; the watch starts
    env.clock.t += timedelta(minutes=1)
    resting = rec.reconcile("lab")  # the watch healthy: its own look is ten minutes away
    assert resting.action == "idle" and resting.rest_until == tried + REVERT_PR_RETRY
    forge.up = True
    env.clock.t += timedelta(minutes=4)
    resting = rec.reconcile("lab")  # opened: nothing owed, the look alone sets the rest
    assert resting.rest_until == tried + MANUAL_CHECK_WATCHED  # the first look, at the try
    opened = [p for p in forge.pulls.values() if "already rolled back" in p.title]
    assert len(opened) == 1 and opened[0].branch == f"gitopsbot/revert/{failed.op_id}"
    updated = rec.store.history("lab", failed.op_id)
    assert updated is not None
    assert updated.remediation == (
        f"rollback:{rollback.op_id}; main refused the revert push; revert-pr:#{opened[0].number}"
    )
    assert rec.store.current("lab").op_id == rollback.op_id  # the current record untouched
    env.clock.t += timedelta(minutes=10)
    rec.reconcile("lab")
    assert len([p for p in forge.pulls.values() if "already rolled back" in p.title]) == 1
    assert remote_head(env, "main") == sha  # Git is made to match by a person's merge


# -- the revert reaching main later is not a second rollback ----------------------------------


def merge_revert_branch(env: Env, branch: str, style: str, number: int) -> str:
    h = env.human.path
    env.human.pull()
    git("fetch", "--quiet", "origin", cwd=h)
    theirs = f"origin/{branch}"
    if style == "merge":
        message = f"Merge pull request #{number} from acme/{branch}"
        git("merge", "--quiet", "--no-ff", "-m", message, theirs, cwd=h)
    elif style == "squash":  # a squash titled by the PR only: no "This reverts commit" line
        git("merge", "--quiet", "--squash", theirs, cwd=h)
        git("commit", "--quiet", "-m", f"Revert lab (#{number})", cwd=h)
    else:  # rebase: the branch's commits copied onto main
        git("cherry-pick", "--allow-empty", f"HEAD..{theirs}", cwd=h)
    git("push", "--quiet", "origin", "main", cwd=h)
    return git("rev-parse", "HEAD", cwd=h).strip()


@pytest.mark.parametrize("style", ["merge", "squash", "rebase"])
def test_merged_revert_pr_is_seen_not_rolled_back_again(
    env: Env, served: GitRemote, style: str
) -> None:
    served.protect_branch("fleet", "main", users=(BOT,), message=REASON)
    rec = reconciler(env, GitRepo(settings(env, served, "mirror")))
    sha, rollback, failed = refused_rollback(env, rec)
    done = drive(env, rec)
    assert done.op_id == rollback.op_id and done.status is OperationStatus.SUCCEEDED
    number = int(failed.remediation.split("revert-pr:#")[1].split()[0])
    head = merge_revert_branch(env, f"gitopsbot/revert/{failed.op_id}", style, number)
    assert (
        head != sha
        and env.human.path.joinpath("clusters/lab/values.yaml").read_text()
        == (fleet_files("1.0.0", "hv:1")["clusters/lab/values.yaml"])
    )
    calls = list(env.helm.calls)
    for _ in range(3):
        rec.reconcile("lab")
        env.clock.t += M
    assert rec.store.seen("lab") == head
    current = rec.store.current("lab")
    assert current is not None and current.op_id == rollback.op_id
    assert rec.store.queued("lab") is None
    # Idle passes may read the release (a revision made by hand is reported); none writes it.
    writes = ("upgrade", "rollback")
    assert [c for c in env.helm.calls if c in writes] == [c for c in calls if c in writes]
    assert rollbacks(env) == 1
    record = remote_git(env, "log", "-1", "--format=%B", "gitopsbot/state")
    assert f"reverts {failed.op_id}, already rolled back by {rollback.op_id}" in record
    # Later changes are applied as usual.
    env.merge_pr(50, "lab: hv:3", fleet_files("1.0.0", "hv:3"))
    rec.reconcile("lab")
    later = rec.store.current("lab")
    assert later is not None and later.pr_number == 50 and later.kind is not OperationKind.ROLLBACK


def test_a_persons_revert_while_the_rollback_runs_is_seen(env: Env, served: GitRemote) -> None:
    served.protect_branch("fleet", "main", users=(BOT,), message=REASON)
    rec = reconciler(env, GitRepo(settings(env, served, "mirror")))
    sha, rollback, _failed = refused_rollback(env, rec)
    head = env.human.revert(sha)  # a person does by hand what the PR proposes
    rec.reconcile("lab")
    assert rec.store.seen("lab") == head
    current = rec.store.current("lab")
    assert current is not None and current.op_id == rollback.op_id and current.active
    done = drive(env, rec)
    assert done.op_id == rollback.op_id and done.status is OperationStatus.SUCCEEDED
    assert rollbacks(env) == 1


# -- resumable remediation --------------------------------------------------------------------


class FlakyRepo(GitRepo):
    """The real adapter; the remote server goes away during the first push of main."""

    server: GitRemote
    down_once = True

    def push(self, branch: str) -> str:
        if branch != "main" or not self.down_once:
            return super().push(branch)
        self.down_once = False
        self.server.stop()
        try:
            return super().push(branch)
        finally:
            self.server.start()


def test_transient_push_failure_is_retried_with_the_same_revert(
    env: Env, served: GitRemote
) -> None:
    repo = FlakyRepo(settings(env, served, "mirror"))
    repo.server = served
    rec = reconciler(env, repo)
    sha = fail_upgrade(env, rec)
    for _ in range(30):
        try:
            rec.reconcile("lab")
        except GitUnavailable as e:
            assert CANARY not in str(e)
            break
        env.clock.t += M
    else:
        raise AssertionError("the revert push never failed")
    pending = rec.store.current("lab")
    assert pending is not None and pending.active and pending.remediation.startswith("reverting:")
    assert remote_head(env, "main") == sha  # not reverted yet
    result = rec.reconcile("lab")
    assert result.action == "rollback"
    reverts = reverts_on_remote_main(env, sha)
    assert reverts == [remote_head(env, "main")]  # exactly one, the one recorded
    assert pending.remediation == f"reverting:{reverts[0]}"
    rollback = rec.store.current("lab")
    assert rollback is not None and rollback.desired_sha == reverts[0]
    failed = rec.store.history("lab", rollback.reverts_op)
    assert failed is not None and failed.remediation == f"rollback:{rollback.op_id}"
    assert drive(env, rec).status is OperationStatus.SUCCEEDED and rollbacks(env) == 1


class DyingRepo(GitRepo):
    """The real adapter; the process dies right after one chosen effect."""

    kill_at = ""

    def _die(self, point: str) -> None:
        if self.kill_at == point:
            self.kill_at = ""
            raise Killed(point)

    def revert_commit(self, branch: str, sha: str, message: str) -> str:
        out = super().revert_commit(branch, sha, message)
        self._die(f"revert:{branch.split('/')[0]}")
        return out

    def commit_files(
        self, branch: str, files: Mapping[str, bytes | None], message: str, *, parent: str | None
    ) -> str:
        out = super().commit_files(branch, files, message, parent=parent)
        if "committed" in message:
            self._die("record")
        return out

    def push(self, branch: str) -> str:
        out = super().push(branch)
        self._die(f"push:{branch.split('/')[0]}")
        return out


@pytest.mark.parametrize(
    ("kill_at", "protected"),
    [
        ("revert:main", False),  # revert committed, not recorded
        ("record", False),  # recorded, not pushed
        ("push:main", False),  # pushed, rollback not started
        ("push:gitopsbot", True),  # refused; revert branch pushed, rollback not started
    ],
)
def test_a_kill_anywhere_in_remediation_resumes_to_one_revert(
    env: Env, served: GitRemote, kill_at: str, protected: bool
) -> None:
    if protected:
        served.protect_branch("fleet", "main", users=(BOT,), message=REASON)
    repo = DyingRepo(settings(env, served, "mirror"))
    rec = reconciler(env, repo)
    sha = fail_upgrade(env, rec)
    repo.kill_at = kill_at
    for _ in range(30):
        try:
            rec.reconcile("lab")
        except Killed:
            break
        env.clock.t += M
    else:
        raise AssertionError(f"never reached {kill_at}")
    # A restart: a new process over the same mirror.
    rec = reconciler(env, GitRepo(settings(env, served, "mirror")))
    until_remediated(env, rec)
    rollback = rec.store.current("lab")
    assert rollback is not None and rollback.kind is OperationKind.ROLLBACK
    failed = rec.store.history("lab", rollback.reverts_op)
    assert failed is not None and failed.remediation.startswith(f"rollback:{rollback.op_id}")
    if protected:
        assert reverts_on_remote_main(env, sha) == [] and remote_head(env, "main") == sha
        branch = f"gitopsbot/revert/{failed.op_id}"
        assert remote_head(env, branch) == rollback.desired_sha
        prs = [p for p in env.forge.pulls.values() if p.branch == branch]
        assert len(prs) == 1
    else:
        assert reverts_on_remote_main(env, sha) == [rollback.desired_sha]
        assert remote_head(env, "main") == rollback.desired_sha
    assert drive(env, rec).status is OperationStatus.SUCCEEDED and rollbacks(env) == 1


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        ("remote: error: GH006: Protected branch update failed", "PushRefused"),
        ("pre-receive hook declined", "PushRefused"),
        ("unexpected http status code: 403 permission denied", "GitAuthError"),
        ("cannot push non-fastforwardable reference", "NonFastForward"),
        ("failed to connect to 127.0.0.1: Connection refused", "GitUnavailable"),
    ],
)
def test_git_errors_are_told_apart(env: Env, text: str, kind: str) -> None:
    import pygit2

    repo = GitRepo(
        GitSettings(
            url=env.url, mirror_dir=env.tmp / "classify", credentials=HttpsPassword(BOT, CANARY)
        )
    )
    error = repo._error("push main", pygit2.GitError(f"{text} (password {CANARY})"))
    assert type(error).__name__ == kind
    assert text in str(error) and CANARY not in str(error)


def test_a_branch_with_nothing_local_has_nothing_to_push(env: Env, served: GitRemote) -> None:
    repo = GitRepo(settings(env, served, "fresh"))
    repo.fetch()
    assert repo.push("main") == remote_head(env, "main")


def test_a_revert_that_conflicts_halts_and_lets_new_commits_in(env: Env, served: GitRemote) -> None:
    rec = reconciler(env, GitRepo(settings(env, served, "mirror")))
    fail_upgrade(env, rec)
    for _ in range(30):  # until the failure is recorded, before remediation runs
        rec.reconcile("lab")
        env.clock.t += M
        current = rec.store.current("lab")
        if current is not None and current.active and current.failure:
            break
    else:
        raise AssertionError("the upgrade never failed")
    # A person changes the same line meanwhile: git revert of the merge now conflicts.
    fix = env.merge_pr(60, "lab: hv:3", fleet_files("1.0.0", "hv:3"))
    result = rec.reconcile("lab")
    assert result.action == "failed" and "no automatic revert" in result.detail
    failed = rec.store.history("lab", current.op_id)
    assert failed is not None and failed.status is OperationStatus.FAILED
    assert failed.remediation.startswith("halt (no automatic revert") and "conflicts" in (
        failed.remediation
    )
    rec.reconcile("lab")
    later = rec.store.current("lab")
    assert later is not None and later.desired_sha == fix and later.pr_number == 60
