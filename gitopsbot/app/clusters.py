"""Reaching the clusters: helm and kubectl, each cluster's connection (kubeContext,
in-cluster ServiceAccount, kubeconfig Secret), its executor, Events and Leases, and the
policy gate's charts.

Part of the composition root (``gitopsbot.app``): the only package that knows concrete
classes.
"""

from __future__ import annotations

import functools
import os
import platform
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path

from gitopsbot import settings
from gitopsbot.adapters import helm_children
from gitopsbot.adapters import tools as tool_lookup
from gitopsbot.adapters.builtin_policies import (  # re-exported: plan, validate
    builtin_policy_documents as builtin_policy_documents,
)
from gitopsbot.adapters.chart_provenance import SignedCharts, check_keyrings
from gitopsbot.adapters.chartrepo import HttpChartSource, LocalChartSource
from gitopsbot.adapters.chat_notifier import SecretMemory
from gitopsbot.adapters.cluster_access import ClusterAccess, Connection, ServiceAccountFiles
from gitopsbot.adapters.helm import HelmCli
from gitopsbot.adapters.helm_storage import HelmStorage
from gitopsbot.adapters.kube import KubeCluster, RetryPolicy
from gitopsbot.adapters.kube_events import KubeEvents
from gitopsbot.adapters.kubectl import KubectlCrdApplier
from gitopsbot.adapters.leases import KubeLeases
from gitopsbot.adapters.metrics_server import MetricsServer as MetricsServer  # re-exported: run
from gitopsbot.adapters.oci_charts import ChartSources, OciChartSource
from gitopsbot.adapters.oci_registry import RegistryApi, RegistryLogin, RegistryLogins
from gitopsbot.adapters.prometheus import from_endpoint as prometheus_client
from gitopsbot.adapters.secrets import SecretResolver
from gitopsbot.adapters.webhooks import WebhookReceiver as WebhookReceiver  # re-exported: run
from gitopsbot.app.options import RunOptions
from gitopsbot.bot.apply_gate import ApplyGate
from gitopsbot.bot.event_recorder import EventRecorder
from gitopsbot.bot.reviewed_chart import ReviewedCharts
from gitopsbot.bot.steps.executor import Executor
from gitopsbot.core.fleet.model import BotSettings, ChartKeyring, ClusterSpec
from gitopsbot.fleetrepo import load_cluster, policy_documents
from gitopsbot.ports.charts import ChartArchives, ChartSource, ManifestRenderer
from gitopsbot.ports.cluster import Cluster
from gitopsbot.ports.leases import Leases
from gitopsbot.ports.repo import Repo


def kube_context_source(spec: ClusterSpec) -> str:
    """Where the cluster's kube context is chosen, for messages: the release.yaml line."""
    where = spec.locations.get("release.yaml:kubeContext")
    if where is not None:
        return f"{where.file}:{where.line}: kubeContext"
    return f"clusters/{spec.name}/release.yaml: kubeContext not set"


def resolve_tools(options: RunOptions) -> tool_lookup.ToolSet:
    """helm and kubectl for this run, located and version-checked (a ConfigError says where
    the bot looked); docs/cluster-access.md."""
    return tool_lookup.resolve(
        helm=options.helm,
        kubectl=options.kubectl,
        helm_env=settings.tool_path("helm"),
        kubectl_env=settings.tool_path("kubectl"),
        download=options.download_binaries,
        cache=options.cache,
    )


def cluster_access(options: RunOptions) -> ClusterAccess:
    """How each cluster is reached: kubeContext, in-cluster, kubeconfigSecret."""
    return ClusterAccess(
        # As kubectl and helm: --kubeconfig, else KUBECONFIG, else ~/.kube/config.
        kubeconfig=options.kubeconfig or settings.kubeconfig(),
        in_cluster=options.in_cluster,
        service_account=ServiceAccountFiles(settings.service_account_dir()),
        service=settings.in_cluster_service(),
    )


