"""A proposal's branch and pull request brought to what this pass wants, for a cluster's
request and a wave's alike: each cluster's chart bump (``bumped``), the edits committed on the
branch when they are missing from it, the request opened or updated when its title, body or
labels differ, ``gitopsbot/policy`` set on each new head once.

The proposer (``bot.proposer``, ``bot.wave_request`` for a wave's edits and body) says what
the request should be (``Draft``); this module talks to Git and the forge. A request opened
before a crash is found again by its branch and marker, never doubled. In Git-only mode the
request and its status travel in the same commit as the edits: one pass writes at most one
commit on the branch.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from gitopsbot.bot.proposal_report import Proposal
from gitopsbot.core.charts.images import effective_images
from gitopsbot.core.fleet.commit_classes import CLUSTERS_DIR, ProposalId
from gitopsbot.core.fleet.layout import RELEASE_FILE, VALUES_FILE
from gitopsbot.core.fleet.model import ReleaseSpec
from gitopsbot.core.forge.forge_types import (
    PullRequestDraft,
    PullRequestInfo,
    PullRequestState,
)
from gitopsbot.core.policy import Decision
from gitopsbot.core.proposing.proposals import ProposalDecision
from gitopsbot.core.proposing.request_texts import policy_status, proposal_edits
from gitopsbot.ports.charts import ChartSource
from gitopsbot.ports.forge import Forge, RecordsRequestsInGit
from gitopsbot.ports.repo import Repo


def edited_files(cluster: str) -> tuple[str, str]:
    """The files a proposal edits in ``cluster``'s directory: release.yaml, values.yaml."""
    return f"{CLUSTERS_DIR}/{cluster}/{RELEASE_FILE}", f"{CLUSTERS_DIR}/{cluster}/{VALUES_FILE}"


def bumped(
    charts: ChartSource,
    release: ReleaseSpec,
    version: str,
    *,
    release_text: bytes | None,
    values_text: bytes | None,
    watched_values: bytes | None,
) -> tuple[bytes, bytes, str]:
    """release.yaml and values.yaml (from these texts, None: no file) bumped to chart
    ``version`` with the target chart's hypervisor image set explicitly (R4), and that image,
    or "" when values.yaml ends as the watched branch has it (``watched_values``): the body
    and the commit message name only real edits (the pin may already equal the target's
    default image)."""
    chart = charts.chart(release.chart_repo_url, release.chart_name, version)
    image = effective_images({}, chart).get("hypervisor", "")
    new_release, new_values = proposal_edits(
        release_text=(release_text or b"").decode("utf-8"),
        values_text=(values_text or b"").decode("utf-8"),
        version=version,
        hypervisor_image=image,
    )
    values = new_values.encode()
    return new_release.encode(), values, image if values != (watched_values or b"") else ""


@dataclass(frozen=True, slots=True)
class Draft:
    """The request a decision's target wants, and the branch as the pass found it."""

    branch: str
    marker: str
    title: str
    body: str
    message: str  # the commit message of ``edits``
    edits: Mapping[str, bytes | None]  # path → content (None: no such file)
    base: str  # the commit a new commit goes on: the branch's head, else the watched head
    branch_head: str | None  # None: no branch yet
    needs_commit: bool  # the edits are missing from the branch (or there is no branch)
    decision: Decision  # the plan's (a wave's: the worst of its clusters')


def publish(
    repo: Repo,
    forge: Forge,
    d: ProposalDecision,
    draft: Draft,
    *,
    watched_branch: str,
    labels: Sequence[str],
    known: PullRequestInfo | None,
) -> Proposal:
    """Bring ``draft`` about for decision ``d`` (module doc); ``known``: the request as the
    pass read it for the ledger's record, if any."""
    assert d.target is not None
    request = PullRequestDraft(
        branch=draft.branch,
        base=watched_branch,
        title=draft.title,
        body=draft.body,
        marker=draft.marker,
        labels=tuple(labels),
    )
    branch, title = request.branch, request.title
    pr = known
    if pr is None or pr.state is not PullRequestState.OPEN:
        # Not in the ledger: a request opened before a crash is found again, not doubled.
        pr = forge.find_pull_request(branch, request.marker)
    opened = pr is None
    current = (
        pr is not None
        and pr.title == title
        and pr.body.strip() == request.marked_body.strip()
        and all(label in pr.labels for label in labels)
    )
    status = policy_status(draft.decision)
    in_git = isinstance(forge, RecordsRequestsInGit)
    branch_head = draft.branch_head
    pushed = False
    if draft.needs_commit or (in_git and pr is not None and not current):
        files: dict[str, bytes | None] = dict(draft.edits) if draft.needs_commit else {}
        if isinstance(forge, RecordsRequestsInGit):
            # The calls below then find the request and status recorded and write nothing.
            files.update(forge.request_files(request, status=status))
        trailers = "\n".join(ProposalId(c, d.target.version).trailer for c in d.clusters)
        message = (
            draft.message if draft.needs_commit else f"{title}\n\nPlan updated.\n\n{trailers}\n"
        )
        repo.commit_files(branch, files, message, parent=draft.base)
        branch_head = repo.push(branch)
        pushed = True
    assert branch_head is not None
    if not current or pushed:
        pr = forge.open_or_update_pull_request(request)
    # The status goes on every new head (also one a person pushed), once: the ledger
    # remembers the head it was last set on.
    status_head = d.existing.head if d.existing else ""
    if not current or pushed or status_head != branch_head:
        forge.set_status(branch_head, status)
    assert pr is not None
    return Proposal(
        cluster=d.who,
        version=d.target.version,
        branch=branch,
        number=pr.number,
        url=pr.url,
        decision=str(draft.decision),
        # Git-only mode records requests and statuses as commits: the final head.
        head=repo.head(branch) or branch_head,
        opened=opened,
        updated=(not opened) and (not current or pushed),
    )
