"""GitRepo (pygit2) over real transports: file:// and smart HTTP with basic auth.

Every remote here is a real bare repository; "humans" are git CLI clones, so what the bot
pushes is checked by the same tool people use.
"""

from __future__ import annotations

import subprocess
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from gitopsbot.adapters.git_credentials import HttpsPassword
from gitopsbot.errors import GitFailed, NonFastForward
from tests.git.conftest import CLUSTER_FILES, PASSWORD, USER, Fleet

if TYPE_CHECKING:
    from gitopsbot.sandbox.gitremote import GitRemote

STATE = "gitopsbot/state"


def test_clone_read_head_and_tree(fleet: Fleet) -> None:
    human = fleet.human()
    repo = fleet.bot()
    assert repo.head("main") == human.sha("HEAD")
    for path, text in fleet.files.items():
        assert repo.read("main", path) == text.encode()
    assert repo.read("main", "clusters/alpha/nope.yaml") is None
    assert repo.read("main", "clusters/alpha") is None  # a directory is not a file
    assert repo.read("main", "../etc/passwd") is None
    tree = repo.tree("main")
    assert tree.list("clusters") == ["alpha", "beta"]
    assert tree.list("") == ["clusters", "gitopsbot.yaml"]
    assert tree.list("missing") == []
    assert tree.read("clusters/beta/values.yaml") == b"{}\n"
    assert tree.label == f"main@{human.sha('HEAD')[:10]}"
    assert repo.head("no-such-branch") is None
    with pytest.raises(GitFailed, match="no-such-branch"):
        repo.read("no-such-branch", "gitopsbot.yaml")


def test_new_commits_are_detected_and_read_at_any_commit(fleet: Fleet) -> None:
    human = fleet.human()
    repo = fleet.bot()
    first = repo.head("main")
    assert first is not None
    a = human.commit("bump alpha", {"clusters/alpha/release.yaml": "version: 1.1.0\n"})
    b = human.commit("bump beta", {"clusters/beta/release.yaml": "version: 1.2.0\n"})
    human.push()
    assert repo.head("main") == first  # nothing moves before a fetch
    repo.fetch()
    assert repo.head("main") == b
    new = repo.log("main", first, 10)
    assert [c.sha for c in new] == [a, b]
    assert new[0].summary == "bump alpha"
    assert new[0].parents == (first,)
    assert new[0].author == "Human <human@example.com>"
    assert isinstance(new[0].time, datetime) and new[0].time.tzinfo is not None
    assert [c.sha for c in repo.log("main", first, 1)] == [b]  # the newest when limited
    assert [c.sha for c in repo.log("main", None, 10)] == [first, a, b]
    assert repo.log("main", b, 10) == []
    # Reading needs no work tree and works at every commit, by full or short sha.
    assert repo.read(first, "clusters/alpha/release.yaml") == b"version: 1.0.0\n"
    assert repo.read(a[:8], "clusters/alpha/release.yaml") == b"version: 1.1.0\n"
    assert repo.read(a, "clusters/beta/release.yaml") == b"version: 1.0.0\n"
    assert repo.diff_paths(first, b) == [
        "clusters/alpha/release.yaml",
        "clusters/beta/release.yaml",
    ]
    assert repo.is_ancestor(first, b) and repo.is_ancestor(b, b)
    assert not repo.is_ancestor(b, first)
    assert not (fleet.tmp / "mirror" / "clusters").exists()  # bare: no work tree


def test_log_after_a_force_push(fleet: Fleet) -> None:
    """History rewritten under the bot: the new commits are those the old head lacks."""
    human = fleet.human()
    repo = fleet.bot()
    root = repo.head("main")
    dropped = human.commit("will be dropped", {"x.txt": "1\n"})
    human.push()
    repo.fetch()
    assert repo.head("main") == dropped
    human.git("reset", "--quiet", "--hard", "HEAD~1")
    replacement = human.commit("replacement", {"y.txt": "2\n"})
    human.git("push", "--quiet", "--force", "origin", "main")
    repo.fetch()
    assert repo.head("main") == replacement
    assert [c.sha for c in repo.log("main", dropped, 10)] == [replacement]
    assert [c.sha for c in repo.log("main", root, 10)] == [replacement]
    assert not repo.is_ancestor(dropped, replacement)


