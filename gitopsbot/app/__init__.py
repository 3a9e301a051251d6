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
"""

from __future__ import annotations

from gitopsbot.adapters import interrupts as interrupts  # re-exported: Ctrl-C, every command
from gitopsbot.adapters.builtin_policies import (  # re-exported: plan, validate
    builtin_policy_documents as builtin_policy_documents,
)
from gitopsbot.adapters.git import GitRepo as GitRepo  # re-exported: the sandbox's types
from gitopsbot.adapters.metrics_server import MetricsServer as MetricsServer  # re-exported: run
from gitopsbot.adapters.terminal import LiveScreen as LiveScreen  # re-exported: status --watch
from gitopsbot.adapters.tools import ToolSet as ToolSet  # re-exported: the sandbox's types
from gitopsbot.adapters.webhooks import WebhookReceiver as WebhookReceiver  # re-exported: run
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
from gitopsbot.app.bot import (  # re-exported: run on a terminal
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
    webhook_receiver as webhook_receiver,
)
from gitopsbot.app.bot import (
    wire_reconciler as wire_reconciler,
)
from gitopsbot.app.clusters import (
    apply_gate as apply_gate,
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
    replica_identity as replica_identity,
)
from gitopsbot.app.clusters import (
    resolve_tools as resolve_tools,
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
    proposal_wiring as proposal_wiring,
)
from gitopsbot.app.proposals import (
    proposer as proposer,
)
