"""What ``gitopsbot drift`` runs with: the fleet at its watched branch, the state branch (read
only), the charts, and each cluster's executor, as ``gitopsbot run`` reaches the clusters.

Part of the composition root (``gitopsbot.app``): the only package that knows concrete
classes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from gitopsbot.app.clusters import executor_factory
from gitopsbot.app.git_access import git_credentials, open_repo, read_fleet
from gitopsbot.app.options import RunOptions
from gitopsbot.app.proposals import chart_source_for
from gitopsbot.bot import drift as drift_check
from gitopsbot.bot.journal_store import JournalStore
from gitopsbot.core.chart import Chart
from gitopsbot.core.drift import DriftReport
from gitopsbot.core.model import ClusterSpec
from gitopsbot.errors import ChartError, ConfigError


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
    charts = chart_source_for(chart_dirs)

    def chart_for(spec: ClusterSpec) -> Chart | None:
        rel = spec.release
        try:
            return charts.chart(rel.chart_repo_url, rel.chart_name, rel.version)
        except ChartError:
            return None  # the images are then not compared (the report says so)

    reports = drift_check.check_clusters(
        [fleet.clusters[n] for n in names], store.current, chart_for, executor_factory(options)
    )
    return DriftRun(reports)