def test_state_branch_commit_and_push(fleet: Fleet) -> None:
    repo = fleet.bot()
    sha = repo.commit_files(
        STATE, {"state/alpha.yaml": b"phase: applying\n"}, "alpha: applying", parent=None
    )
    info = repo.commit_info(sha)
    assert info.parents == ()  # the state branch starts as an orphan
    assert info.author == "gitopsbot <bot@example.com>"
    assert repo.push(STATE) == sha
    sha2 = repo.commit_files(
        STATE,
        {"state/alpha.yaml": b"phase: done\n", "state/alpha/backup.yaml": b"k: v\n"},
        "alpha: done",
        parent=None,
    )
    assert repo.commit_info(sha2).parents == (sha,)
    sha3 = repo.commit_files(STATE, {"state/alpha/backup.yaml": None}, "drop", parent=None)
    repo.push(STATE)
    human = fleet.human("checker")
    human.git("fetch", "--quiet", "origin", STATE)
    assert human.sha("FETCH_HEAD") == sha3
    assert human.show("FETCH_HEAD:state/alpha.yaml") == "phase: done\n"
    files = human.git("ls-tree", "-r", "--name-only", "FETCH_HEAD").split()
    assert files == ["state/alpha.yaml"]
    # main is untouched by the state branch.
    assert human.show("origin/main:clusters/alpha/release.yaml") == "version: 1.0.0\n"


def test_concurrent_human_push_is_kept(fleet: Fleet) -> None:
    """Bot fetches, a human pushes, the bot pushes: retry replays the bot's commit on top."""
    human = fleet.human()
    repo = fleet.bot()
    base = repo.head("main")
    bot_sha = repo.commit_files(
        "main", {"clusters/alpha/values.yaml": b"bot: edit\n"}, "bot edit", parent=base
    )
    human_sha = human.commit("human edit", {"clusters/beta/values.yaml": "human: edit\n"})
    human.push()
    pushed = repo.push("main")
    assert pushed != bot_sha  # replayed onto the human's commit
    check = fleet.human("checker")
    assert check.sha("origin/main") == pushed
    assert check.sha("origin/main~1") == human_sha
    assert check.show("origin/main:clusters/alpha/values.yaml") == "bot: edit\n"
    assert check.show("origin/main:clusters/beta/values.yaml") == "human: edit\n"
    log = check.git("log", "-1", "--format=%an%n%s", "origin/main")
    assert log.split("\n")[:2] == ["gitopsbot", "bot edit"]


def test_conflicting_replay_fails_without_losing_the_human_commit(fleet: Fleet) -> None:
    human = fleet.human()
    repo = fleet.bot()
    repo.commit_files("main", {"gitopsbot.yaml": b"bot: 1\n"}, "bot", parent=None)
    human.commit("human", {"gitopsbot.yaml": "human: 1\n"})
    human.push()
    with pytest.raises(GitFailed, match=r"conflicts with the remote in gitopsbot\.yaml"):
        repo.push("main")
    check = fleet.human("checker")
    assert check.show("origin/main:gitopsbot.yaml") == "human: 1\n"
    # The failed commit is dropped, so the next pass starts from the remote's state.
    assert repo.head("main") == check.sha("origin/main")
    again = repo.commit_files("main", {"gitopsbot.yaml": b"bot: 2\n"}, "bot", parent=None)
    assert repo.push("main") == again


def test_push_after_fetch_onto_a_stale_parent_is_replayed(fleet: Fleet) -> None:
    """The mirror already knows the human's commit (libgit2's local non-fast-forward check)."""
    human = fleet.human()
    repo = fleet.bot()
    old = repo.head("main")
    human_sha = human.commit("human", {"b.txt": "human\n"})
    human.push()
    repo.fetch()
    repo.commit_files("main", {"a.txt": b"bot\n"}, "bot", parent=old)
    pushed = repo.push("main")
    check = fleet.human("checker")
    assert check.sha("origin/main") == pushed
    assert check.sha("origin/main~1") == human_sha


def test_unpushed_commits_survive_a_fetch_after_the_remote_moved(fleet: Fleet) -> None:
    human = fleet.human()
    repo = fleet.bot()
    mine = repo.commit_files("main", {"a.txt": b"bot\n"}, "bot", parent=None)
    human.commit("human", {"b.txt": "human\n"})
    human.push()
    repo.fetch()
    assert repo.head("main") == mine  # still ours until pushed
    second = repo.commit_files("main", {"c.txt": b"bot\n"}, "bot 2", parent=None)
    assert repo.commit_info(second).parents == (mine,)
    repo.push("main")
    check = fleet.human("checker")
    assert check.show("origin/main:a.txt") == "bot\n"
    assert check.show("origin/main:b.txt") == "human\n"
    assert check.show("origin/main:c.txt") == "bot\n"


