"""Propose the ``failedVersions:`` entry after a rollback in a wave (``core.waves.failed_marks``).

Run by the proposal pass (``Proposer.run_once``): the rollbacks recorded on the state branch
(``bot.waves.journals``) are turned into proposals; each gets a branch
(``gitopsbot/failed-version/<version>``) holding one commit on the watched branch's head that
edits ``gitopsbot.yaml``, and a pull request whose body lists the operation records.

Proposed once: a version whose branch exists already is left alone (its request is open, or a
person closed it, which declines it; deleting the branch has it proposed again). A pass
stopped between the push and the request leaves the branch without a request: delete the
branch to have it proposed again. Git-only mode (requests as files) is not supported yet.

The GPU canary's marks on the state branch are ``bot.canary_marks_store``'s.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from gitopsbot.bot import waves
from gitopsbot.bot.journal_store import JournalStore
from gitopsbot.core.fleet.model import Fleet
from gitopsbot.core.forge.forge_types import PullRequestDraft
from gitopsbot.core.records.journal import Journal, OperationKind, OperationStatus
from gitopsbot.core.waves import failed_marks
from gitopsbot.errors import GitOpsBotError
from gitopsbot.ports.forge import Forge, RecordsRequestsInGit
from gitopsbot.ports.repo import Repo

log = logging.getLogger(__name__)


def rollbacks(
    store: JournalStore, clusters: list[str], version_of: Callable[[Journal], str]
) -> list[failed_marks.RolledBack]:
    out: list[failed_marks.RolledBack] = []
    for cluster in clusters:
        ops = {j.op_id: j for j in waves.journals(store, cluster)}
        for j in ops.values():
            if j.kind is not OperationKind.ROLLBACK or j.status in (
                OperationStatus.BLOCKED,
                OperationStatus.SUPERSEDED,
            ):
                continue
            undone = ops.get(j.reverts_op)
            version = version_of(undone) if undone is not None else ""
            if not version and j.rollback_point is not None:
                version = j.rollback_point.chart_version
            out.append(
                failed_marks.RolledBack(cluster, version, j.op_id, j.reverts_op, j.created_at)
            )
    return out


def propose(*, repo: Repo, forge: Forge, fleet: Fleet, head: str, watched_branch: str) -> list[str]:
    """Open the requests that are due; one line per request opened (or problem)."""
    settings = fleet.settings
    if not settings.waves or isinstance(forge, RecordsRequestsInGit):
        return []
    store = JournalStore(repo, branch=settings.state_branch, push=False)
    try:
        found = rollbacks(store, sorted(fleet.clusters), waves.version_reader(repo))
    except (ValueError, GitOpsBotError) as e:
        return [f"failed versions: the state branch cannot be read: {e}"]
    lines: list[str] = []
    for proposal in failed_marks.proposals(settings, fleet.clusters, found):
        if repo.head(proposal.branch) is not None:
            continue  # proposed once already (module docstring)
        text = (repo.read(head, failed_marks.SETTINGS_FILE) or b"").decode("utf-8")
        try:
            edited = failed_marks.add_entry(text, proposal)
        except ValueError as e:
            lines.append(f"failed version {proposal.version}: {e}")
            continue
        message = (
            f"{proposal.title}\n\n{proposal.reason}\n\n"
            f"Gitopsbot-Failed-Version: {proposal.version}\n"
        )
        try:
            repo.commit_files(
                proposal.branch,
                {failed_marks.SETTINGS_FILE: edited.encode()},
                message,
                parent=head,
            )
            repo.push(proposal.branch)
            pr = forge.open_or_update_pull_request(
                PullRequestDraft(
                    branch=proposal.branch,
                    base=watched_branch,
                    title=proposal.title,
                    body=failed_marks.body(proposal, settings.state_branch),
                    marker=proposal.marker,
                    labels=settings.proposals.labels,
                )
            )
        except GitOpsBotError as e:
            lines.append(f"failed version {proposal.version}: {e}")
            log.warning("failed-version proposal %s: %s", proposal.version, e)
            continue
        lines.append(
            f"failed version {proposal.version} from wave {proposal.wave}: #{pr.number} {pr.url}"
        )
    return lines
