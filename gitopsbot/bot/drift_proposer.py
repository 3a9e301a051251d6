"""One pull request per drifted cluster (docs/drift.md): opened on the first drift, updated
while the drift changes, closed when it is gone. ``core.drift.proposal`` writes the text and
the edits; this module reads the cluster's files at the watched branch, commits them on
``gitopsbot-drift/<cluster>`` and talks to the forge.

Each change of the drift adds one commit on the branch that sets the cluster's files as the
drift of now wants them (not a history of edits); a request is found again by its branch and
marker after a restart, never doubled.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Literal

from gitopsbot.core.drift import proposal as drift_proposal
from gitopsbot.core.drift.report import DriftReport
from gitopsbot.core.fleet.commit_classes import CLUSTERS_DIR, DESIRED_FILES
from gitopsbot.core.fleet.model import DriftSettings
from gitopsbot.core.forge.forge_types import PullRequestDraft, PullRequestInfo
from gitopsbot.ports.forge import Forge
from gitopsbot.ports.repo import Repo

log = logging.getLogger(__name__)

Action = Literal["opened", "updated", "unchanged", "closed", "none"]


@dataclass(frozen=True, slots=True)
class DriftRequest:
    cluster: str
    action: Action
    number: int = 0
    url: str = ""

    def line(self) -> str:
        if self.action == "none":
            return f"{self.cluster}: no drift request"
        return f"{self.cluster}: drift request #{self.number} {self.action} {self.url}".rstrip()


class DriftProposer:
    def __init__(
        self, repo: Repo, forge: Forge, *, watched_branch: str, settings: DriftSettings
    ) -> None:
        self.repo = repo
        self.forge = forge
        self.watched = watched_branch
        self.settings = settings

    def reconcile(self, report: DriftReport) -> DriftRequest:
        """Open, update or close ``report.cluster``'s request as its drift says."""
        cluster = report.cluster
        branch, marker = drift_proposal.branch(cluster), drift_proposal.marker(cluster)
        found = self.forge.find_pull_request(branch, marker)
        if not report.drifted:
            if found is None:
                return DriftRequest(cluster, "none")
            self.forge.close_pull_request(
                found.number,
                "The drift is gone: the cluster matches Git again. Closed by gitopsbot.",
            )
            return DriftRequest(cluster, "closed", found.number, found.url)
        if found is not None and report.digest() in found.body:
            return DriftRequest(cluster, "unchanged", found.number, found.url)
        head = self.repo.head(self.watched)
        if head is None:
            raise ValueError(f"the watched branch {self.watched!r} has no head")
        base = f"{CLUSTERS_DIR}/{cluster}"
        files = {
            name: (self.repo.read(head, f"{base}/{name}") or b"").decode("utf-8")
            for name in DESIRED_FILES
        }
        reapply = self.settings.on_drift == "propose-reapply"
        prop = drift_proposal.proposal(report, files, reapply=reapply)
        # Every cluster file as this drift wants it (the watched head's text where it edits
        # nothing), on top of the branch when it exists (a fast-forward: no replay over an
        # earlier drift's edits), so the branch holds this drift's edits and no earlier one's.
        # Other files stay as the branch's base had them: a merge keeps the watched branch's.
        # A drift with nothing Git holds (switches, CRDs) makes an empty commit: the request
        # still tells it.
        edits: dict[str, bytes | None] = {}
        for name in DESIRED_FILES:
            text = prop.edits.get(name)
            if text is None:
                old = self.repo.read(head, f"{base}/{name}")
                edits[f"{base}/{name}"] = old  # None: absent at the head, absent here
            else:
                edits[f"{base}/{name}"] = text.encode()
        parent = self.repo.head(branch) or head
        self.repo.commit_files(branch, edits, prop.message, parent=parent)
        self.repo.push(branch)
        pr = self.forge.open_or_update_pull_request(
            PullRequestDraft(
                branch=branch,
                base=self.watched,
                title=prop.title,
                body=prop.body,
                marker=marker,
                labels=self.settings.labels,
            )
        )
        return DriftRequest(cluster, "opened" if found is None else "updated", pr.number, pr.url)


def open_request(forge: Forge, cluster: str) -> PullRequestInfo | None:
    """The cluster's open drift request, if any."""
    return forge.find_pull_request(drift_proposal.branch(cluster), drift_proposal.marker(cluster))
