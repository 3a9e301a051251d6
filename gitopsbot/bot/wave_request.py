"""A wave's request (``proposals.groupBy: wave``, issue 14): what the proposer
(``bot.proposer``) publishes for a wave's decision (``core.proposing.proposals``).

A wave's request is the per-cluster one with several clusters: one branch
``gitopsbot/upgrade/<wave>/<version>`` (first commit's parent: the watched head; later ones on
top of the branch, keeping what people pushed), one commit bumping every member missing the
bump, the plan of each member in the body, ``gitopsbot/policy`` the worst of their decisions.
A member that left the wave has its files put back as the watched branch has them (its upgrade
must not ride on another wave's request).

Git-only mode keeps proposals per cluster (its request files are per cluster: docs/git.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from gitopsbot.bot.overlay_tree import OverlayTree
from gitopsbot.bot.proposal_request import Draft, bumped, edited_files
from gitopsbot.core.charts.chart import ChartIndex
from gitopsbot.core.fleet import located_yaml
from gitopsbot.core.fleet.commit_classes import CLUSTERS_DIR
from gitopsbot.core.fleet.layout import RELEASE_FILE
from gitopsbot.core.fleet.model import ClusterSpec, Fleet, Location
from gitopsbot.core.planning.plan import Plan
from gitopsbot.core.planning.render import render_markdown
from gitopsbot.core.policy import Decision, Rule
from gitopsbot.core.proposing import proposals as core
from gitopsbot.core.proposing import request_texts as texts
from gitopsbot.core.proposing.proposals import ProposalDecision
from gitopsbot.errors import GitOpsBotError
from gitopsbot.fleetrepo import load_cluster
from gitopsbot.ports.charts import ChartSource
from gitopsbot.ports.forge import Forge, RecordsRequestsInGit
from gitopsbot.ports.repo import Repo


class Proposer(Protocol):
    """What a wave's request needs of the proposer (``bot.proposer.Proposer``): its ports and
    its plan, so the two modules do not import each other."""

    repo: Repo
    forge: Forge
    charts: ChartSource
    watched_branch: str

    def plan_for(
        self,
        spec: ClusterSpec,
        desired: ClusterSpec,
        *,
        index: ChartIndex | None,
        rules: tuple[Rule, ...],
        secret_literals: Mapping[str, Location] | None = None,
        fleet: Fleet | None = None,
    ) -> Plan: ...


_WORST = (Decision.DENIED, Decision.NEEDS_ACK, Decision.ALLOWED)


def grouped(proposer: Proposer, fleet: Fleet) -> bool:
    """Whether this pass proposes per wave (Git-only mode keeps per-cluster requests)."""
    return fleet.settings.proposals.group_by == "wave" and not isinstance(
        proposer.forge, RecordsRequestsInGit
    )


def _version_in(text: bytes | None) -> str:
    try:
        doc = located_yaml.load((text or b"").decode("utf-8"), RELEASE_FILE)
        return str(doc["chart"]["version"])
    except (GitOpsBotError, KeyError, TypeError, UnicodeDecodeError):
        return ""


def draft(
    proposer: Proposer,
    d: ProposalDecision,
    *,
    head: str,
    fleet: Fleet,
    indexes: Mapping[str, ChartIndex],
    rules: tuple[Rule, ...],
    evidence: str,
) -> Draft:
    """Wave ``d``'s request (module doc): its members' edits on the branch, their plans in
    the body, the worst of their decisions."""
    assert d.target is not None
    repo = proposer.repo
    version = d.target.version
    branch = core.wave_branch(d.wave, version)
    branch_head = repo.head(branch)
    base = head if branch_head is None else branch_head

    head_tree = repo.tree(head)
    old: dict[str, bytes | None] = {}
    edits: dict[str, bytes | None] = {}
    images: dict[str, str] = {}
    for cluster in d.clusters:
        release_path, values_path = edited_files(cluster)
        for p in (release_path, values_path):
            old[p] = repo.read(base, p)
        if old[release_path] is None:
            # A cluster that joined the wave after the branch was cut: its directory as the
            # watched branch has it (the same files on both sides merge cleanly), bumped.
            directory = f"{CLUSTERS_DIR}/{cluster}"
            for name in head_tree.list(directory):
                path = f"{directory}/{name}"
                if path not in (release_path, values_path) and repo.read(base, path) is None:
                    old[path], edits[path] = None, head_tree.read(path)
            start = {p: repo.read(head, p) for p in (release_path, values_path)}
        else:
            start = {p: old[p] for p in (release_path, values_path)}
        edits[release_path], edits[values_path], images[cluster] = bumped(
            proposer.charts,
            fleet.clusters[cluster].release,
            version,
            release_text=start[release_path],
            values_text=start[values_path],
            watched_values=repo.read(head, values_path),
        )
    if branch_head is not None:
        # A cluster that left the wave since the request was opened: its bump goes (the
        # watched branch's files back), so merging upgrades only the wave's clusters.
        for cluster in sorted(set(fleet.clusters) - set(d.clusters)):
            release_path, values_path = edited_files(cluster)
            on_branch = repo.read(base, release_path)
            on_head = repo.read(head, release_path)
            if on_branch != on_head and _version_in(on_branch) == version:
                for p in (release_path, values_path):
                    old[p] = repo.read(base, p)
                    edits[p] = repo.read(head, p)
    needs_commit = branch_head is None or any(edits[p] != old[p] for p in edits)

    changed = {p: t for p, t in edits.items() if t is not None}
    tree = repo.tree(base)
    desired_tree = OverlayTree(tree, changed) if needs_commit else tree
    plans: list[tuple[str, str]] = []
    decisions: list[Decision] = []
    for cluster in d.clusters:
        spec = fleet.clusters[cluster]
        desired = load_cluster(desired_tree, cluster)
        plan = proposer.plan_for(
            spec, desired, index=indexes[spec.release.chart_repo_url], rules=rules, fleet=fleet
        )
        plans.append((cluster, render_markdown(plan)))
        decisions.append(plan.decision)
    chart_name = fleet.clusters[d.clusters[0]].release.chart_name
    index = indexes[fleet.clusters[d.clusters[0]].release.chart_repo_url]
    body = texts.wave_body(
        d,
        chart=chart_name,
        versions=index.versions(chart_name),
        images=images,
        plans=plans,
        evidence=evidence,
    )
    return Draft(
        branch=branch,
        marker=texts.wave_marker(d.wave, version),
        title=texts.wave_title(d.wave, chart_name, version),
        body=body,
        message=texts.wave_commit_message(d.wave, chart_name, version, d.current, images),
        edits=edits,
        base=base,
        branch_head=branch_head,
        needs_commit=needs_commit,
        decision=next(x for x in _WORST if x in decisions),
    )
