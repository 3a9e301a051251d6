"""A working copy given as a local path can be read but not pushed to (libgit2's local
transport refuses every push into a non-bare repository): the error says what to do."""

from __future__ import annotations

from pathlib import Path

import pytest

from gitopsbot.adapters.git import GitRepo, GitSettings
from gitopsbot.errors import GitFailed
from tests.git.conftest import git


def test_push_to_a_working_copy_says_to_use_a_bare_clone(tmp_path: Path) -> None:
    work = tmp_path / "gpu-fleet"
    work.mkdir()
    git("init", "--quiet", "-b", "main", cwd=work)
    (work / "README.md").write_text("fleet\n")
    git("add", "README.md", cwd=work)
    git("commit", "--quiet", "-m", "init", cwd=work)
    repo = GitRepo(GitSettings(url=work.as_uri(), mirror_dir=tmp_path / "mirror"))
    repo.fetch()
    assert repo.read("main", "README.md") == b"fleet\n"
    head = repo.head("main")
    assert head is not None
    repo.commit_files("proposal", {"a.txt": b"a\n"}, "add a", parent=head)
    with pytest.raises(GitFailed, match=r"non-bare.*git clone --bare"):
        repo.push("proposal")
