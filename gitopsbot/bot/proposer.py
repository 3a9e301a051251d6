"""One upstream-proposal pass: read the fleet, ask each chart repository, open/refresh/close
proposals, one request per cluster or, with ``proposals.groupBy: wave``, per wave. Ports are
injected (Repo, Forge, ChartSource); every decision is ``gitopsbot.core.proposing.proposals``'s.

A pass: fetch; read the fleet at the watched branch's head; read the proposal ledger from the
state branch (``proposals.json``) and refresh the state of each open proposal from the forge
(one read each); fetch each distinct chart repository index once; decide; then for each
target plan the branch as it will be and publish it (``bot.proposal_request``): commit the
edits on ``gitopsbot/<cluster>/<version>`` (a wave's: ``bot.wave_request``; first commit's
parent: the watched head; later ones fast-forward the branch), push, open or update the
request with the plan as body and the settings' labels, set ``gitopsbot/policy`` (in Git-only
mode the request and status are files committed with the edits: at most one commit per branch
a pass); close superseded requests with a comment; write the ledger back when it changed. A
pass with nothing new makes no write to the forge or to Git (it only reads).

Waves (issue 14): a later wave's new proposal waits for the earlier waves (``bot.waves``), and
the pass proposes ``failedVersions`` entries after rollbacks (``bot.failed_marks``). The plan
of a request and the plan comment (``comment``) live here too: they are the same plan.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import replace

from gitopsbot.baseline import load_fleet_baseline
from gitopsbot.bot import chart_reads, failed_marks, rehearsal_store, wave_request, waves
from gitopsbot.bot.journal_store import JournalStore
from gitopsbot.bot.overlay_tree import OverlayTree
from gitopsbot.bot.proposal_report import PassReport, Proposal, plan_marker
from gitopsbot.bot.proposal_request import Draft, bumped, edited_files, publish
from gitopsbot.bot.reviewed_chart import ReviewedCharts, render_files
from gitopsbot.core import rehearsal as rehearsal_core
from gitopsbot.core.charts.chart import ChartIndex
from gitopsbot.core.charts.observed import DeployedState
from gitopsbot.core.fleet.commit_classes import CLUSTERS_DIR, ProposalId
from gitopsbot.core.fleet.fields import suggest
from gitopsbot.core.fleet.model import ClusterSpec, Fleet, Location
from gitopsbot.core.forge.forge_types import PullRequestInfo, PullRequestState
from gitopsbot.core.planning import provenance, reviewed_chart
from gitopsbot.core.planning.plan import Plan, make_plan
from gitopsbot.core.planning.render import render_markdown
from gitopsbot.core.policy import Rule, load_rules
from gitopsbot.core.proposing import proposals as core
from gitopsbot.core.proposing import request_texts as texts
from gitopsbot.core.proposing.proposals import (
    ClusterInput,
    ProposalDecision,
    ProposalRecord,
    ProposalState,
)
from gitopsbot.core.waves.promotion_gate import with_verdicts
from gitopsbot.errors import (
    FleetError,
    ForgeNotFound,
    GitFailed,
    GitOpsBotError,
    Problem,
)
from gitopsbot.fleetrepo import load_cluster, load_fleet
from gitopsbot.ports.charts import ChartArchives, ChartSource, ManifestRenderer
from gitopsbot.ports.files import FileTree
from gitopsbot.ports.forge import Forge
from gitopsbot.ports.repo import Repo

log = logging.getLogger(__name__)

Rules = tuple[Rule, ...]


class Proposer:
    """Runs proposal passes against one fleet repository and its forge."""

    def __init__(
        self,
        repo: Repo,
        forge: Forge,
        charts: ChartSource,
        *,
        watched_branch: str = "main",
        policy_documents: Sequence[tuple[str, str]] = (),
        renderer: ManifestRenderer | None = None,
    ) -> None:
        self.repo = repo
        self.forge = forge
        self.charts = charts
        self.watched_branch = watched_branch
        self._policy_documents = tuple(policy_documents)
        # helm for the rendered manifests' digest (docs/plan.md, "Digests"); None: the plan
        # records the archive's digest only.
        self.renderer = renderer

    # -- reading ---------------------------------------------------------------------------

    def read_fleet(self) -> tuple[str, Fleet]:
        """Fetch, then the fleet at the watched branch's head (following a gitopsbot.yaml that
        names another watched branch)."""
        self.repo.fetch()
        head = self._head(self.watched_branch)
        fleet = load_fleet(self.repo.tree(head))
        configured = fleet.settings.watched_branch
        if configured != self.watched_branch:
            log.info("gitopsbot.yaml watches %s, not %s", configured, self.watched_branch)
            self.watched_branch = configured
            head = self._head(configured)
            fleet = load_fleet(self.repo.tree(head))
        return head, fleet

    def _baseline_fleet(self) -> tuple[Fleet, dict[str, dict[str, Location]]]:
        """The watched branch as a request's baseline: ``read_fleet``, or, when its only
        problems are literal secrets in values.yaml files, the fleet with them masked and the
        literals per cluster: the request that removes them must get a plan (docs/plan.md).
        Any other problem raises the loader's FleetError."""
        try:
            _, fleet = self.read_fleet()
        except FleetError:
            return load_fleet_baseline(self.repo.tree(self._head(self.watched_branch)))
        return fleet, {}

    def _head(self, branch: str) -> str:
        head = self.repo.head(branch)
        if head is None:
            raise GitFailed(f"branch {branch!r} does not exist in the fleet repository")
        return head

    def read_ledger(self, state_branch: str) -> tuple[ProposalRecord, ...]:
        if self.repo.head(state_branch) is None:
            return ()
        raw = self.repo.read(state_branch, core.LEDGER_FILE)
        try:
            return core.parse_ledger(
                raw.decode("utf-8") if raw else None, source=f"{state_branch}:{core.LEDGER_FILE}"
            )
        except (ValueError, UnicodeDecodeError) as exc:
            # Never guess: a lost ledger would reopen declined proposals.
            raise GitFailed(f"{exc}; fix or remove it on the state branch") from None

    def refresh(
        self, records: Sequence[ProposalRecord]
    ) -> tuple[tuple[ProposalRecord, ...], dict[int, PullRequestInfo]]:
        """Records with each open one's state as the forge now reports it."""
        out: list[ProposalRecord] = []
        seen: dict[int, PullRequestInfo] = {}
        for rec in records:
            if rec.state is not ProposalState.OPEN:
                out.append(rec)
                continue
            try:
                info = self.forge.get_pull_request(rec.number)
            except ForgeNotFound:
                out.append(replace(rec, state=ProposalState.CLOSED, head=""))
                continue
            seen[rec.number] = info
            state = {
                PullRequestState.OPEN: ProposalState.OPEN,
                PullRequestState.MERGED: ProposalState.MERGED,
                PullRequestState.CLOSED: ProposalState.CLOSED,
            }[info.state]
            out.append(replace(rec, state=state))
        return tuple(out), seen

    def indexes(
        self, clusters: Sequence[ClusterSpec]
    ) -> tuple[dict[str, ChartIndex], dict[str, str]]:
        """One index fetch per distinct repository URL; failures by URL."""
        found: dict[str, ChartIndex] = {}
        failed: dict[str, str] = {}
        for url in sorted({c.release.chart_repo_url for c in clusters}):
            # An OCI repository lists versions per chart: named when its clusters agree.
            names = {c.release.chart_name for c in clusters if c.release.chart_repo_url == url}
            try:
                found[url] = self.charts.index(url, names.pop() if len(names) == 1 else "")
            except GitOpsBotError as exc:
                failed[url] = f"chart repository index unavailable: {exc}"
        return found, failed

    # -- one pass --------------------------------------------------------------------------

    def run_once(self) -> PassReport:
        report = PassReport()
        head, fleet = self.read_fleet()
        report.head = head
        settings = fleet.settings
        if not settings.proposals.enabled:
            report.enabled = False
            return report
        state_branch = settings.state_branch
        before = self.read_ledger(state_branch)
        records, infos = self.refresh(before)
        clusters = [fleet.clusters[n] for n in sorted(fleet.clusters)]
        indexes, failed = self.indexes(clusters)
        inputs = [
            ClusterInput(
                cluster=c.name,
                current_version=c.release.version,
                scope=settings.proposals.scope,
                versions=indexes[c.release.chart_repo_url].versions(c.release.chart_name)
                if c.release.chart_repo_url in indexes
                else (),
                problem=failed.get(c.release.chart_repo_url, ""),
            )
            for c in clusters
        ]
        # proposals.groupBy: wave: the waves' clusters are proposed per wave
        # (bot.wave_request) and served first; the per-cluster decisions get the rest of maxOpen.
        by_wave = core.wave_inputs(fleet, inputs) if wave_request.grouped(self, fleet) else ()
        decisions, wave_decisions = core.decide(
            inputs, records, max_open=settings.proposals.max_open, waves=by_wave
        )
        report.decisions = decisions
        rules = load_rules([*self._policy_documents, *fleet.policy_documents])
        for batch in (decisions, wave_decisions):
            records = self._carry_out(
                batch,
                records,
                head=head,
                fleet=fleet,
                indexes=indexes,
                rules=rules,
                infos=infos,
                report=report,
            )
        if core.render_ledger(records) != core.render_ledger(before):
            self._write_ledger(state_branch, records)
            report.ledger_written = True
        # After a rollback in a wave: the failedVersions entry, proposed (bot.failed_marks).
        report.notes.extend(
            failed_marks.propose(
                repo=self.repo,
                forge=self.forge,
                fleet=fleet,
                head=head,
                watched_branch=self.watched_branch,
            )
        )
        return report

    def _carry_out(
        self,
        decisions: Sequence[ProposalDecision],
        records: tuple[ProposalRecord, ...],
        *,
        head: str,
        fleet: Fleet,
        indexes: Mapping[str, ChartIndex],
        rules: Rules,
        infos: Mapping[int, PullRequestInfo],
        report: PassReport,
    ) -> tuple[ProposalRecord, ...]:
        """Open or refresh each target's request, then close the superseded and obsolete
        ones; the ledger's records as they end up."""
        opened_for: dict[tuple[str, str], Proposal] = {}
        for d in decisions:
            if d.wave:  # a cluster's notes are the report's, with its decision
                report.notes += [f"wave {d.wave}: {n}" for n in d.notes]
            if d.target is None or not d.clusters:
                continue
            version = d.target.version
            first = fleet.clusters[d.clusters[0]]
            hold, evidence = waves.for_proposal(self.repo, fleet, first, version)
            if hold and d.existing is None:
                # Proposals follow the waves: opened once the earlier waves have soaked.
                report.notes.append(f"{d.who}: {version} not proposed yet: {hold}")
                continue
            known = infos.get(d.existing.number) if d.existing else None
            try:
                if d.wave:
                    draft = wave_request.draft(
                        self,
                        d,
                        head=head,
                        fleet=fleet,
                        indexes=indexes,
                        rules=rules,
                        evidence=evidence,
                    )
                    proposal = self._publish(d, draft, fleet, known)
                else:
                    proposal = self._propose(
                        d,
                        first,
                        head=head,
                        fleet=fleet,
                        index=indexes[first.release.chart_repo_url],
                        rules=rules,
                        known=known,
                        evidence=evidence,
                    )
            except GitOpsBotError as exc:
                report.problems.append(f"{d.who}: {version}: {exc}")
                log.warning("proposal for %s %s failed: %s", d.who, version, exc)
                continue
            report.proposals.append(proposal)
            opened_for[(d.cluster, d.wave)] = proposal
            records = core.upsert_record(
                records,
                ProposalRecord(
                    d.cluster, version, proposal.number, head=proposal.head, wave=d.wave
                ),
            )
        for d in decisions:
            for closing in d.close:
                text = f"gitopsbot closes this proposal: {closing.reason}."
                if closing.superseded_by:
                    new = opened_for.get((d.cluster, d.wave))
                    if new is None:
                        continue  # the replacement failed or waits: keep the old one for now
                    text += f" Superseded by #{new.number} ({new.url})."
                try:
                    self.forge.close_pull_request(closing.record.number, text)
                except GitOpsBotError as exc:
                    report.problems.append(f"close #{closing.record.number}: {exc}")
                    continue
                report.closed.append((closing.record.number, closing.reason))
                records = core.upsert_record(
                    records, replace(closing.record, state=ProposalState.SUPERSEDED)
                )
        return records

    def _publish(
        self, d: ProposalDecision, draft: Draft, fleet: Fleet, known: PullRequestInfo | None
    ) -> Proposal:
        return publish(
            self.repo,
            self.forge,
            d,
            draft,
            watched_branch=self.watched_branch,
            labels=fleet.settings.proposals.labels,
            known=known,
        )

    def _write_ledger(self, state_branch: str, records: Sequence[ProposalRecord]) -> None:
        text = core.render_ledger(records).encode()
        open_count = sum(1 for r in records if r.state is ProposalState.OPEN)
        self.repo.commit_files(
            state_branch,
            {core.LEDGER_FILE: text},
            f"Proposals ledger: {open_count} open\n",
            parent=None,
        )
        self.repo.push(state_branch)

    def plan_for(
        self,
        spec: ClusterSpec,
        desired: ClusterSpec,
        *,
        index: ChartIndex | None,
        rules: Rules,
        secret_literals: Mapping[str, Location] | None = None,
        fleet: Fleet | None = None,
    ) -> Plan:
        """The plan of moving ``spec`` (the watched branch) to ``desired`` (a proposal or any
        request's branch). ``secret_literals``: literals the watched branch still holds in
        the cluster's values.yaml (masked in ``spec``), for the plan's note. ``fleet`` (the
        watched branch's): the plan carries the waves' verdict (``bot.waves``)."""
        rel = spec.release
        current = self.charts.chart(rel.chart_repo_url, rel.chart_name, rel.version)
        target, problem = chart_reads.target_chart(self.charts, desired.release)
        deployed = DeployedState(
            chart_version=rel.version,
            app_version=current.app_version,
            values=spec.values,
            source=f"git:{self.watched_branch}",
            secret_literals=dict(secret_literals or {}),
            credentials=spec.credentials,
        )
        plan = make_plan(
            deployed=deployed,
            desired=desired,
            target_chart=target,
            deployed_chart=current,
            index=index,
            rules=rules,
            chart_problem=problem,
        )
        if fleet is None:
            return plan
        found = waves.judge_plan(self.repo, fleet, desired, before=rel.version)
        return with_verdicts(plan, found.verdicts)

    def digests(self, plan: Plan, desired: ClusterSpec, fleet: Fleet) -> Plan:
        """``plan`` with the target chart's archive and rendered manifests digests
        (``bot.reviewed_chart``); as it was when the chart source keeps no archives or the
        archive cannot be read (the plan already says why)."""
        reviewed = self._reviewed(fleet)
        if plan.chart_problem or reviewed is None:
            return plan
        try:
            found = reviewed.digests(desired)
        except GitOpsBotError as exc:
            log.warning("%s: chart digests not shown: %s", desired.name, exc)
            return plan
        # A signature the apply would refuse is the plan's deny too (core.provenance).
        where = desired.locations.get("release.yaml:chart.repository")
        unsigned = provenance.verdict(found.provenance, where)
        return with_verdicts(replace(plan, chart_digests=found), [unsigned] if unsigned else [])

    def record_digests(
        self, plan: Plan, tree: FileTree, *, fleet: Fleet, planned_at: str, request: int | None
    ) -> None:
        """Record the plan's digests on the state branch for the apply, keyed by the
        cluster's files in ``tree`` (docs/plan.md, "Digests")."""
        reviewed = self._reviewed(fleet)
        if plan.chart_digests is None or reviewed is None:
            return
        reviewed.record(
            reviewed_chart.Reviewed(
                cluster=plan.cluster,
                key=reviewed_chart.files_key(render_files(tree, plan.cluster)),
                digests=plan.chart_digests,
                planned_at=planned_at,
                request=request,
            )
        )

    def _reviewed(self, fleet: Fleet) -> ReviewedCharts | None:
        if not isinstance(self.charts, ChartArchives):
            return None
        return ReviewedCharts(
            self.charts, self.renderer, repo=self.repo, state_branch=fleet.settings.state_branch
        )

    def comment(self, cluster: str, number: int) -> tuple[PullRequestInfo, Plan]:
        """Post (or edit in place) the plan comment of ``cluster`` on request ``number``, and
        set ``gitopsbot/policy`` on its head: the watched branch is the baseline, the
        request's branch the desired state. The comment is edited only when its text changed;
        the status is set every time (the forge keeps the latest). With
        ``rehearsal.attachToPlan`` the comment ends with the rehearsal recorded for the
        request's head (docs/rehearsal.md)."""
        fleet, literals = self._baseline_fleet()
        pr = self.forge.get_pull_request(number)
        if cluster not in fleet.clusters:
            raise FleetError(
                [
                    Problem(
                        f"{CLUSTERS_DIR}/{cluster}",
                        0,
                        0,
                        "",
                        f"no such cluster on {self.watched_branch}",
                        suggest(cluster, sorted(fleet.clusters)),
                    )
                ]
            )
        spec = fleet.clusters[cluster]
        desired_at = self.repo.head(pr.branch) or pr.head_sha
        desired = load_cluster(self.repo.tree(desired_at), cluster)
        rules = load_rules([*self._policy_documents, *fleet.policy_documents])
        index = self.charts.index(desired.release.chart_repo_url, desired.release.chart_name)
        plan = self.plan_for(
            spec,
            desired,
            index=index,
            rules=rules,
            secret_literals=literals.get(cluster),
            fleet=fleet,
        )
        plan = self.digests(plan, desired, fleet)
        self.record_digests(
            plan, self.repo.tree(desired_at), fleet=fleet, planned_at=desired_at, request=number
        )
        body = rehearsal_core.with_section(
            render_markdown(plan), self._rehearsal_section(fleet, cluster, desired_at)
        )
        self.forge.upsert_comment(number, marker=plan_marker(cluster), body=body)
        self.forge.set_status(desired_at, texts.policy_status(plan.decision))
        return pr, plan

    def _rehearsal_section(self, fleet: Fleet, cluster: str, sha: str) -> str:
        """The compressed rehearsal the plan comment ends with when the watched branch's
        gitopsbot.yaml turns ``rehearsal.attachToPlan`` on and ``rehearse --record`` kept one
        for the request's head ``sha`` ("" otherwise: a comment that had one loses it, for a
        rehearsal of an older head says nothing of this one). Only the comment carries it: a
        proposal's body is compared to decide whether to write, and in Git-only mode each write
        is a new head no rehearsal was recorded for."""
        store = JournalStore(self.repo, branch=fleet.settings.state_branch, push=False)
        return rehearsal_store.plan_section(store, fleet.settings, cluster, sha)

    def _propose(
        self,
        d: ProposalDecision,
        spec: ClusterSpec,
        *,
        head: str,
        fleet: Fleet,
        index: ChartIndex,
        rules: Rules,
        known: PullRequestInfo | None,
        evidence: str = "",
    ) -> Proposal:
        assert d.target is not None
        rel = spec.release
        version = d.target.version
        branch = ProposalId(d.cluster, version).branch

        # The branch: created from the watched head; an existing one is edited (on top of its
        # own head, keeping what people pushed there) only when the bump is missing from it.
        branch_head = self.repo.head(branch)
        base = head if branch_head is None else branch_head
        release_path, values_path = edited_files(d.cluster)
        old = {p: self.repo.read(base, p) or b"" for p in (release_path, values_path)}
        new_release, new_values, set_image = bumped(
            self.charts,
            rel,
            version,
            release_text=old[release_path],
            values_text=old[values_path],
            watched_values=old[values_path] if base == head else self.repo.read(head, values_path),
        )
        edits = {release_path: new_release, values_path: new_values}
        needs_commit = branch_head is None or edits != old

        # The plan: what merging the branch does to the watched branch's state, read from the
        # branch as it will be (its base plus the edits), before anything is committed.
        desired_tree: FileTree = (
            OverlayTree(self.repo.tree(base), edits) if needs_commit else self.repo.tree(base)
        )
        desired = load_cluster(desired_tree, d.cluster)
        plan = self.plan_for(spec, desired, index=index, rules=rules, fleet=fleet)
        plan = self.digests(plan, desired, fleet)
        body = texts.proposal_body(
            d,
            chart=rel.chart_name,
            scope=fleet.settings.proposals.scope,
            plan_markdown=render_markdown(plan),
            versions=index.versions(rel.chart_name),
            image=set_image,
        )
        if evidence:  # the earlier waves' records (bot.waves.for_proposal)
            body = f"{body.rstrip()}\n\n{evidence}"
        draft = Draft(
            branch=branch,
            marker=texts.marker(d.cluster, version),
            title=texts.title(d.cluster, rel.chart_name, version),
            body=body,
            message=texts.commit_message(
                d.cluster, rel.chart_name, rel.version, version, set_image
            ),
            edits=edits,
            base=base,
            branch_head=branch_head,
            needs_commit=needs_commit,
            decision=plan.decision,
        )
        proposal = self._publish(d, draft, fleet, known)
        self.record_digests(
            plan, desired_tree, fleet=fleet, planned_at=proposal.head, request=proposal.number
        )
        return proposal
