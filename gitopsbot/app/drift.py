"""What ``gitopsbot drift`` runs with (the fleet at its watched branch, the state branch read
only, the charts, each cluster's executor as ``gitopsbot run`` reaches the clusters), and the
drift checks on ``run``'s schedule (``drift_watch``).

Part of the composition root (``gitopsbot.app``): the only package that knows concrete
classes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from gitopsbot.adapters.cluster_access import ClusterAccess
from gitopsbot.adapters.kube_events import KubeEvents
from gitopsbot.adapters.metrics import BotMetrics
from gitopsbot.adapters.tools import ToolSet
from gitopsbot.app.clusters import cluster_connection, executor_factory, registry_logins
from gitopsbot.app.git_access import git_credentials, open_repo, read_fleet
from gitopsbot.app.options import RunOptions
from gitopsbot.app.proposals import chart_source_for
from gitopsbot.bot import drift as drift_check
from gitopsbot.bot import waves
from gitopsbot.bot.drift_proposer import DriftProposer
from gitopsbot.bot.drift_watch import DriftWatch
from gitopsbot.bot.journal_store import JournalStore
from gitopsbot.core.charts.chart import Chart
from gitopsbot.core.drift.report import DriftReport
from gitopsbot.core.fleet.model import BotSettings, ClusterSpec, Fleet
from gitopsbot.core.records.journal import Journal
from gitopsbot.errors import ChartError, ConfigError
from gitopsbot.fleetrepo import find_cluster, load_fleet
from gitopsbot.ports.charts import ChartSource
from gitopsbot.ports.clock import Clock
from gitopsbot.ports.forge import Forge, RecordsRequestsInGit
from gitopsbot.ports.repo import Repo


@dataclass(frozen=True, slots=True)
class DriftRun:
    # Cluster → its report, or why it was not checked.
    reports: dict[str, DriftReport | str]


def check_fleet(options: RunOptions, chart_dirs: Sequence[Path] = ()) -> DriftRun:
    """Read the fleet and the state branch, then check each cluster (``options.clusters``, or
    all). Raises ConfigError for a cluster not in the fleet, GitError when Git is down."""
    repo = open_repo(options.fleet_url, options.cache)
    fleet = read_fleet(repo, options.branch)
    configured = git_credentials(options.fleet_url, fleet.settings)
    if configured != git_credentials(options.fleet_url):
        repo = open_repo(options.fleet_url, options.cache, configured)
        fleet = read_fleet(repo, options.branch)
    watched = fleet.settings.watched_branch
    if watched != options.branch:
        fleet = read_fleet(repo, watched)
    unknown = sorted(set(options.clusters) - set(fleet.clusters))
    if unknown:
        raise ConfigError(f"--cluster {', '.join(unknown)}: not in the fleet")
    names = options.clusters or tuple(sorted(fleet.clusters))
    store = JournalStore(repo, branch=fleet.settings.state_branch, push=False)
    logins = registry_logins(fleet.settings)
    charts = chart_source_for(chart_dirs, logins)

    reports = drift_check.check_clusters(
        [fleet.clusters[n] for n in names],
        store.current,
        _chart_for(charts),
        executor_factory(options, registries=logins),
        journals_for=_journals_for(store),
        spec_at=_spec_at(repo),
    )
    return DriftRun(reports)


def _journals_for(store: JournalStore) -> Callable[[str], list[Journal]]:
    """Every recorded operation of a cluster: what it applied, pinned and left of the CRDs."""

    def journals_for(cluster: str) -> list[Journal]:
        return waves.journals(store, cluster)

    return journals_for


def _spec_at(repo: Repo) -> Callable[[str, str], ClusterSpec | None]:
    """A cluster's files at a watched-branch commit (the one the bot applied)."""

    def spec_at(sha: str, cluster: str) -> ClusterSpec | None:
        return find_cluster(repo.tree(sha), cluster)

    return spec_at


def _chart_for(charts: ChartSource) -> Callable[[ClusterSpec], Chart | None]:
    def chart_for(spec: ClusterSpec) -> Chart | None:
        rel = spec.release
        try:
            return charts.chart(rel.chart_repo_url, rel.chart_name, rel.version)
        except ChartError:
            return None  # the images are then not compared (the report says so)

    return chart_for


def drift_watch(
    options: RunOptions,
    *,
    repo: Repo,
    bot_settings: BotSettings,
    clock: Clock,
    forge: Forge | None,
    charts: ChartSource,
    access: ClusterAccess,
    instance: str,
    tools: ToolSet | None = None,
    metrics: BotMetrics | None = None,
    may_act: Callable[[str], bool] | None = None,
    fleet_at: Callable[[str], Fleet] | None = None,
) -> DriftWatch:
    """``run``'s drift checks (docs/drift.md): the fleet at the watched branch's head as the
    passes fetched it, the state branch (read, and ``drift.yaml`` written), executors and Event
    clients of its own. ``fleet_at``: the fleet at a commit as the passes parsed it
    (``PassBase.fleet_at``, once per head); None: parsed here at each look."""
    watched = bot_settings.watched_branch
    store = JournalStore(repo, branch=bot_settings.state_branch, push=options.push)

    def specs() -> Mapping[str, ClusterSpec]:
        head = repo.head(watched)
        if head is None:
            return {}
        # The drift thread asks at every check instant (each cluster has its own in the
        # interval): at 1,000 clusters, a parse of the whole fleet every few seconds (#29).
        fleet = fleet_at(head) if fleet_at is not None else load_fleet(repo.tree(head))
        clusters = fleet.clusters
        return {n: s for n, s in clusters.items() if not options.clusters or n in options.clusters}

    events: dict[str, KubeEvents] = {}

    def events_for(spec: ClusterSpec) -> KubeEvents:
        if spec.name not in events:
            api = cluster_connection(access, spec).api_client()
            events[spec.name] = KubeEvents(api, instance=instance)
        return events[spec.name]

    settings = bot_settings.drift
    proposer = None
    # Git-only mode keeps a request's text on its branch by the proposals' naming
    # (gitopsbot/<cluster>/<version>): drift is reported there, no request opened.
    if (
        forge is not None
        and settings.on_drift != "report"
        and not isinstance(forge, RecordsRequestsInGit)
    ):
        proposer = DriftProposer(repo, forge, watched_branch=watched, settings=settings)
    return DriftWatch(
        settings=settings,
        specs=specs,
        journal_for=store.current,
        chart_for=_chart_for(charts),
        executor_for=executor_factory(
            options, tools, access, registries=registry_logins(bot_settings)
        ),
        now=clock.now,
        gauge=metrics.drift if metrics is not None else None,
        events_for=events_for if options.events else None,
        proposer=proposer,
        may_act=may_act,
        record=store.record_drift,
        fetch=repo.fetch,
        journals_for=_journals_for(store),
        spec_at=_spec_at(repo),
    )
