"""The GPU canary's marks on the state branch (issue 18, ``core.waves.canary_marks``):
``read_canary_marks`` reads ``canary-failures/*.yaml``, ``record_canary_failure`` writes one
there (no request: the bot's own record takes effect at once; a person clears it in Git)."""

from __future__ import annotations

from gitopsbot.bot.journal_store import JournalStore
from gitopsbot.core.fleet.model import ClearedVersion
from gitopsbot.core.waves import canary_marks
from gitopsbot.core.waves.canary_marks import CanaryFailure
from gitopsbot.ports.repo import Repo


def read_canary_marks(
    repo: Repo, state_branch: str
) -> tuple[tuple[CanaryFailure, ...], tuple[str, ...]]:
    """The GPU canary failure records on the state branch, and one problem per unreadable
    record (the caller fails closed on any: it cannot tell which version one holds)."""
    head = repo.head(state_branch)
    if head is None:
        return (), ()
    tree = repo.tree(head)
    files: dict[str, str] = {}
    for name in tree.list(canary_marks.RECORD_DIR):
        path = f"{canary_marks.RECORD_DIR}/{name}"
        data = tree.read(path)
        if data is not None:
            files[path] = data.decode("utf-8", "replace")
    return canary_marks.read_all(files)


def record_canary_failure(
    store: JournalStore,
    repo: Repo,
    failure: CanaryFailure,
    cleared: tuple[ClearedVersion, ...],
) -> bool:
    """Write ``failure``'s record on the state branch unless a standing record of the same
    version holds it already (idempotent: a restarted step writes nothing twice). True when
    a commit was made."""
    head = repo.head(store.branch)
    data = repo.read(head, failure.path) if head is not None else None
    existing = None
    if data is not None:
        try:
            existing = canary_marks.loads(data.decode("utf-8", "replace"), failure.path)
        except ValueError:
            existing = None  # unreadable: replaced by a readable record of the same version
    new = canary_marks.to_record(existing, failure, cleared)
    if new is None:
        return False
    store.commit(
        {new.path: canary_marks.dumps(new).encode()},
        f"GPU canary failed: chart {new.version} held on every cluster ({new.cluster} "
        f"pool {new.pool}, {new.op_id})",
    )
    return True
