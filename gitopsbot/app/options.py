"""What ``gitopsbot run`` was told: the options every builder reads.

Part of the composition root (``gitopsbot.app``): the only package that knows concrete
classes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from gitopsbot import settings
from gitopsbot.adapters.builtin_policies import (  # re-exported: plan, validate
    builtin_policy_documents as builtin_policy_documents,
)
from gitopsbot.adapters.metrics_server import MetricsServer as MetricsServer  # re-exported: run
from gitopsbot.adapters.webhooks import WebhookReceiver as WebhookReceiver  # re-exported: run
from gitopsbot.bot.lease_keeper import LeaseTiming


@dataclass(frozen=True, slots=True)
class RunOptions:
    """What ``gitopsbot run`` was told on the command line."""

    fleet_url: str
    branch: str = "main"  # where gitopsbot.yaml is read first (its watchedBranch then rules)
    kubeconfig: str = ""  # "" → the kubernetes client's default (~/.kube/config)
    clusters: tuple[str, ...] = ()  # only these (default: every cluster in the fleet)
    push: bool = True
    workers: int = 4
    cache: Path = field(default_factory=settings.cache_dir)
    # Replicas sharing the fleet through Leases (docs/leases.md); "" = one replica, no Leases.
    leases_namespace: str = ""
    leases_kubeconfig: str = ""  # "" → ``kubeconfig``
    identity: str = ""  # base of the Lease identity; "" → $POD_NAME or the host name
    lease_timing: LeaseTiming = field(default_factory=LeaseTiming)
    lease_shards: int = 12  # shard Leases (core.sharding.DEFAULT_SHARDS; --lease-shards)
    # helm and kubectl (docs/cluster-access.md): --helm/--kubectl, else GITOPSBOT_HELM/
    # GITOPSBOT_KUBECTL, else the pinned ones if download_binaries, else PATH.
    helm: str = ""
    kubectl: str = ""
    download_binaries: bool = False
    in_cluster: bool = False  # --in-cluster: the pod's ServiceAccount, required
    events: bool = True  # Kubernetes Events of each happening (docs/events.md); --no-events
    # A proposal pass every proposals.interval (docs/proposals.md); --no-propose: none
    propose: bool = True
