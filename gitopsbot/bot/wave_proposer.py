"""One proposal per wave (``proposals.groupBy: wave``), carried out (issue 14).

The decision is ``core.proposing.proposals``; the per-cluster pass (``bot.proposer``) calls
``inputs`` before deciding and ``carry_out`` after its own requests. A wave's request is the
per-cluster one with several clusters: one branch ``gitopsbot/upgrade/<wave>/<version>``
(first commit's parent: the watched head; later ones on top of the branch, keeping what
people pushed), one commit bumping every member missing the bump, the plan of each member in
the body, ``gitopsbot/policy`` the worst of their decisions. Found again after a crash by
branch and marker (never opened twice); a member that left the wave has its files put back as
the watched branch has them (its upgrade must not ride on another wave's request).

Git-only mode keeps proposals per cluster (its request files are per cluster: docs/git.md).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Protocol

from gitopsbot.bot import waves
from gitopsbot.bot.overlay_tree import OverlayTree
from gitopsbot.bot.proposal_report import PassReport, Proposal
from gitopsbot.core.charts.chart import ChartIndex
from gitopsbot.core.charts.images import effective_images
from gitopsbot.core.fleet import located_yaml
from gitopsbot.core.fleet.commit_classes import CLUSTERS_DIR
from gitopsbot.core.fleet.layout import RELEASE_FILE
from gitopsbot.core.fleet.model import ClusterSpec, Fleet, Location
from gitopsbot.core.forge.forge_types import PullRequestInfo, PullRequestState, with_marker
from gitopsbot.core.planning.plan import Plan
from gitopsbot.core.planning.render import render_markdown
from gitopsbot.core.policy import Decision, Rule
from gitopsbot.core.proposing import proposals as core
from gitopsbot.core.proposing import request_texts as texts
from gitopsbot.core.proposing.proposals import ClusterInput, ProposalRecord, ProposalState
from gitopsbot.core.waves import promotion
from gitopsbot.errors import GitOpsBotError
from gitopsbot.fleetrepo import load_cluster
from gitopsbot.ports.charts import ChartSource
from gitopsbot.ports.forge import Forge, RecordsRequestsInGit
from gitopsbot.ports.repo import Repo


class Proposer(Protocol):
    """What a wave's proposal needs of the per-cluster pass (``bot.proposer.Proposer``): its
    ports and its plan, so the two modules do not import each other."""

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


log = logging.getLogger(__name__)
VALUES_FILE = "values.yaml"
_WORST = (Decision.DENIED, Decision.NEEDS_ACK, Decision.ALLOWED)


def grouped(proposer: Proposer, fleet: Fleet) -> bool:
    """Whether this pass proposes per wave (Git-only mode keeps per-cluster requests)."""
    return fleet.settings.proposals.group_by == "wave" and not isinstance(
        proposer.forge, RecordsRequestsInGit
    )


def inputs(
    fleet: Fleet, cluster_inputs: Sequence[ClusterInput], *, by_wave: bool
) -> tuple[core.WaveInput, ...]:
    """The waves (in ``waves:`` order) with their members' inputs; () unless ``by_wave``."""
    if not by_wave:
        return ()
    by_name = {i.cluster: i for i in cluster_inputs}
    out = []
    for group in promotion.fleet_by_wave(fleet.settings.waves, fleet.clusters.values()):
        if group.wave is None or not group.clusters:
            continue
        out.append(core.WaveInput(group.wave.name, tuple(by_name[c] for c in group.clusters)))
    return tuple(out)


def carry_out(
    proposer: Proposer,
    decisions: Sequence[core.WaveDecision],
    records: tuple[ProposalRecord, ...],
    *,
    head: str,
    fleet: Fleet,
    indexes: Mapping[str, ChartIndex],
    rules: tuple[Rule, ...],
    infos: Mapping[int, PullRequestInfo],
    report: PassReport,
) -> tuple[ProposalRecord, ...]:
    """Open, refresh and close the waves' requests; the ledger's records as they end up."""
    opened_for: dict[str, Proposal] = {}
    for d in decisions:
        report.notes += [f"wave {d.wave}: {n}" for n in d.notes]
        if d.target is None or not d.clusters:
            continue
        version = d.target.version
        first = fleet.clusters[d.clusters[0]]
        hold, evidence = waves.for_proposal(proposer.repo, fleet, first, version)
        if hold and d.existing is None:
            report.notes.append(f"wave {d.wave}: {version} not proposed yet: {hold}")
            continue
        try:
            proposal = _propose(
                proposer,
                d,
                head=head,
                fleet=fleet,
                indexes=indexes,
                rules=rules,
                known=infos.get(d.existing.number) if d.existing else None,
                evidence=evidence,
            )
        except GitOpsBotError as exc:
            report.problems.append(f"wave {d.wave}: {version}: {exc}")
            log.warning("proposal for wave %s %s failed: %s", d.wave, version, exc)
            continue
        report.proposals.append(proposal)
        opened_for[d.wave] = proposal
        records = core.upsert_record(
            records,
            ProposalRecord("", version, proposal.number, head=proposal.head, wave=d.wave),
        )
    for d in decisions:
        for closing in d.close:
            text = f"gitopsbot closes this proposal: {closing.reason}."
            if closing.superseded_by:
                new = opened_for.get(d.wave)
                if new is None:
                    continue  # the replacement failed or waits: keep the old one for now
                text += f" Superseded by #{new.number} ({new.url})."
            try:
                proposer.forge.close_pull_request(closing.record.number, text)
            except GitOpsBotError as exc:
                report.problems.append(f"close #{closing.record.number}: {exc}")
                continue
            report.closed.append((closing.record.number, closing.reason))
            records = core.upsert_record(
                records, replace(closing.record, state=ProposalState.SUPERSEDED)
            )
    return records


