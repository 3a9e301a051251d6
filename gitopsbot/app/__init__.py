"""Composition root: builds the adapters from the fleet's settings and hands ports to the bot.

The only package that knows concrete classes (an import-linter contract in pyproject.toml says
so). The commands and the sandbox get everything they run with from here:

- ``options``: ``RunOptions``, what ``gitopsbot run`` was told;
- ``git_access``: the fleet repository (URL, credentials, mirror) and ``open_state`` for
  ``gitopsbot status``;
- ``clusters``: helm and kubectl, each cluster's connection, executor, Events and Leases;
- ``bot``: ``build_bot`` for ``gitopsbot run`` (reconciler, scheduler, listeners, forge),
  the webhook and metrics endpoints, logging;
- ``proposals``: what ``plan``, ``validate``, ``propose`` and ``comment`` are wired with.

Each name is imported on first use (PEP 562), so a command pays only for what it runs:
``gitopsbot --help`` or ``status`` does not import the Kubernetes client, the scheduler or the
servers that ``run`` needs.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gitopsbot.adapters import interrupts as interrupts
    from gitopsbot.adapters import open_files as open_files
    from gitopsbot.adapters.builtin_policies import (
        builtin_policy_documents as builtin_policy_documents,
    )
    from gitopsbot.adapters.git import (
        GitRepo as GitRepo,
    )
    from gitopsbot.adapters.metrics_server import (
        MetricsServer as MetricsServer,
    )
    from gitopsbot.adapters.terminal import (
        LiveScreen as LiveScreen,
    )
    from gitopsbot.adapters.tools import (
        ToolSet as ToolSet,
    )
    from gitopsbot.adapters.webhooks import (
        WebhookReceiver as WebhookReceiver,
    )
    from gitopsbot.app.bot import (
        Bot as Bot,
    )
    from gitopsbot.app.bot import (
        Wired as Wired,
    )
    from gitopsbot.app.bot import (
        build_bot as build_bot,
    )
    from gitopsbot.app.bot import (
        forge_client as forge_client,
    )
    from gitopsbot.app.bot import (
        forge_secrets as forge_secrets,
    )
    from gitopsbot.app.bot import (
        live_view as live_view,
    )
    from gitopsbot.app.bot import (
        loop as loop,
    )
    from gitopsbot.app.bot import (
        metrics_server as metrics_server,
    )
    from gitopsbot.app.bot import (
        receiver as receiver,
    )
    from gitopsbot.app.bot import (
        release_watches as release_watches,
    )
    from gitopsbot.app.bot import (
        webhook_receiver as webhook_receiver,
    )
    from gitopsbot.app.bot import (
        wire_reconciler as wire_reconciler,
    )
    from gitopsbot.app.clusters import (
        apply_gate as apply_gate,
    )
    from gitopsbot.app.clusters import (
        chart_keyrings as chart_keyrings,
    )
    from gitopsbot.app.clusters import (
        chart_source as chart_source,
    )
    from gitopsbot.app.clusters import (
        cluster_access as cluster_access,
    )
    from gitopsbot.app.clusters import (
        cluster_connection as cluster_connection,
    )
    from gitopsbot.app.clusters import (
        event_recorder as event_recorder,
    )
    from gitopsbot.app.clusters import (
        executor_factory as executor_factory,
    )
    from gitopsbot.app.clusters import (
        helm_stopper as helm_stopper,
    )
    from gitopsbot.app.clusters import (
        kube_context_source as kube_context_source,
    )
    from gitopsbot.app.clusters import (
        lease_client as lease_client,
    )
    from gitopsbot.app.clusters import (
        live_cluster as live_cluster,
    )
    from gitopsbot.app.clusters import (
        registry_logins as registry_logins,
    )
    from gitopsbot.app.clusters import (
        renderer as renderer,
    )
    from gitopsbot.app.clusters import (
        replica_identity as replica_identity,
    )
    from gitopsbot.app.clusters import (
        resolve_tools as resolve_tools,
    )
    from gitopsbot.app.forge_access import (
        ForgeAccess as ForgeAccess,
    )
    from gitopsbot.app.forge_access import (
        github_app_client as github_app_client,
    )
    from gitopsbot.app.git_access import (
        SSH_KEY_ENV as SSH_KEY_ENV,
    )
    from gitopsbot.app.git_access import (
        TOKEN_ENV as TOKEN_ENV,
    )
    from gitopsbot.app.git_access import (
        fleet_url as fleet_url,
    )
    from gitopsbot.app.git_access import (
        git_credentials as git_credentials,
    )
    from gitopsbot.app.git_access import (
        is_ssh_url as is_ssh_url,
    )
    from gitopsbot.app.git_access import (
        open_repo as open_repo,
    )
    from gitopsbot.app.git_access import (
        open_state as open_state,
    )
    from gitopsbot.app.git_access import (
        password_mirror as password_mirror,
    )
    from gitopsbot.app.git_access import (
        read_fleet as read_fleet,
    )
    from gitopsbot.app.git_access import (
        ssh_key_credentials as ssh_key_credentials,
    )
    from gitopsbot.app.git_access import (
        token_mirror as token_mirror,
    )
    from gitopsbot.app.log_setup import (
        configure_logging as configure_logging,
    )
    from gitopsbot.app.options import (
        RunOptions as RunOptions,
    )
    from gitopsbot.app.proposals import (
        ProposalWiring as ProposalWiring,
    )
    from gitopsbot.app.proposals import (
        chart_source_for as chart_source_for,
    )
    from gitopsbot.app.proposals import (
        fleet_commit as fleet_commit,
    )
    from gitopsbot.app.proposals import (
        fleet_tree as fleet_tree,
    )
    from gitopsbot.app.proposals import (
        open_forge as open_forge,
    )
    from gitopsbot.app.proposals import (
        plan_renderer as plan_renderer,
    )
    from gitopsbot.app.proposals import (
        proposal_wiring as proposal_wiring,
    )
    from gitopsbot.app.proposals import (
        proposer as proposer,
    )

# Where each re-exported name lives; the TYPE_CHECKING imports above say the same to mypy.
_HOMES: dict[str, str] = {
    "interrupts": "gitopsbot.adapters",
    "open_files": "gitopsbot.adapters",
    "builtin_policy_documents": "gitopsbot.adapters.builtin_policies",
    "GitRepo": "gitopsbot.adapters.git",
    "MetricsServer": "gitopsbot.adapters.metrics_server",
    "LiveScreen": "gitopsbot.adapters.terminal",
    "ToolSet": "gitopsbot.adapters.tools",
    "WebhookReceiver": "gitopsbot.adapters.webhooks",
    "Bot": "gitopsbot.app.bot",
    "Wired": "gitopsbot.app.bot",
    "build_bot": "gitopsbot.app.bot",
    "configure_logging": "gitopsbot.app.log_setup",
    "forge_client": "gitopsbot.app.bot",
    "forge_secrets": "gitopsbot.app.bot",
    "live_view": "gitopsbot.app.bot",
    "loop": "gitopsbot.app.bot",
    "release_watches": "gitopsbot.app.bot",
    "metrics_server": "gitopsbot.app.bot",
    "receiver": "gitopsbot.app.bot",
    "webhook_receiver": "gitopsbot.app.bot",
    "wire_reconciler": "gitopsbot.app.bot",
    "apply_gate": "gitopsbot.app.clusters",
    "chart_source": "gitopsbot.app.clusters",
    "renderer": "gitopsbot.app.clusters",
    "registry_logins": "gitopsbot.app.clusters",
    "chart_keyrings": "gitopsbot.app.clusters",
    "cluster_access": "gitopsbot.app.clusters",
    "cluster_connection": "gitopsbot.app.clusters",
    "event_recorder": "gitopsbot.app.clusters",
    "executor_factory": "gitopsbot.app.clusters",
    "helm_stopper": "gitopsbot.app.clusters",
    "kube_context_source": "gitopsbot.app.clusters",
    "lease_client": "gitopsbot.app.clusters",
    "live_cluster": "gitopsbot.app.clusters",
    "replica_identity": "gitopsbot.app.clusters",
    "resolve_tools": "gitopsbot.app.clusters",
    "SSH_KEY_ENV": "gitopsbot.app.git_access",
    "TOKEN_ENV": "gitopsbot.app.git_access",
    "fleet_url": "gitopsbot.app.git_access",
    "git_credentials": "gitopsbot.app.git_access",
    "is_ssh_url": "gitopsbot.app.git_access",
    "open_repo": "gitopsbot.app.git_access",
    "open_state": "gitopsbot.app.git_access",
    "password_mirror": "gitopsbot.app.git_access",
    "token_mirror": "gitopsbot.app.git_access",
    "ForgeAccess": "gitopsbot.app.forge_access",
    "github_app_client": "gitopsbot.app.forge_access",
    "read_fleet": "gitopsbot.app.git_access",
    "ssh_key_credentials": "gitopsbot.app.git_access",
    "RunOptions": "gitopsbot.app.options",
    "ProposalWiring": "gitopsbot.app.proposals",
    "chart_source_for": "gitopsbot.app.proposals",
    "fleet_commit": "gitopsbot.app.proposals",
    "fleet_tree": "gitopsbot.app.proposals",
    "open_forge": "gitopsbot.app.proposals",
    "proposal_wiring": "gitopsbot.app.proposals",
    "proposer": "gitopsbot.app.proposals",
    "plan_renderer": "gitopsbot.app.proposals",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if f"{home}.{name}" in _SUBMODULES:  # a module re-exported whole
        value: Any = importlib.import_module(f"{home}.{name}")
    else:
        value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


_SUBMODULES = frozenset({"gitopsbot.adapters.interrupts", "gitopsbot.adapters.open_files"})


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_HOMES))
