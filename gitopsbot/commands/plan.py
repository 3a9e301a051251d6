"""`gitopsbot plan`: what an upgrade of one cluster will do, and whether policy allows it."""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gitopsbot import app, settings
from gitopsbot.baseline import load_cluster_baseline
from gitopsbot.bot import chart_reads
from gitopsbot.bot import waves as bot_waves
from gitopsbot.bot.reviewed_chart import chart_digests
from gitopsbot.commands import SUMMARIES, failures
from gitopsbot.commands.options import add_chart_dir, add_cluster_refs
from gitopsbot.core.charts.chart import Chart, ChartIndex
from gitopsbot.core.charts.observed import DeployedState
from gitopsbot.core.fleet.fields import suggest
from gitopsbot.core.fleet.model import BotSettings, ClusterSpec, Fleet, ReleaseSpec
from gitopsbot.core.planning import provenance
from gitopsbot.core.planning.plan import Plan, make_plan
from gitopsbot.core.planning.render import render_json, render_markdown
from gitopsbot.core.policy import Decision, Verdict, load_rules
from gitopsbot.core.waves import promotion_gate
from gitopsbot.errors import (
    ChartError,
    FleetError,
    GitOpsBotError,
    Problem,
)
from gitopsbot.fleetrepo import load_fleet
from gitopsbot.ports.charts import ChartArchives, ChartSource
from gitopsbot.ports.files import FileTree

REPOSITORY_AT = "release.yaml:chart.repository"  # where a CHART-PROVENANCE deny points
EXAMPLES = """\
examples:
  # offline, with the example charts shipped in the repository
  gitopsbot plan --cluster staging --fleet examples/fleet --chart-dir examples/charts/repo
  # what a pull request changes: baseline main, proposal the PR branch
  gitopsbot plan --cluster <cluster> --fleet . --from origin/main --to HEAD
  # machine-readable, and exit 1 unless policy allows the change
  gitopsbot plan --cluster <cluster> --output json --check

Without --from the baseline is "nothing deployed" (a first install). Charts come from the
release's repository over HTTP unless --chart-dir (or GITOPSBOT_CHARTS, paths separated by
':') names local chart directories, archives or repository directories.
A chart version the repository (or --chart-dir) does not have still gives a plan: no steps,
and the CHART-NOT-IN-INDEX deny.
exit status: 0 plan printed (1 with --check when denied or unacknowledged), 1 bad fleet files
or policy, 2 bad options, chart repository or Git unavailable.
"""


