"""The fleet repository through pygit2: a bare local mirror of one remote (``origin``).

Implements ``gitopsbot.ports.repo.Repo``. Remote branches are fetched into
``refs/remotes/origin/*``; the bot's own commits go to local ``refs/heads/*`` and leave the
machine only by ``push``. Every pygit2 error becomes a ``gitopsbot.errors`` GitError, built
from redacted text: no token, password or passphrase ever reaches a log line or an exception.

The credential kinds are ``adapters/git_credentials.py``; a transfer's callbacks and what its
failures mean, ``adapters/git_transfer.py``; a commit's files, ``adapters/git_tree.py``.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pygit2
from pygit2.enums import FileMode, SortMode

from gitopsbot.adapters.git_credentials import (
    Credentials,
    HttpsPassword,
    HttpsToken,
    HttpsTokenSource,
    SshKey,
    redact,
)
from gitopsbot.adapters.git_transfer import (
    NON_FF_HINTS,
    REFUSED_HINTS,
    TransferCallbacks,
    transfer_error,
    with_remote_text,
)
from gitopsbot.adapters.git_tree import CommitTree
from gitopsbot.core.fleet.observed_git import CommitInfo
from gitopsbot.errors import (
    GitAuthError,
    GitError,
    GitFailed,
    NonFastForward,
    PushRefused,
)

log = logging.getLogger(__name__)

_REMOTE = "origin"
# Commit pairs whose changed paths are kept (``diff_paths``): about 100 bytes each.
DIFF_CACHE = 4096
_FULL_SHA = re.compile(r"[0-9a-f]{40}")
_TRACKING = "refs/remotes/origin/"
_SHA = re.compile(r"^[0-9a-f]{4,40}$")
TREES_KEPT = 4  # commits whose trees GitRepo.read keeps, directories parsed


@dataclass(frozen=True, slots=True)
class GitSettings:
    """Where the fleet repository is and how the bot writes to it.

    ``url``: https://, ssh://, scp-like ``git@host:path`` or file://. ``mirror_dir``: the bare
    local mirror (created on first use). ``push_attempts``: pushes tried before giving up on a
    remote that keeps moving. ``timeout_seconds``: libgit2's connect and read timeouts
    (process-wide settings in libgit2; the last GitRepo created sets them).
    ``extra_fetch_refspecs``: fetched besides ``+refs/heads/*:refs/remotes/origin/*`` on each
    ``fetch`` (not stored in the mirror's config); empty for the bot. ``gitopsbot status
    --fleet CLONE`` uses one to read a clone's own remote-tracking refs.
    """

    url: str
    mirror_dir: Path
    credentials: Credentials | None = None
    author_name: str = "gitopsbot"
    author_email: str = "gitopsbot@localhost"
    push_attempts: int = 5
    # Connect and read timeouts of the transport: a hung remote must not stall the loop.
    timeout_seconds: float = 60.0
    extra_fetch_refspecs: tuple[str, ...] = ()


class GitRepo:
    """``Repo`` over a bare pygit2 mirror. Not thread-safe: one reconcile loop owns it."""

    def __init__(self, settings: GitSettings) -> None:
        self._settings = settings
        cred = settings.credentials
        secrets: tuple[str, ...] = ()
        if isinstance(cred, HttpsToken):
            secrets = (cred.token,)
        elif isinstance(cred, HttpsPassword):
            secrets = (cred.password,)
        elif isinstance(cred, SshKey):
            secrets = (cred.passphrase,)
        self._fixed_secrets = secrets
        self._url_for_messages = redact(settings.url, secrets)
        self._diffs: dict[tuple[str, str], tuple[str, ...]] = {}
        self._diffs_lock = threading.Lock()
        # The last few commits' trees, their directories parsed (``CommitTree``): a reader
        # of one file per cluster (``seen``, a summary) goes through ``clusters/`` each time.
        self._trees: dict[str, CommitTree] = {}
        self._trees_lock = threading.Lock()
        timeout_ms = max(1, int(settings.timeout_seconds * 1000))
        pygit2.settings.server_connect_timeout = timeout_ms
        pygit2.settings.server_timeout = timeout_ms
        with self._mapped("open the local mirror"):
            self._repo = self._open_mirror(settings.mirror_dir, settings.url)

    @property
    def _secrets(self) -> tuple[str, ...]:
        """What messages mask: the configured secret, or every token a source handed out."""
        cred = self._settings.credentials
        if isinstance(cred, HttpsTokenSource):
            return cred.source.known()
        return self._fixed_secrets

    # -- plumbing ---------------------------------------------------------------------------

    @staticmethod
    def _open_mirror(path: Path, url: str) -> pygit2.Repository:
        if (path / "HEAD").is_file():
            repo = pygit2.Repository(str(path))
        else:
            path.mkdir(parents=True, exist_ok=True)
            repo = pygit2.init_repository(str(path), bare=True)
        names = [r.name for r in repo.remotes]
        if _REMOTE not in names:
            repo.remotes.create(_REMOTE, url, f"+refs/heads/*:{_TRACKING}*")
        elif repo.remotes[_REMOTE].url != url:
            repo.remotes.set_url(_REMOTE, url)
        return repo

    def _error(self, what: str, exc: BaseException) -> GitError:
        text = redact(str(exc), self._secrets)
        return transfer_error(f"{what} ({self._url_for_messages})", text)

    @contextmanager
    def _mapped(self, what: str) -> Iterator[None]:
        try:
            yield
        except GitError:
            raise
        except (pygit2.GitError, KeyError, ValueError, OSError) as exc:
            raise self._error(what, exc) from None

    def _signature(self) -> pygit2.Signature:
        return pygit2.Signature(self._settings.author_name, self._settings.author_email)

    def _ref_target(self, name: str) -> pygit2.Oid | None:
        ref = self._repo.references.get(name)
        if ref is None:
            return None
        target = ref.resolve().target
        return target if isinstance(target, pygit2.Oid) else None

    def _commit(self, ref_or_sha: str) -> pygit2.Commit:
        """Resolve a branch name, full ref or (abbreviated) sha to a commit."""
        with self._mapped(f"resolve {ref_or_sha!r}"):
            if ref_or_sha.startswith("refs/"):
                oid = self._ref_target(ref_or_sha)
                if oid is None:
                    raise GitFailed(f"no such ref: {ref_or_sha}")
                return self._repo[oid].peel(pygit2.Commit)
            head = self.head(ref_or_sha)
            if head is not None:
                return self._repo[head].peel(pygit2.Commit)
            if _SHA.match(ref_or_sha):
                return self._repo.revparse_single(ref_or_sha).peel(pygit2.Commit)
            raise GitFailed(f"no such branch or commit: {ref_or_sha}")

    @staticmethod
    def _info(commit: pygit2.Commit) -> CommitInfo:
        offset = timezone(timedelta(minutes=commit.commit_time_offset))
        author = commit.author
        return CommitInfo(
            sha=str(commit.id),
            parents=tuple(str(p) for p in commit.parent_ids),
            author=f"{author.name} <{author.email}>",
            message=commit.message,
            time=datetime.fromtimestamp(commit.commit_time, tz=offset),
        )

    def commit_info(self, ref_or_sha: str) -> CommitInfo:
        """One commit's metadata (not in the port; handy for wiring and tests)."""
        return self._info(self._commit(ref_or_sha))

    # -- Repo port ------------------------------------------------------------------------

    def _transfer(self, where: str, run: Callable[[TransferCallbacks], None]) -> TransferCallbacks:
        """``run`` a fetch or push with fresh callbacks, which it returns. With a token
        source, a transfer refused for its token runs once more with a new one: a token can
        expire between the requests of one transfer, and libgit2 cannot replay a POST."""
        cred = self._settings.credentials
        callbacks = TransferCallbacks(cred, where)
        try:
            run(callbacks)
        except GitAuthError:
            if not isinstance(cred, HttpsTokenSource) or not callbacks.offered:
                raise
            cred.source.refused(callbacks.offered)
            log.info("%s: the remote refused the app's token; retrying with a new one", where)
            callbacks = TransferCallbacks(cred, where)
            run(callbacks)
        return callbacks

    def fetch(self) -> None:
        def run(callbacks: TransferCallbacks) -> None:
            with self._mapped("fetch"):
                remote = self._repo.remotes[_REMOTE]
                if self._settings.extra_fetch_refspecs:
                    remote.fetch(
                        [*remote.fetch_refspecs, *self._settings.extra_fetch_refspecs],
                        callbacks=callbacks,
                        prune=pygit2.enums.FetchPrune.PRUNE,
                    )
                else:
                    remote.fetch(callbacks=callbacks, prune=pygit2.enums.FetchPrune.PRUNE)

        self._transfer(f"fetch ({self._url_for_messages})", run)
        log.debug("fetched %s", self._url_for_messages)

    def head(self, branch: str) -> str | None:
        local = self._ref_target(f"refs/heads/{branch}")
        remote = self._ref_target(f"{_TRACKING}{branch}")
        if local is None:
            return str(remote) if remote is not None else None
        if remote is None or local == remote:
            return str(local)
        # Behind the remote: nothing of ours is pending, the remote is newer. Otherwise the
        # local branch holds unpushed commits of the bot, which push() will replay.
        return str(remote) if self._repo.descendant_of(remote, local) else str(local)

    def branches(self, prefix: str = "") -> list[str]:
        names: set[str] = set()
        for ref in self._repo.references:
            for base in ("refs/heads/", _TRACKING):
                if ref.startswith(base) and ref[len(base) :] != "HEAD":
                    names.add(ref[len(base) :])
        return sorted(n for n in names if n.startswith(prefix))

    def _kept_tree(self, commit: pygit2.Commit) -> CommitTree:
        key = str(commit.id)
        with self._trees_lock:
            tree = self._trees.get(key)
        if tree is None:
            tree = CommitTree(self._repo, commit, key[:10])
            with self._trees_lock:
                while len(self._trees) >= TREES_KEPT:
                    self._trees.pop(next(iter(self._trees)))
                self._trees[key] = tree
        return tree

    def read(self, ref_or_sha: str, path: str) -> bytes | None:
        return self._kept_tree(self._commit(ref_or_sha)).read(path)

    def tree(self, ref_or_sha: str) -> CommitTree:
        commit = self._commit(ref_or_sha)
        # The kept tree's directories, parsed once for all readers of the commit (#29).
        return self._kept_tree(commit).named(f"{ref_or_sha}@{str(commit.id)[:10]}")

    def log(self, branch: str, since_sha: str | None, limit: int) -> list[CommitInfo]:
        head = self.head(branch)
        if head is None or limit <= 0:
            return []
        with self._mapped(f"log {branch}"):
            walker = self._repo.walk(pygit2.Oid(hex=head), SortMode.TOPOLOGICAL)
            # The commits that *landed* on the branch: a merged pull request counts once.
            walker.simplify_first_parent()
            if since_sha is not None:
                try:
                    walker.hide(self._commit(since_sha).id)
                except GitError:
                    log.warning(
                        "log %s: %s is gone (force push?); listing recent", branch, since_sha
                    )
            out: list[CommitInfo] = []
            for commit in walker:
                out.append(self._info(commit))
                if len(out) >= limit:
                    break
        out.reverse()
        return out

    def commit_files(
        self,
        branch: str,
        files: Mapping[str, bytes | None],
        message: str,
        *,
        parent: str | None,
    ) -> str:
        with self._mapped(f"commit to {branch}"):
            base_sha = parent if parent is not None else self.head(branch)
            base = self._commit(base_sha) if base_sha is not None else None
            index = pygit2.Index()
            if base is not None:
                index.read_tree(base.tree)
            for path, data in sorted(files.items()):
                clean = _clean_path(path)
                if data is None:
                    if clean in index:
                        index.remove(clean)
                    else:
                        # Removing a directory's entries when the path names a directory.
                        for entry in [e.path for e in index if e.path.startswith(clean + "/")]:
                            index.remove(entry)
                    continue
                blob = self._repo.create_blob(data)
                index.add(pygit2.IndexEntry(clean, blob, FileMode.BLOB))
            tree = index.write_tree(self._repo)
            sig = self._signature()
            parents = [base.id] if base is not None else []
            oid = self._repo.create_commit(None, sig, sig, message, tree, parents)
            self._repo.references.create(f"refs/heads/{branch}", oid, force=True)
        log.info("committed %s on %s", str(oid)[:10], branch)
        return str(oid)

    def push(self, branch: str) -> str:
        """Push the local ``branch`` (see ``Repo.push``).

        A branch with no local commits (only the remote-tracking ref) has nothing to push: the
        remote's head is returned. A push the remote refuses by policy raises PushRefused and
        moves the local branch back to the remote's head (dropped when the remote has none):
        the remote will never take those commits, and ``head`` prefers a local branch that is
        ahead, so later passes would otherwise keep building on them. The refused commit stays
        in the object store; ``PushRefused.refused_sha`` names it.
        """
        local = self._ref_target(f"refs/heads/{branch}")
        if local is None:
            remote = self._ref_target(f"{_TRACKING}{branch}")
            if remote is not None:
                return str(remote)
            raise GitFailed(f"push {branch}: no local branch {branch!r} to push")
        if self._ref_target(f"{_TRACKING}{branch}") == local:
            # Pushed already: the branch's tip went with an earlier push (several passes'
            # commits made before one push all go with it, #29); no round trip to the remote.
            return str(local)
        attempts = max(1, self._settings.push_attempts)
        for attempt in range(1, attempts + 1):
            try:
                self._push_once(branch)
            except PushRefused as refused:
                self._drop_refused(branch)
                raise PushRefused(str(refused), refused_sha=str(local)) from None
            except NonFastForward:
                log.info(
                    "push %s: remote moved (attempt %d/%d); replaying", branch, attempt, attempts
                )
                if attempt == attempts:
                    raise
                self.fetch()
                self._replay(branch)
                continue
            head = self._ref_target(f"refs/heads/{branch}")
            assert head is not None
            self._repo.references.create(f"{_TRACKING}{branch}", head, force=True)
            log.info("pushed %s to %s", str(head)[:10], branch)
            return str(head)
        raise NonFastForward(f"push {branch}: remote kept moving")  # pragma: no cover

    def _drop_refused(self, branch: str) -> None:
        """Point the local branch back at the remote's head (or drop it) after a refusal."""
        ref = f"refs/heads/{branch}"
        remote = self._ref_target(f"{_TRACKING}{branch}")
        with self._mapped(f"reset {branch} after a refused push"):
            if remote is not None:
                self._repo.references.create(ref, remote, force=True)
            elif ref in self._repo.references:
                self._repo.references.delete(ref)
        log.warning("push %s refused: local %s reset to the remote's head", branch, branch)

    def _push_once(self, branch: str) -> None:
        # The remote's own words (a hook's stderr arrives as "remote:" sideband text): the
        # reason a push was refused; kept across the attempts of ``_transfer``.
        said: list[str] = []
        ref = f"refs/heads/{branch}"

        def run(attempt: TransferCallbacks) -> None:
            attempt.said = said
            with self._mapped(f"push {branch}"):
                self._repo.remotes[_REMOTE].push([f"{ref}:{ref}"], callbacks=attempt)

        try:
            callbacks = self._transfer(f"push {branch} ({self._url_for_messages})", run)
        except GitError as exc:
            # libgit2's local transport refuses every push into a working copy.
            if isinstance(exc, PushRefused):
                raise PushRefused(with_remote_text(str(exc), said, self._secrets)) from None
            if "non-bare" not in str(exc):
                raise
            raise GitFailed(
                f"push {branch} to {self._url_for_messages}: a working copy (non-bare "
                "repository) cannot be pushed to over a local path; use a bare clone "
                "(git clone --bare) or the repository's remote URL"
            ) from None
        if callbacks.rejected:
            reasons = "; ".join(f"{r}: {m}" for r, m in callbacks.rejected)
            text = redact(reasons, self._secrets)
            low = text.lower()
            if any(h in low for h in NON_FF_HINTS):
                raise NonFastForward(f"push {branch}: {text}")
            if any(h in low for h in REFUSED_HINTS):
                message = f"push {branch} ({self._url_for_messages}): refused by the remote: {text}"
                raise PushRefused(with_remote_text(message, said, self._secrets))
            if "rejected" in low or "stale" in low:
                raise NonFastForward(f"push {branch}: {text}")
            raise GitFailed(f"push {branch}: the remote refused: {text}")

    def _replay(self, branch: str) -> None:
        """Rebase the bot's unpushed commits onto the freshly fetched remote head."""
        local = self._ref_target(f"refs/heads/{branch}")
        remote = self._ref_target(f"{_TRACKING}{branch}")
        if local is None or remote is None:
            return
        if local == remote or self._repo.descendant_of(local, remote):
            return
        with self._mapped(f"replay {branch}"):
            walker = self._repo.walk(local, SortMode.TOPOLOGICAL | SortMode.REVERSE)
            walker.hide(remote)
            mine = list(walker)
            onto = self._repo[remote].peel(pygit2.Commit)
            for commit in mine:
                if len(commit.parents) > 1:
                    raise GitFailed(f"replay {branch}: cannot replay merge commit {commit.id}")
                ancestor = (
                    commit.parents[0].tree
                    if commit.parents
                    else self._repo[self._repo.TreeBuilder().write()].peel(pygit2.Tree)
                )
                index = self._repo.merge_trees(ancestor, onto.tree, commit.tree)
                if index.conflicts is not None:
                    paths = sorted({c.path for entry in index.conflicts for c in entry if c})
                    # Drop the bot's unpushed commits: they are derived state, and keeping
                    # them would make every later pass fail the same way. The next pass
                    # redoes its work from the remote's state.
                    self._repo.references.create(f"refs/heads/{branch}", remote, force=True)
                    raise GitFailed(
                        f"replay {branch}: commit {str(commit.id)[:10]} conflicts with the "
                        f"remote in {', '.join(paths)}; the bot's unpushed commits on "
                        f"{branch} were dropped"
                    )
                tree = index.write_tree(self._repo)
                oid = self._repo.create_commit(
                    None, commit.author, self._signature(), commit.message, tree, [onto.id]
                )
                onto = self._repo[oid].peel(pygit2.Commit)
            self._repo.references.create(f"refs/heads/{branch}", onto.id, force=True)
        log.info("replayed %d commit(s) of %s onto %s", len(mine), branch, str(remote)[:10])

    def is_ancestor(self, ancestor: str, descendant: str) -> bool:
        a = self._commit(ancestor).id
        d = self._commit(descendant).id
        with self._mapped("ancestry"):
            return a == d or bool(self._repo.descendant_of(d, a))

    def diff_paths(self, a: str, b: str) -> list[str]:
        # Two commits never change: every cluster's intake and the waves gate ask about the
        # same commits of the watched branch, so each pair is diffed once.
        key = (a, b)
        if not (_FULL_SHA.fullmatch(a) and _FULL_SHA.fullmatch(b)):  # a ref name moves
            return self._diff_paths(a, b)
        known = self._diffs.get(key)
        if known is not None:
            return list(known)
        paths = self._diff_paths(a, b)
        with self._diffs_lock:
            if len(self._diffs) >= DIFF_CACHE:
                self._diffs.pop(next(iter(self._diffs)))
            self._diffs[key] = tuple(paths)
        return paths

    def _diff_paths(self, a: str, b: str) -> list[str]:
        ta = self._commit(a).tree
        tb = self._commit(b).tree
        with self._mapped("diff"):
            diff = ta.diff_to_tree(tb)
            paths: set[str] = set()
            for delta in diff.deltas:
                paths.add(delta.old_file.path)
                paths.add(delta.new_file.path)
        return sorted(paths)

    def revert_commit(self, branch: str, sha: str, message: str) -> str:
        target = self._commit(sha)
        head_sha = self.head(branch)
        if head_sha is None:
            raise GitFailed(f"revert on {branch}: no such branch")
        ours = self._commit(head_sha)
        if f"This reverts commit {target.id}" not in message:
            # Keep git's own marker so commit classification recognises the revert.
            message = f"{message.rstrip()}\n\nThis reverts commit {target.id}.\n"
        with self._mapped(f"revert {str(target.id)[:10]} on {branch}"):
            mainline = 1 if len(target.parents) > 1 else 0
            index = self._repo.revert_commit(target, ours, mainline)
            if index.conflicts is not None:
                paths = sorted({c.path for entry in index.conflicts for c in entry if c})
                raise GitFailed(
                    f"revert of {str(target.id)[:10]} on {branch} conflicts in {', '.join(paths)}"
                )
            tree = index.write_tree(self._repo)
            sig = self._signature()
            oid = self._repo.create_commit(None, sig, sig, message, tree, [ours.id])
            self._repo.references.create(f"refs/heads/{branch}", oid, force=True)
        return str(oid)


def _clean_path(path: str) -> str:
    parts = [p for p in path.split("/") if p not in ("", ".")]
    if not parts or ".." in parts:
        raise GitFailed(f"invalid path in commit: {path!r}")
    return "/".join(parts)
