"""What ``plan``, ``validate``, ``propose`` and ``comment`` are wired with: chart sources,
the fleet's files, the forge and the proposer.

Part of the composition root (``gitopsbot.app``): the only package that knows concrete
classes.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from gitopsbot import settings
from gitopsbot.adapters.builtin_policies import (  # re-exported: plan, validate
    builtin_policy_documents as builtin_policy_documents,
)
from gitopsbot.adapters.clock import SystemClock
from gitopsbot.adapters.forge.connect import from_settings
from gitopsbot.adapters.git import GitRepo, GitSettings
from gitopsbot.adapters.gitonly import GitOnlyForge
from gitopsbot.adapters.gitrefs import GitRefTree
from gitopsbot.adapters.helm import HelmCli
from gitopsbot.adapters.localfiles import DirectoryTree
from gitopsbot.adapters.metrics_server import MetricsServer as MetricsServer  # re-exported: run
from gitopsbot.adapters.oci_registry import RegistryLogins
from gitopsbot.adapters.secrets import SecretResolver
from gitopsbot.adapters.tools import locate
from gitopsbot.adapters.webhooks import WebhookReceiver as WebhookReceiver  # re-exported: run
from gitopsbot.app.clusters import chart_keyrings, chart_source, registry_logins
from gitopsbot.app.forge_access import connect_forge
from gitopsbot.app.git_access import git_credentials, open_repo, read_fleet
from gitopsbot.bot.proposer import Proposer
from gitopsbot.core.fleet.model import BotSettings, ChartKeyring
from gitopsbot.errors import ConfigError
from gitopsbot.ports.charts import ChartSource
from gitopsbot.ports.files import FileTree
from gitopsbot.ports.forge import Forge


def chart_source_for(
    chart_dirs: Sequence[Path],
    registries: RegistryLogins | None = None,
    keyrings: tuple[ChartKeyring, ...] = (),
) -> ChartSource:
    """Charts for ``plan``/``validate``/``propose``: ``--chart-dir`` paths, else
    ``GITOPSBOT_CHARTS``, else each release's repository (over HTTP, or an OCI registry
    with the ``registries`` logins: ``clusters.chart_source``); with ``keyrings``, archives
    fetched are verified (``clusters.chart_keyrings``)."""
    return chart_source(
        settings.cache_dir(), registries=registries, keyrings=keyrings, paths=chart_dirs
    )


def fleet_tree(fleet: Path, ref: str | None = None) -> FileTree:
    """The fleet's files: at ``ref`` of the repository at ``fleet``, or the directory as is."""
    return GitRefTree(fleet, ref) if ref else DirectoryTree(fleet)


def fleet_commit(fleet: Path, ref: str) -> str:
    """The commit ``ref`` names in the repository at ``fleet`` (GitFailed when none)."""
    return GitRefTree(fleet, ref).sha


@dataclass(frozen=True, slots=True)
class ProposalWiring:
    repo: GitRepo
    forge: Forge
    settings: BotSettings


def open_forge(fleet_settings: BotSettings, repo: GitRepo, *, git_only: bool) -> Forge:
    """The forge named in gitopsbot.yaml, or Git-only mode over ``repo``. The token is read
    from its reference (env or file) and handed to the provider only; it is never printed."""
    forge = fleet_settings.forge
    if git_only or forge.kind == "git-only":
        return GitOnlyForge(repo)
    if forge.app is not None:  # a GitHub App (forge_access)
        access = connect_forge(fleet_settings, SystemClock())
        assert access.forge is not None
        return access.forge
    if forge.token is None:
        raise ConfigError(
            f"gitopsbot.yaml: forge.token: required for forge.kind {forge.kind} "
            "(or run with --git-only)"
        )
    if forge.token.source == "kubernetes-secret":
        raise ConfigError(
            "gitopsbot.yaml: forge.token: use an env or file reference for the "
            "propose and comment commands"
        )
    token = SecretResolver().resolve(forge.token)
    return from_settings(forge, token, clock=SystemClock())


def proposal_wiring(url: str, branch: str, *, git_only: bool) -> ProposalWiring:
    """Mirror the fleet repository, read its settings, and connect the forge."""
    cache = settings.cache_dir()
    first = open_repo(url, cache)  # fetches; the settings name the author to commit as
    fleet_settings = read_fleet(first, branch).settings
    app = fleet_settings.forge.app is not None and not git_only
    access = connect_forge(fleet_settings, SystemClock()) if app else None
    tokens = access.tokens if access is not None else None
    repo = GitRepo(
        GitSettings(
            url=url,
            mirror_dir=cache / "mirrors" / hashlib.sha256(url.encode()).hexdigest()[:16],
            # A GitHub App pushes with the forge client's installation tokens.
            credentials=git_credentials(url, fleet_settings, tokens=tokens),
            author_name=fleet_settings.author_name,
            author_email=fleet_settings.author_email,
        )
    )
    if access is not None and access.forge is not None:
        return ProposalWiring(repo, access.forge, fleet_settings)
    return ProposalWiring(repo, open_forge(fleet_settings, repo, git_only=git_only), fleet_settings)


def proposer(
    wiring: ProposalWiring,
    branch: str,
    chart_dirs: Sequence[Path],
    charts: ChartSource | None = None,
    renderer: HelmCli | None = None,
) -> Proposer:
    """A proposer with a fresh chart source (HTTP sources keep an index for their lifetime,
    so each pass gets its own to see new versions); ``charts`` instead when given."""
    return Proposer(
        wiring.repo,
        wiring.forge,
        charts
        if charts is not None
        else chart_source_for(
            chart_dirs, registry_logins(wiring.settings), chart_keyrings(wiring.settings)
        ),
        watched_branch=branch,
        policy_documents=builtin_policy_documents(),
        renderer=renderer if renderer is not None else plan_renderer(),
    )


def plan_renderer() -> HelmCli | None:
    """helm for the plan's rendered manifests digest (``GITOPSBOT_HELM``, else helm on
    PATH); None without one: the plan then records the archive's digest only and says so."""
    cache = settings.cache_dir()
    try:
        helm = locate("helm", from_environment=settings.tool_path("helm"), cache=cache)
    except ConfigError:
        return None
    return HelmCli(helm, home=cache / "render")