def executor_factory(
    options: RunOptions,
    tools: tool_lookup.ToolSet | None = None,
    access: ClusterAccess | None = None,
    secret_memory: SecretMemory | None = None,
    archives: ChartArchives | None = None,
    registries: RegistryLogins | None = None,
) -> Callable[[ClusterSpec], Executor]:
    """One Cluster and Helm adapter per cluster, built on first use (``tools`` and
    ``access`` default to ``resolve_tools`` and ``cluster_access`` of the options). helm
    reads releases from Helm's storage through the API (``HelmStorage``, docs/helm.md) and
    logs in to OCI chart registries with ``registries`` (``registry_logins``)."""
    built: dict[str, Executor] = {}
    found: list[tool_lookup.ToolSet] = [tools] if tools is not None else []
    reach = access if access is not None else cluster_access(options)

    def make(spec: ClusterSpec) -> Executor:
        if spec.name not in built:
            if not found:  # resolved on first use: a pass that only reads Git needs none
                found.append(resolve_tools(options))
            connection = cluster_connection(reach, spec)
            home = options.cache / "clusters" / spec.name
            applier = KubectlCrdApplier(
                found[0].kubectl, home=home / "kubectl",
                kubeconfig=connection.kubeconfig, kube_context=connection.context,
            )  # fmt: skip
            cluster = KubeCluster(connection.api_client(), crd_applier=applier.apply_crds)
            # Releases are read from Helm's Secrets over the same connection, no helm process
            # (#13). Its own client retries nothing: HelmCli's budget is the one, as for helm.
            storage = KubeCluster(connection.api_client(), retry=RetryPolicy(attempts=1))
            helm = HelmCli(
                found[0].helm, home=home / "helm",
                kubeconfig=connection.kubeconfig, kube_context=connection.context,
                releases=HelmStorage(storage), registries=registries,
            )  # fmt: skip
            secrets = SecretResolver(cluster, default_namespace=spec.release.namespace)
            if secret_memory is not None:  # notifications mask what was resolved
                secrets = secret_memory.recording(spec.name, secrets)  # type: ignore[assignment]
            built[spec.name] = Executor(
                cluster=cluster,
                helm=helm,
                secrets=secrets,
                # the bearer token comes from the bot's environment, named by tokenEnv
                prometheus=lambda endpoint: prometheus_client(endpoint, os.environ),
                archives=archives,
            )
        return built[spec.name]

    return make


@contextmanager
def live_cluster(
    kubeconfig: str, spec: ClusterSpec, context: str | None = None
) -> Iterator[Cluster]:
    """A read of ``spec``'s cluster through ``kubeconfig`` (its context ``context``, else the
    cluster's kubeContext), closed on leaving: ``rehearse --kubeconfig`` counts its nodes."""
    access = cluster_access(RunOptions(fleet_url="", kubeconfig=kubeconfig))
    try:
        conn = access.connect(
            kube_context=spec.release.kube_context if context is None else context,
            kubeconfig_secret=None,
            context_source="--context" if context is not None else kube_context_source(spec),
            cluster=spec.name,
        )
        yield KubeCluster(conn.api_client(), retry=RetryPolicy(attempts=1))
    finally:
        access.close()


def cluster_connection(reach: ClusterAccess, spec: ClusterSpec) -> Connection:
    """How the bot reaches ``spec``'s cluster: its kubeContext, in-cluster, kubeconfigSecret."""
    return reach.connect(
        kube_context=spec.release.kube_context,
        kubeconfig_secret=spec.release.kubeconfig_secret,
        context_source=kube_context_source(spec),
        cluster=spec.name,
    )


def event_recorder(
    reach: ClusterAccess,
    spec_at: Callable[[str, str], ClusterSpec | None],
    *,
    instance: str,
    now: Callable[[], datetime],
    secrets_for: Callable[[str], Iterable[str]] = lambda _cluster: (),
) -> EventRecorder:
    """Kubernetes Events of every happening on the cluster's TensorFusionCluster and GPUPools
    (docs/events.md), through one client per cluster over the same connection as its
    KubeCluster; ``spec_at(sha, cluster)`` names the objects, ``instance`` is the replica,
    ``secrets_for(cluster)`` what every note masks."""
    built: dict[str, KubeEvents] = {}  # only the recorder's thread asks

    def events_for(spec: ClusterSpec) -> KubeEvents:
        if spec.name not in built:
            api = cluster_connection(reach, spec).api_client()
            masked = functools.partial(secrets_for, spec.name)
            built[spec.name] = KubeEvents(api, instance=instance, secrets=masked)
        return built[spec.name]

    return EventRecorder(lambda cluster, sha: spec_at(sha, cluster), events_for, now=now)


