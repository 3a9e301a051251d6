"""The local forges' view of the sandbox Git remote's bare repository: branch tips, and the
merge a person's click on "Merge" makes there.

Merges run the real ``git`` in a temporary worktree of the bare repository (objects land in
it directly), then move the base branch with ``update-ref`` guarded by its old value, so a
push racing the merge makes the merge fail rather than be lost. ``update-ref`` runs no hooks:
a forge's merge is not refused by the protected-branch hook that refuses people's pushes.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

# Who a forge's merge is committed by (GitHub's web-flow committer, in spirit).
COMMITTER = ("Sandbox Forge", "forge@sandbox.invalid")
MERGER = ("Sandbox User", "user@sandbox.invalid")  # the person who clicks "Merge"


class MergeConflict(Exception):
    """The head does not merge cleanly into the base."""


class BaseMoved(Exception):
    """The base branch moved while the merge was made (a concurrent push)."""


@dataclass(frozen=True, slots=True)
class MergeResult:
    sha: str  # the new tip of the base branch
    squash_sha: str  # the squash commit, when one was made


class ForgeRepo:
    """Reads and merges in the bare repository at ``git_dir``."""

    def __init__(self, git_dir: Path) -> None:
        self.git_dir = git_dir

    def _git(self, *args: str, cwd: Path | None = None, check: bool = True) -> str:
        env = {**os.environ, **_identity()}
        where = ["-C", str(cwd)] if cwd else ["--git-dir", str(self.git_dir)]
        done = subprocess.run(
            ["git", *where, *args], env=env, capture_output=True, text=True, check=False
        )
        if check and done.returncode != 0:
            raise RuntimeError(f"git {' '.join(args)}: {done.stderr.strip() or done.stdout}")
        return done.stdout if done.returncode == 0 else ""

    def branches(self) -> dict[str, str]:
        """Every branch's tip: name -> sha."""
        out = self._git("for-each-ref", "--format=%(refname:short) %(objectname)", "refs/heads")
        return dict(line.split(" ", 1) for line in out.splitlines() if line)

    def tip(self, branch: str) -> str | None:
        return self.branches().get(branch)

    def contains(self, ancestor: str, tip: str) -> bool:
        """Whether ``ancestor`` is reachable from ``tip``."""
        done = subprocess.run(
            ["git", "--git-dir", str(self.git_dir), "merge-base", "--is-ancestor", ancestor, tip],
            capture_output=True,
            check=False,
        )
        return done.returncode == 0

    def commits_between(self, base: str, head: str) -> list[str]:
        """The commits on ``head`` not on ``base``, oldest first, merges left out."""
        out = self._git("rev-list", "--reverse", "--no-merges", f"{base}..{head}")
        return out.split()

    def landing_commit(self, head: str, base_tip: str) -> str:
        """The commit that brought ``head`` into the base's first-parent line: the oldest
        first-parent commit descending from ``head`` (``head`` itself on a fast-forward)."""
        out = self._git("rev-list", "--first-parent", "--ancestry-path", f"{head}..{base_tip}")
        line = out.split()
        return line[-1] if line else head

    def merge(
        self,
        *,
        base: str,
        head_sha: str,
        method: str,
        message: str,
        expect_base: str,
        squash_message: str = "",
    ) -> MergeResult:
        """Merge ``head_sha`` into branch ``base`` (at ``expect_base``) by ``method``:

        * ``merge``: a merge commit, parents base and head;
        * ``squash``: one commit on base with the head's changes;
        * ``squash-merge``: that commit, then a merge commit of it (GitLab's squash with its
          merge-commit method);
        * ``rebase``: the head's commits replayed onto base, base fast-forwarded to them;
        * ``rebase-merge``: replayed, then a merge commit (Gitea's "rebase then merge");
        * ``ff``: base moved to the head, which must descend from it (GitLab's fast-forward).
        """
        with tempfile.TemporaryDirectory(prefix="forge-merge-") as tmp:
            work = Path(tmp) / "work"
            self._git("worktree", "add", "--quiet", "--detach", str(work), expect_base)
            try:
                new, squashed = self._merge_in(
                    work,
                    base_tip=expect_base,
                    head=head_sha,
                    how=method,
                    msg=message,
                    squash_msg=squash_message,
                )
            finally:
                self._git("worktree", "remove", "--force", str(work), check=False)
                self._git("worktree", "prune", check=False)
        ref = f"refs/heads/{base}"
        moved = subprocess.run(
            ["git", "--git-dir", str(self.git_dir), "update-ref", ref, new, expect_base],
            capture_output=True,
            text=True,
            check=False,
        )
        if moved.returncode != 0:
            raise BaseMoved(moved.stderr.strip())
        return MergeResult(new, squashed)

    def _merge_in(
        self, work: Path, *, base_tip: str, head: str, how: str, msg: str, squash_msg: str
    ) -> tuple[str, str]:
        def git(*args: str) -> str:
            return self._git(*args, cwd=work)

        def clean(*args: str) -> None:
            # A conflict leaves the worktree mid-operation; it is thrown away after.
            done = subprocess.run(
                ["git", "-C", str(work), *args],
                env={**os.environ, **_identity()},
                capture_output=True,
                text=True,
                check=False,
            )
            if done.returncode != 0:
                raise MergeConflict(done.stdout.strip() or done.stderr.strip())

        squashed = ""
        if how == "merge":
            clean("merge", "--no-ff", "--no-edit", "-m", msg, head)
        elif how in ("squash", "squash-merge"):
            clean("merge", "--squash", head)
            clean("commit", "--allow-empty", "-m", squash_msg or msg)
            squashed = git("rev-parse", "HEAD").strip()
            if how == "squash-merge":  # GitLab: a squash commit, then a merge commit of it
                git("checkout", "--quiet", "--detach", base_tip)
                clean("merge", "--no-ff", "--no-edit", "-m", msg, squashed)
        elif how in ("rebase", "rebase-merge"):
            for sha in self.commits_between(base_tip, head):
                # The original author is kept; the committer is the forge, as on GitHub.
                clean("cherry-pick", "--allow-empty", "--keep-redundant-commits", sha)
            if how == "rebase-merge":
                replayed = git("rev-parse", "HEAD").strip()
                git("checkout", "--quiet", "--detach", base_tip)
                clean("merge", "--no-ff", "--no-edit", "-m", msg, replayed)
        elif how == "ff":
            if not self.contains(base_tip, head):
                raise MergeConflict("the base is not an ancestor of the head: rebase first")
            git("checkout", "--quiet", "--detach", head)
        else:
            raise ValueError(f"unknown merge method {how!r}")
        return git("rev-parse", "HEAD").strip(), squashed


def _identity() -> dict[str, str]:
    return {
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_AUTHOR_NAME": MERGER[0],
        "GIT_AUTHOR_EMAIL": MERGER[1],
        "GIT_COMMITTER_NAME": COMMITTER[0],
        "GIT_COMMITTER_EMAIL": COMMITTER[1],
    }