def test_push_gives_up_after_the_configured_attempts(fleet: Fleet) -> None:
    human = fleet.human()
    repo = fleet.bot(push_attempts=1)
    repo.commit_files("main", {"a.txt": b"bot\n"}, "bot", parent=None)
    human.commit("human", {"b.txt": "human\n"})
    human.push()
    with pytest.raises(NonFastForward):
        repo.push("main")


def test_revert_commit_undoes_a_change_and_names_it(fleet: Fleet) -> None:
    human = fleet.human()
    change = human.commit("bump", {"clusters/alpha/release.yaml": "version: 2.0.0\n"})
    later = human.commit("other", {"clusters/beta/values.yaml": "x: 1\n"})
    human.push()
    repo = fleet.bot()
    sha = repo.revert_commit("main", change, "gitopsbot: roll back alpha")
    info = repo.commit_info(sha)
    assert info.parents == (later,)
    assert f"This reverts commit {change}." in info.message
    assert repo.read(sha, "clusters/alpha/release.yaml") == b"version: 1.0.0\n"
    assert repo.read(sha, "clusters/beta/values.yaml") == b"x: 1\n"
    repo.push("main")
    human.pull()
    assert (human.path / "clusters/alpha/release.yaml").read_text() == "version: 1.0.0\n"


def test_revert_of_a_merge_uses_the_first_parent(fleet: Fleet) -> None:
    human = fleet.human()
    human.git("checkout", "--quiet", "-b", "gitopsbot/alpha/2.0.0")
    human.commit("propose", {"clusters/alpha/release.yaml": "version: 2.0.0\n"})
    human.git("checkout", "--quiet", "main")
    human.git(
        "merge", "--quiet", "--no-ff", "-m", "Merge gitopsbot/alpha/2.0.0", "gitopsbot/alpha/2.0.0"
    )
    merge = human.sha("HEAD")
    human.push()
    repo = fleet.bot()
    sha = repo.revert_commit("main", merge, "roll back")
    assert repo.read(sha, "clusters/alpha/release.yaml") == b"version: 1.0.0\n"


def test_revert_conflict_is_git_failed(fleet: Fleet) -> None:
    human = fleet.human()
    change = human.commit("v2", {"gitopsbot.yaml": "v: 2\n"})
    human.commit("v3", {"gitopsbot.yaml": "v: 3\n"})
    human.push()
    repo = fleet.bot()
    with pytest.raises(GitFailed, match=r"conflicts in gitopsbot\.yaml"):
        repo.revert_commit("main", change, "undo v2")


def test_mirror_is_reused_across_restarts(fleet: Fleet) -> None:
    repo = fleet.bot()
    sha = repo.commit_files(STATE, {"s": b"1"}, "s", parent=None)
    again = fleet.bot()  # same mirror directory: a restarted bot
    assert again.head(STATE) == sha  # unpushed local commits survive a restart
    assert again.push(STATE) == sha


def test_bad_paths_are_refused(fleet: Fleet) -> None:
    repo = fleet.bot()
    with pytest.raises(GitFailed, match="invalid path"):
        repo.commit_files(STATE, {"../x": b"1"}, "s", parent=None)


def test_unknown_sha_is_git_failed(fleet: Fleet, tmp_path: Path) -> None:
    repo = fleet.bot()
    with pytest.raises(GitFailed):
        repo.read("0" * 40, "gitopsbot.yaml")