def register(sub: Any) -> None:
    p = sub.add_parser(
        "plan",
        help=SUMMARIES["plan"],
        description="Compute the upgrade plan of one cluster from the fleet repository: steps "
        "with their impact on running work, version, values, image and CRD diffs, the per-pool "
        "rollout timeline, and the policy verdicts (docs/plan.md, docs/policies.md).",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_cluster_refs(p)
    p.add_argument("--output", choices=("markdown", "json"), default="markdown")
    add_chart_dir(p)
    p.add_argument(
        "--check", action="store_true", help="exit 1 when the plan is denied or unacknowledged"
    )
    p.set_defaults(func=run)


def chart_source(chart_dirs: list[Path], bot_settings: BotSettings | None = None) -> ChartSource:
    """The charts a plan reads; ``oci://`` ones with ``bot_settings``' chartRegistries
    logins (their passwords read now: an unset one names its entry), and each archive
    fetched verified with the keyring its ``chartKeyrings`` entry names, as the bot's plan
    comment is. A keyring this machine cannot read is not an error here: the plan says NOT
    VERIFIED with the reason, as it cannot vouch for the chart."""
    if bot_settings is None:
        return app.chart_source_for(chart_dirs)
    logins = app.registry_logins(bot_settings)
    return app.chart_source_for(chart_dirs, logins, bot_settings.chart_keyrings)


def source_label(chart_dirs: list[Path]) -> str:
    """Where charts are read from, for messages: the local paths, or "" (the repository)."""
    paths = chart_dirs or settings.chart_paths()
    return ", ".join(str(p) for p in paths)


def target_chart(source: ChartSource, rel: ReleaseSpec) -> tuple[Chart | None, ChartIndex, str]:
    """(chart or None, index, why None). A version the repository does not have is a policy
    verdict (CHART-NOT-IN-INDEX), not an error; an unreachable repository still raises
    ChartUnavailable."""
    index = source.index(rel.chart_repo_url, rel.chart_name)
    chart, problem = chart_reads.target_chart(source, rel)
    return chart, index, problem


class ArchiveUnreadable(ChartError):
    """The target chart's archive could not be fetched for its digests (one line)."""


def with_digests(plan: Plan, source: ChartSource, desired: ClusterSpec) -> Plan:
    """``plan`` with the target chart's archive and rendered manifests digests, as the plan
    comment shows them (``bot.reviewed_chart.chart_digests``: the same port, the same helm
    template); as it is when the chart could not be read (the plan says why). Raises
    ArchiveUnreadable when the archive cannot be fetched: a plan that would show no digest
    is not printed."""
    if plan.chart_problem or not isinstance(source, ChartArchives):
        return plan
    rel = desired.release
    try:
        digests = chart_digests(source, app.plan_renderer(), desired)
    except ChartError as exc:
        raise ArchiveUnreadable(
            f"the archive of chart {rel.chart_name} {rel.version} could not be fetched for "
            f"its digest: {' '.join(str(exc).split())}"
        ) from None
    # A signature the apply would refuse is the plan's deny, as in the plan comment.
    unsigned = provenance.verdict(digests.provenance, desired.locations.get(REPOSITORY_AT))
    return promotion_gate.with_verdicts(
        replace(plan, chart_digests=digests), [unsigned] if unsigned else []
    )


def _tree(fleet: Path, ref: str | None) -> FileTree:
    return app.fleet_tree(fleet, ref)


def _baseline(
    fleet: Path, ref: str, name: str, source: ChartSource
) -> tuple[DeployedState | None, Chart | None]:
    tree = app.fleet_tree(fleet, ref)
    try:
        before, literals = load_cluster_baseline(tree, name)
    except FleetError as exc:
        if any(p.message == "no such cluster" for p in exc.problems):
            return None, None  # new at this ref: nothing deployed
        # The baseline's files, not the working tree's: name the ref they were read at.
        raise FleetError([replace(p, file=f"{ref}:{p.file}") for p in exc.problems]) from None
    rel = before.release
    chart = source.chart(rel.chart_repo_url, rel.chart_name, rel.version)
    state = DeployedState(
        chart_version=rel.version,
        app_version=chart.app_version,
        values=before.values,
        source=f"git:{tree.label}",
        secret_literals=literals,
        credentials=before.credentials,
    )
    return state, chart


def build_plan(args: argparse.Namespace) -> Plan:
    fleet_path = Path(args.fleet)
    try:
        fleet = load_fleet(_tree(fleet_path, args.to_ref))
    except FleetError as exc:
        if not args.to_ref:
            raise
        raise FleetError(
            [replace(p, file=f"{args.to_ref}:{p.file}") for p in exc.problems]
        ) from None
    if args.cluster not in fleet.clusters:
        raise FleetError(
            [
                Problem(
                    f"clusters/{args.cluster}",
                    0,
                    0,
                    "",
                    "no such cluster",
                    suggest(args.cluster, sorted(fleet.clusters)),
                )
            ]
        )
    desired = fleet.clusters[args.cluster]
    rules = load_rules([*app.builtin_policy_documents(), *fleet.policy_documents])
    source = chart_source(args.chart_dir, fleet.settings)
    target, index, problem = target_chart(source, desired.release)
    deployed, deployed_chart = (
        _baseline(fleet_path, args.from_ref, args.cluster, source)
        if args.from_ref
        else (None, None)
    )
    plan = make_plan(
        deployed=deployed,
        desired=desired,
        target_chart=target,
        deployed_chart=deployed_chart,
        index=index,
        rules=rules,
        chart_source=source_label(args.chart_dir),
        chart_problem=problem,
    )
    plan = with_digests(plan, source, desired)
    if not promotion_gate.applies(fleet.settings):
        return plan
    before = deployed.chart_version if deployed is not None else ""
    return promotion_gate.with_verdicts(plan, _wave_verdicts(fleet_path, fleet, desired, before))


def _wave_verdicts(
    path: Path, fleet: Fleet, desired: ClusterSpec, before: str
) -> tuple[Verdict, ...]:
    """The WAVES verdict (docs/policies.md), judged against the state branch the clone at
    ``path`` has (its local branch, else origin's as of its last fetch); fails closed when
    there is none to read."""
    now = datetime.now(UTC)
    try:
        view = app.open_state(app.fleet_url(url=None, path=str(path)), clone=path.resolve())
    except GitOpsBotError as exc:
        decision = promotion_gate.decide_change(
            settings=fleet.settings,
            clusters=fleet.clusters.values(),
            evidence={},
            spec=desired,
            before=before,
            now=now,
        )
        if decision.allowed:
            return ()
        return (promotion_gate.unreadable(f"{path}: {exc}", decision),)
    assert view.repo is not None
    found = bot_waves.judge(
        store=view.store,
        settings=fleet.settings,
        clusters=fleet.clusters,
        spec=desired,
        before=before,
        now=now,
        version_of=bot_waves.version_reader(view.repo),
    )
    return found.verdicts


def run(args: argparse.Namespace) -> int:
    try:
        plan = build_plan(args)
    except GitOpsBotError as exc:
        return failures.report(
            "plan", exc, "--chart-dir examples/charts/repo (or GITOPSBOT_CHARTS=DIR)"
        )
    out = render_json(plan) if args.output == "json" else render_markdown(plan)
    sys.stdout.write(out)
    if args.check and plan.decision != Decision.ALLOWED:
        return 1
    return 0