def _version_in(text: bytes | None) -> str:
    try:
        doc = located_yaml.load((text or b"").decode("utf-8"), RELEASE_FILE)
        return str(doc["chart"]["version"])
    except (GitOpsBotError, KeyError, TypeError, UnicodeDecodeError):
        return ""


def _propose(
    proposer: Proposer,
    d: core.WaveDecision,
    *,
    head: str,
    fleet: Fleet,
    indexes: Mapping[str, ChartIndex],
    rules: tuple[Rule, ...],
    known: PullRequestInfo | None,
    evidence: str,
) -> Proposal:
    assert d.target is not None
    repo, forge = proposer.repo, proposer.forge
    version = d.target.version
    branch = core.wave_branch(d.wave, version)
    marker = texts.wave_marker(d.wave, version)
    branch_head = repo.head(branch)
    base = head if branch_head is None else branch_head

    def paths(cluster: str) -> tuple[str, str]:
        return (
            f"{CLUSTERS_DIR}/{cluster}/{RELEASE_FILE}",
            f"{CLUSTERS_DIR}/{cluster}/{VALUES_FILE}",
        )

    head_tree = repo.tree(head)
    old: dict[str, bytes | None] = {}
    edits: dict[str, bytes | None] = {}
    images: dict[str, str] = {}
    for cluster in d.clusters:
        rel = fleet.clusters[cluster].release
        chart = proposer.charts.chart(rel.chart_repo_url, rel.chart_name, version)
        image = effective_images({}, chart).get("hypervisor", "")
        release_path, values_path = paths(cluster)
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
        new_release, new_values = texts.proposal_edits(
            release_text=(start[release_path] or b"").decode("utf-8"),
            values_text=(start[values_path] or b"").decode("utf-8"),
            version=version,
            hypervisor_image=image,
        )
        edits[release_path], edits[values_path] = new_release.encode(), new_values.encode()
        watched_values = repo.read(head, values_path) or b""
        images[cluster] = image if edits[values_path] != watched_values else ""
    if branch_head is not None:
        # A cluster that left the wave since the request was opened: its bump goes (the
        # watched branch's files back), so merging upgrades only the wave's clusters.
        for cluster in sorted(set(fleet.clusters) - set(d.clusters)):
            release_path, values_path = paths(cluster)
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
    decision = next(x for x in _WORST if x in decisions)
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
    title = texts.wave_title(d.wave, chart_name, version)
    labels = fleet.settings.proposals.labels
    pr = known
    if pr is None or pr.state is not PullRequestState.OPEN:
        # Not in the ledger: a request opened before a crash is found again, not doubled.
        pr = forge.find_pull_request(branch, marker)
    opened = pr is None
    current = (
        pr is not None
        and pr.title == title
        and pr.body.strip() == with_marker(body, marker).strip()
        and all(label in pr.labels for label in labels)
    )
    pushed = False
    if needs_commit:
        message = texts.wave_commit_message(d.wave, chart_name, version, d.current, images)
        repo.commit_files(branch, dict(edits), message, parent=base)
        branch_head = repo.push(branch)
        pushed = True
    assert branch_head is not None
    if not current or pushed:
        pr = forge.open_or_update_pull_request(
            branch=branch,
            base=proposer.watched_branch,
            title=title,
            body=body,
            marker=marker,
            labels=labels,
        )
    status_head = d.existing.head if d.existing else ""
    if not current or pushed or status_head != branch_head:
        state, description = texts.policy_status(decision)
        forge.set_status(branch_head, state=state, description=description)
    assert pr is not None
    return Proposal(
        cluster=f"wave {d.wave}",
        version=version,
        branch=branch,
        number=pr.number,
        url=pr.url,
        decision=str(decision),
        head=branch_head,
        opened=opened,
        updated=(not opened) and (not current or pushed),
    )