def test_a_ref_another_push_holds_locked_is_a_race_replayed_not_a_failure(
    tmp_path: Path, fleet_source: Path, http_remote: GitRemote
) -> None:
    """Two writers of the state branch (``run`` and ``propose``) push at once: git's
    receive-pack answers ``failed to update ref`` to the one that finds the ref locked. That
    is the remote moving, not a refusal: the push is replayed, as for a non-fast-forward.
    The lock is a real ``<ref>.lock`` in the bare repository; a pre-receive hook removes it
    on the second push, as the other writer's push ending would."""
    url = http_remote.create_fleet_repo("fleet-locked", fleet_source)
    bare = http_remote.root / "fleet-locked.git"
    human_url = url.replace("http://", f"http://{USER}:{PASSWORD}@")
    fleet = Fleet(url, human_url, tmp_path, HttpsPassword(USER, PASSWORD), CLUSTER_FILES)
    repo = fleet.bot()
    repo.commit_files(STATE, {"a.yaml": b"a: 1\n"}, "first", parent=None)
    repo.push(STATE)
    mine = repo.commit_files(STATE, {"a.yaml": b"a: 2\n"}, "second", parent=None)
    lock = bare / "refs" / "heads" / "gitopsbot" / "state.lock"
    lock.write_text("held by another push\n")
    hook = bare / "hooks" / "pre-receive"
    seen = tmp_path / "pushed-once"
    hook.write_text(
        f'#!/bin/sh\nif [ -e "{seen}" ]; then rm -f "{lock}"; else touch "{seen}"; fi\n'
    )
    hook.chmod(0o755)
    assert repo.push(STATE) == mine
    assert seen.exists()  # the first push met the lock
    check = fleet.human("checker")
    check.git("fetch", "--quiet", "origin", STATE)
    assert check.sha("FETCH_HEAD") == mine


def test_a_ref_locked_for_good_gives_up_after_the_attempts_as_a_race(
    tmp_path: Path, fleet_source: Path, http_remote: GitRemote
) -> None:
    url = http_remote.create_fleet_repo("fleet-locked-for-good", fleet_source)
    bare = http_remote.root / "fleet-locked-for-good.git"
    human_url = url.replace("http://", f"http://{USER}:{PASSWORD}@")
    fleet = Fleet(url, human_url, tmp_path, HttpsPassword(USER, PASSWORD), CLUSTER_FILES)
    repo = fleet.bot(push_attempts=2)
    repo.commit_files(STATE, {"a.yaml": b"a: 1\n"}, "first", parent=None)
    repo.push(STATE)
    repo.commit_files(STATE, {"a.yaml": b"a: 2\n"}, "second", parent=None)
    (bare / "refs" / "heads" / "gitopsbot" / "state.lock").write_text("stuck\n")
    with pytest.raises(NonFastForward, match="failed to update ref"):
        repo.push(STATE)


def test_changed_paths_of_two_commits_are_diffed_once_and_a_branch_name_never_kept(
    fleet: Fleet,
) -> None:
    human = fleet.human()
    repo = fleet.bot()
    first = repo.head("main")
    a = human.commit("a", {"clusters/alpha/values.yaml": "a: 1\n"})
    human.push()
    repo.fetch()
    assert repo.diff_paths(first, a) == ["clusters/alpha/values.yaml"]
    assert repo.diff_paths(first, a) == ["clusters/alpha/values.yaml"]  # from the cache
    assert list(repo._diffs) == [(first, a)]  # type: ignore[attr-defined]
    b = human.commit("b", {"clusters/beta/values.yaml": "b: 1\n"})
    human.push()
    repo.fetch()
    # A branch name moves: asked by name, the answer is today's, and nothing is kept.
    assert repo.diff_paths(first, "main") == [
        "clusters/alpha/values.yaml",
        "clusters/beta/values.yaml",
    ]
    assert list(repo._diffs) == [(first, a)]  # type: ignore[attr-defined]
    assert repo.diff_paths(a, b) == ["clusters/beta/values.yaml"]


def test_a_push_of_a_tip_pushed_already_makes_no_round_trip(tmp_path: Path) -> None:
    """#29: several passes' commits made before one push all go with it; the later passes'
    pushes are answered from the mirror, without the remote (gone here)."""
    from gitopsbot.adapters.git import GitRepo, GitSettings
    from gitopsbot.errors import GitError

    remote = tmp_path / "fleet.git"
    subprocess.run(["git", "init", "-q", "--bare", str(remote)], check=True)
    repo = GitRepo(
        GitSettings(url=remote.as_uri(), mirror_dir=tmp_path / "m", author_email="b@x.org")
    )
    first = repo.commit_files(STATE, {"a": b"1\n"}, "a", parent=None)
    second = repo.commit_files(STATE, {"b": b"2\n"}, "b", parent=None)
    assert repo.push(STATE) == second  # carries both commits
    remote.rename(tmp_path / "gone.git")
    assert repo.push(STATE) == second  # the tip went already: no remote needed
    assert first != second
    repo.commit_files(STATE, {"c": b"3\n"}, "c", parent=None)
    with pytest.raises(GitError):
        repo.push(STATE)  # a new tip still goes to the remote