def chart_source(
    cache: Path,
    *,
    helm: Callable[[], Path] | None = None,
    registries: RegistryLogins | None = None,
    keyrings: tuple[ChartKeyring, ...] = (),
    paths: Sequence[Path] = (),
) -> ChartSource:
    """Where the apply-time gate reads charts: ``GITOPSBOT_CHARTS`` (local chart
    directories, for an air-gapped bot) or each release's repository: over HTTP, or an OCI
    registry through ``helm`` (asked for on the first ``oci://`` chart; default: helm as
    ``run`` finds it) with the ``registries`` logins (``registry_logins``). With
    ``keyrings`` (``chart_keyrings``), each archive fetched is verified with ``helm verify``
    where an entry covers its repository (``adapters.chart_provenance``). ``paths``: local
    charts instead (``--chart-dir``), before ``GITOPSBOT_CHARTS``."""
    logins = registries if registries is not None else RegistryLogins()

    def helm_cli(home: str) -> HelmCli:
        binary = helm() if helm is not None else resolve_tools(RunOptions(fleet_url="")).helm
        return HelmCli(binary, home=cache / home, registries=logins)

    def oci() -> OciChartSource:
        archives = cache / "oci-archives"
        return OciChartSource(lambda: helm_cli("oci-helm"), RegistryApi(logins), archives)

    local = list(paths) or settings.chart_paths()
    source: ChartSource = (
        LocalChartSource(local) if local else ChartSources(HttpChartSource(cache_dir=cache), oci)
    )
    if keyrings:
        return SignedCharts(source, keyrings, lambda: helm_cli("verify-helm"))
    return source


def chart_keyrings(bot_settings: BotSettings) -> tuple[ChartKeyring, ...]:
    """gitopsbot.yaml's ``chartKeyrings``, each keyring checked now: a missing file or a
    private key stops the start, naming the entry."""
    check_keyrings(bot_settings.chart_keyrings)
    return bot_settings.chart_keyrings


def registry_logins(bot_settings: BotSettings) -> RegistryLogins:
    """The logins of gitopsbot.yaml's ``chartRegistries``, their passwords read now from
    the bot's environment or files (an unset one stops the start, naming the entry)."""
    resolver = SecretResolver()
    return RegistryLogins(
        RegistryLogin(
            host=entry.host,
            username=entry.username,
            password=resolver.resolve(entry.password) if entry.password is not None else "",
            plain_http=entry.plain_http,
            where=f"chartRegistries[{i}] (host {entry.host})",
        )
        for i, entry in enumerate(bot_settings.chart_registries)
    )


def apply_gate(
    repo: Repo,
    charts: ChartSource,
    *,
    renderer: ManifestRenderer | None = None,
    state_branch: str = "",
) -> ApplyGate:
    """The policy gate every operation passes before its first step: the built-in rules and
    the fleet's ``policies/`` at the operation's commit (docs/policies.md); with
    ``state_branch``, the chart it admits is the one the plan recorded (docs/plan.md,
    "Digests")."""
    reviewed = None
    if state_branch and isinstance(charts, ChartArchives):
        reviewed = ReviewedCharts(charts, renderer, repo=repo, state_branch=state_branch)
    return ApplyGate(
        charts,
        builtin_documents=builtin_policy_documents(),
        policies_at=lambda sha: policy_documents(repo.tree(sha)),
        spec_at=lambda sha, name: load_cluster(repo.tree(sha), name),
        reviewed=reviewed,
    )


def renderer(helm: Path, cache: Path) -> HelmCli:
    """helm for ``helm template`` only (the manifests' digest): its own home, no cluster."""
    return HelmCli(helm, home=cache / "render")


def replica_identity(base: str = "") -> str:
    """This process's Lease identity: ``base`` (``--identity``), else $POD_NAME, else the host
    name; plus a random suffix, so a restarted pod never takes its predecessor's Leases for
    its own."""
    base = base or settings.pod_name() or platform.node() or "gitopsbot"
    return f"{base}-{uuid.uuid4().hex[:6]}"


def lease_client(options: RunOptions, access: ClusterAccess | None = None) -> Leases:
    """The Leases client of the management cluster: ``--leases-kubeconfig``, else in a pod
    (or ``--in-cluster``) the pod's ServiceAccount (docs/cluster-access.md), else the run's
    ``--kubeconfig`` (else KUBECONFIG, else ~/.kube/config)."""
    if not options.leases_kubeconfig:
        reach = access if access is not None else cluster_access(options)
        if reach.uses_in_cluster():
            return KubeLeases(reach.home().api_client())
    path = options.leases_kubeconfig or options.kubeconfig or settings.kubeconfig()
    return KubeLeases.from_kubeconfig(path or str(Path.home() / ".kube" / "config"))


def helm_stopper(cache: Path, grace: float = 3.0) -> Callable[[str], None]:
    """What a replica does when it loses a cluster's Lease with a step in flight: SIGTERM the
    cluster's helm (it cancels and records the revision ``failed``; the next holder upgrades
    again, docs/executor.md "Crash safety of the helm step")."""

    def stop(cluster: str) -> None:
        helm_children.terminate_under(cache / "clusters" / cluster / "helm" / "run", grace)

    return stop
