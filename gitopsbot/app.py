"""Composition root: builds the adapters from the fleet's settings and hands ports to the bot.

The only module that knows every concrete class. ``build_bot`` wires the reconciler for
``gitopsbot run``; ``open_state`` gives ``gitopsbot status`` a read-only view of the state
branch. Tests and the sandbox build the same objects with fakes or emulators instead.
"""

from __future__ import annotations

import functools
import hashlib
import platform
import uuid
import zoneinfo
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from gitopsbot import settings
from gitopsbot.adapters import helm_children
from gitopsbot.adapters import logs as log_output
from gitopsbot.adapters import tools as tool_lookup
from gitopsbot.adapters.builtin_policies import (  # re-exported: plan, validate
    builtin_policy_documents as builtin_policy_documents,
)
from gitopsbot.adapters.chartrepo import HttpChartSource, LocalChartSource
from gitopsbot.adapters.chat_notifier import Notifier, SecretMemory
from gitopsbot.adapters.chat_notifier import from_settings as notifier_from_settings
from gitopsbot.adapters.clock import SystemClock
from gitopsbot.adapters.cluster_access import ClusterAccess, Connection, ServiceAccountFiles
from gitopsbot.adapters.forge._http import ForgeCall
from gitopsbot.adapters.forge.connect import from_settings
from gitopsbot.adapters.forge.provider import as_forge
from gitopsbot.adapters.git import Credentials, GitRepo, GitSettings, HttpsToken, SshKey
from gitopsbot.adapters.gitonly import GitOnlyForge
from gitopsbot.adapters.gitrefs import GitRefTree
from gitopsbot.adapters.helm import HelmCli
from gitopsbot.adapters.kube import KubeCluster
from gitopsbot.adapters.kube_events import KubeEvents
from gitopsbot.adapters.kubectl import KubectlCrdApplier
from gitopsbot.adapters.leases import KubeLeases
from gitopsbot.adapters.localfiles import DirectoryTree
from gitopsbot.adapters.metrics import BotMetrics
from gitopsbot.adapters.metrics_server import MetricsServer as MetricsServer  # re-exported: run
from gitopsbot.adapters.secrets import SecretResolver
from gitopsbot.adapters.webhooks import WebhookReceiver as WebhookReceiver  # re-exported: run
from gitopsbot.bot import log_context
from gitopsbot.bot.announcer import Announcer
from gitopsbot.bot.apply_gate import ApplyGate
from gitopsbot.bot.event_recorder import EventRecorder
from gitopsbot.bot.gauges import PassGauges
from gitopsbot.bot.health import HealthWatch
from gitopsbot.bot.journal_store import JournalStore
from gitopsbot.bot.lease_keeper import LeaseTiming
from gitopsbot.bot.pr_mirror import PullRequestMirror
from gitopsbot.bot.progress_log import ProgressLog
from gitopsbot.bot.proposer import Proposer
from gitopsbot.bot.reconciler import Reconciler
from gitopsbot.bot.scheduler import Scheduler
from gitopsbot.bot.shard_keeper import ShardKeeper
from gitopsbot.bot.shared_repo import SharedRepo
from gitopsbot.bot.steps.executor import Executor
from gitopsbot.core import tool_record
from gitopsbot.core.model import BotSettings, ClusterSpec, Fleet, SecretRef
from gitopsbot.core.webhook_events import EventKind, WebhookEvent
from gitopsbot.errors import ConfigError, GitOpsBotError
from gitopsbot.fleetrepo import find_cluster, load_fleet, policy_documents
from gitopsbot.ports.charts import ChartSource
from gitopsbot.ports.files import FileTree
from gitopsbot.ports.forge import Forge
from gitopsbot.ports.leases import Leases
from gitopsbot.ports.repo import Repo


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
    # helm and kubectl (docs/cluster-access.md): --helm/--kubectl, else GITOPSBOT_HELM/
    # GITOPSBOT_KUBECTL, else the pinned ones if download_binaries, else PATH.
    helm: str = ""
    kubectl: str = ""
    download_binaries: bool = False
    in_cluster: bool = False  # --in-cluster: the pod's ServiceAccount, required
    events: bool = True  # Kubernetes Events of each happening (docs/events.md); --no-events


def fleet_url(*, url: str | None, path: str | None) -> str:
    if url:
        return url
    if path:
        resolved = Path(path).resolve()
        if not (resolved / ".git").exists() and not (resolved / "HEAD").exists():
            raise ConfigError(f"--fleet {path}: not a Git repository (the bot reads commits)")
        return resolved.as_uri()
    raise ConfigError("give --fleet-url URL or --fleet PATH")


# Environment fallbacks: an HTTPS token, and (for the first fetch over SSH, before
# gitopsbot.yaml's ``git.sshKey`` can be read) the path of an SSH private key file.
TOKEN_ENV = "GITOPSBOT_GIT_TOKEN"
SSH_KEY_ENV = "GITOPSBOT_GIT_SSH_KEY"


def is_ssh_url(url: str) -> bool:
    """``ssh://…`` or scp-like ``[user@]host:path`` (no scheme), as git reads a URL."""
    if url.startswith(("ssh://", "git+ssh://", "ssh+git://")):
        return True
    host, colon, _ = url.partition(":")
    return "://" not in url and bool(colon) and len(host) > 1 and "/" not in host


def ssh_key_credentials(
    ref: SecretRef, *, environment: Callable[[str], str | None] = settings.environment_value
) -> SshKey:
    """``git.sshKey`` → SshKey. The ref locates the private key file (``file``: its path;
    ``env``: a variable holding the path); the key is read by libgit2, never by the bot."""
    label = ref.values_path or "git.sshKey"  # "gitopsbot.yaml:LINE: git.sshKey" when loaded
    if ref.source == "file":
        raw = ref.name
    elif ref.source == "env":
        raw = environment(ref.name) or ""
        if not raw:
            raise ConfigError(
                f"{label}: environment variable {ref.name} is not set "
                "(it should hold the path of the SSH private key file)"
            )
    else:
        raise ConfigError(f"{label}: give file: PATH or env: VAR (the key is a file)")
    path = Path(raw).expanduser()
    if not path.is_file():
        raise ConfigError(f"{label}: no SSH private key file at {path}")
    return SshKey(private_key=path)


def git_credentials(url: str, fleet_settings: BotSettings | None = None) -> Credentials | None:
    """Credentials for the fleet remote: over SSH the fleet's ``git.sshKey``, else the key file
    in $GITOPSBOT_GIT_SSH_KEY; over HTTPS the token in $GITOPSBOT_GIT_TOKEN."""
    if is_ssh_url(url):
        if fleet_settings is not None and fleet_settings.git.ssh_key is not None:
            return ssh_key_credentials(fleet_settings.git.ssh_key)
        key = settings.environment_value(SSH_KEY_ENV)
        return SshKey(private_key=Path(key).expanduser()) if key else None
    token = settings.environment_value(TOKEN_ENV)
    return HttpsToken(token) if token else None


def open_repo(url: str, cache: Path, credentials: Credentials | None = None) -> GitRepo:
    """The fleet repository's local mirror, fetched; ``credentials`` default to the
    environment's (see ``git_credentials``)."""
    mirror = cache / "mirrors" / hashlib.sha256(url.encode()).hexdigest()[:16]
    creds = credentials if credentials is not None else git_credentials(url)
    repo = GitRepo(GitSettings(url=url, mirror_dir=mirror, credentials=creds))
    repo.fetch()
    return repo


def read_fleet(repo: GitRepo, branch: str) -> Fleet:
    head = repo.head(branch)
    if head is None:
        raise ConfigError(f"branch {branch!r} not found in the fleet repository")
    return load_fleet(repo.tree(head))


def open_state(url: str, cache: Path | None = None) -> tuple[JournalStore, BotSettings]:
    """A read-only view of the state branch (no push) for ``gitopsbot status``."""
    repo = open_repo(url, cache or settings.cache_dir())
    fleet_settings = BotSettings()
    try:
        fleet_settings = read_fleet(repo, "main").settings
    except ConfigError:
        pass
    return JournalStore(repo, branch=fleet_settings.state_branch, push=False), fleet_settings


def _forge(
    fleet_settings: BotSettings,
    clock: SystemClock,
    observe: Callable[[ForgeCall], None] | None = None,
) -> Forge | None:
    forge = fleet_settings.forge
    if forge.kind == "git-only" or forge.token is None:
        return None
    token = SecretResolver().resolve(forge.token)
    provider = from_settings(forge, token, clock=clock)
    provider.http.observe = observe  # every request, for the metrics
    return as_forge(provider)


def forge_secrets(fleet_settings: BotSettings) -> tuple[str, ...]:
    """The forge token and webhook secret, to be masked in notifications (none when unset
    or unreadable: the forge's own start reports that)."""
    out: list[str] = []
    forge = fleet_settings.forge
    for ref in (forge.token, forge.webhook_secret):
        if forge.kind != "git-only" and ref is not None and ref.source != "kubernetes-secret":
            try:
                out.append(SecretResolver().resolve(ref))
            except GitOpsBotError:
                pass
    return tuple(out)


@dataclass
class Bot:
    reconciler: Reconciler
    scheduler: Scheduler
    clusters: tuple[str, ...]
    settings: BotSettings = field(default_factory=BotSettings)
    mirror: PullRequestMirror | None = None
    shards: ShardKeeper | None = None  # replicas share the fleet (``--leases-namespace``)
    metrics: BotMetrics | None = None  # served by ``metrics_server`` (``--metrics-listen``)
    health: HealthWatch | None = None
    notifier: Notifier | None = None  # chat webhooks (``notifications:``)
    events: EventRecorder | None = None  # Kubernetes Events (docs/events.md)

    def close(self, timeout: float = 30.0) -> None:
        """Post what the pull-request mirror and the notifier still hold (after the
        scheduler stopped)."""
        if self.mirror is not None:
            self.mirror.close(timeout)
        if self.notifier is not None:
            self.notifier.close(min(timeout, 10.0))
        if self.events is not None:
            self.events.close(min(timeout, 5.0))


def webhook_receiver(bot: Bot, listen: str) -> WebhookReceiver:
    """A receiver on ``HOST:PORT`` whose verified deliveries nudge the loop: a push to the
    watched branch or a merged request wakes every cluster's job (a pass that finds nothing
    new is cheap). Polling stays the safety net. With replicas sharing the fleet only the
    clusters this replica holds have jobs, so a nudge wakes only those; another replica's
    clusters are reached by that replica's polling (or its own webhook delivery)."""
    host, _, port = listen.rpartition(":")
    if not port.isdigit():
        raise ConfigError(f"--webhook-listen {listen!r}: expected HOST:PORT")
    forge = bot.settings.forge
    secrets: dict[str, str] = {}
    if forge.kind != "git-only" and forge.webhook_secret is not None:
        secrets[forge.kind] = SecretResolver().resolve(forge.webhook_secret)

    def nudge(event: WebhookEvent) -> None:
        watched = bot.settings.watched_branch
        if (event.kind is EventKind.PUSH and event.branch == watched) or event.merged:
            bot.scheduler.nudge()

    return WebhookReceiver(secrets, nudge, host=host or "127.0.0.1", port=int(port))


def metrics_server(bot: Bot, listen: str) -> MetricsServer:
    """``/metrics``, ``/healthz`` and ``/readyz`` on ``HOST:PORT`` (docs/metrics.md)."""
    host, colon, port = listen.rpartition(":")
    if not colon or not port.isdigit() or bot.metrics is None or bot.health is None:
        raise ConfigError(f"--metrics-listen {listen!r}: expected HOST:PORT")
    return MetricsServer(
        bot.metrics.registry,
        bot.health.alive,
        bot.health.ready,
        host=host.strip("[]") or "0.0.0.0",
        port=int(port),
    )


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
        kubeconfig=options.kubeconfig,
        in_cluster=options.in_cluster,
        service_account=ServiceAccountFiles(settings.service_account_dir()),
        service=settings.in_cluster_service(),
    )


def executor_factory(
    options: RunOptions,
    tools: tool_lookup.ToolSet | None = None,
    access: ClusterAccess | None = None,
    secret_memory: SecretMemory | None = None,
) -> Callable[[ClusterSpec], Executor]:
    """One Cluster and Helm adapter per cluster, built on first use (``tools`` and
    ``access`` default to ``resolve_tools`` and ``cluster_access`` of the options)."""
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
            helm = HelmCli(
                found[0].helm, home=home / "helm",
                kubeconfig=connection.kubeconfig, kube_context=connection.context,
            )  # fmt: skip
            secrets = SecretResolver(cluster, default_namespace=spec.release.namespace)
            if secret_memory is not None:  # notifications mask what was resolved
                secrets = secret_memory.recording(spec.name, secrets)  # type: ignore[assignment]
            built[spec.name] = Executor(cluster=cluster, helm=helm, secrets=secrets)
        return built[spec.name]

    return make


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


def chart_source(cache: Path) -> ChartSource:
    """Where the apply-time gate reads charts: ``GITOPSBOT_CHARTS`` (local chart
    directories, for an air-gapped bot) or each release's repository over HTTP."""
    paths = settings.chart_paths()
    if paths:
        return LocalChartSource(paths)
    return HttpChartSource(cache_dir=cache)


def apply_gate(repo: Repo, charts: ChartSource) -> ApplyGate:
    """The policy gate every operation passes before its first step: the built-in rules and
    the fleet's ``policies/`` at the operation's commit (docs/policies.md)."""
    return ApplyGate(
        charts,
        builtin_documents=builtin_policy_documents(),
        policies_at=lambda sha: policy_documents(repo.tree(sha)),
    )


def replica_identity(base: str = "") -> str:
    """This process's Lease identity: ``base`` (``--identity``), else $POD_NAME, else the host
    name; plus a random suffix, so a restarted pod never takes its predecessor's Leases for
    its own."""
    base = base or settings.pod_name() or platform.node() or "gitopsbot"
    return f"{base}-{uuid.uuid4().hex[:6]}"


def lease_client(options: RunOptions, access: ClusterAccess | None = None) -> Leases:
    """The Leases client of the management cluster: ``--leases-kubeconfig``, else in a pod
    (or ``--in-cluster``) the pod's ServiceAccount (docs/cluster-access.md), else the run's
    ``--kubeconfig`` (else ~/.kube/config)."""
    if not options.leases_kubeconfig:
        reach = access if access is not None else cluster_access(options)
        if reach.uses_in_cluster():
            return KubeLeases(reach.home().api_client())
    path = options.leases_kubeconfig or options.kubeconfig
    return KubeLeases.from_kubeconfig(path or str(Path.home() / ".kube" / "config"))


def helm_stopper(cache: Path, grace: float = 3.0) -> Callable[[str], None]:
    """What a replica does when it loses a cluster's Lease with a step in flight: SIGTERM the
    cluster's helm (it cancels and records the revision ``failed``; the next holder upgrades
    again, docs/executor.md "Crash safety of the helm step")."""

    def stop(cluster: str) -> None:
        helm_children.terminate_under(cache / "clusters" / cluster / "helm" / "run", grace)

    return stop


def build_bot(options: RunOptions) -> Bot:
    clock = SystemClock()
    git_repo = open_repo(options.fleet_url, options.cache)
    fleet = read_fleet(git_repo, options.branch)
    bot_settings = fleet.settings
    configured = git_credentials(options.fleet_url, bot_settings)
    if configured != git_credentials(options.fleet_url):
        # gitopsbot.yaml names the key to use from now on (git.sshKey): fetch and push with it.
        git_repo = open_repo(options.fleet_url, options.cache, configured)
    # Passes of different clusters run side by side; their Git work is serialised.
    repo = SharedRepo(git_repo)
    unknown = sorted(set(options.clusters) - set(fleet.clusters))
    if unknown:
        raise ConfigError(f"--cluster {', '.join(unknown)}: not in the fleet")
    clusters = options.clusters or tuple(sorted(fleet.clusters))
    shards = None
    if options.leases_namespace:
        shards = ShardKeeper(
            lease_client(options),
            namespace=options.leases_namespace,
            identity=replica_identity(options.identity),
            clock=clock,
            clusters=clusters,
            timing=options.lease_timing,
        )
    metrics = BotMetrics(clock)  # a registry of its own (docs/metrics.md)
    forge = _forge(bot_settings, clock, metrics.forge_call)
    # helm and kubectl now: a missing one is exit 1 at start, not a failure at the first apply.
    tools = resolve_tools(options)
    store = JournalStore(repo, branch=bot_settings.state_branch, push=options.push)
    store.record_tools(tool_record.of({**tools.versions(), **tools.paths()}))  # for `status`
    # Forge writes are paced: posted from their own thread, passes never wait on them.
    mirror = PullRequestMirror(forge) if forge is not None else None
    # Chat webhooks (docs/notifications.md): URLs read now, so a bad one stops the start.
    memory = SecretMemory()
    notifier = notifier_from_settings(
        bot_settings,
        SecretResolver(),
        secrets_for=memory.values,
        secrets=forge_secrets(bot_settings),
    )
    # What each recorded transition and pass means, told to listeners: the log's progress
    # lines here; Events, notifications and metrics add theirs to the same announcer.
    progress = ProgressLog()
    announcer = Announcer([progress], [progress])
    reconciler = Reconciler(
        repo=repo,
        store=store,
        executor_for=executor_factory(options, tools, cluster_access(options), memory),
        gate=apply_gate(repo, chart_source(options.cache)),
        clock=clock,
        load_fleet=load_fleet,
        load_cluster=find_cluster,
        resolve_tz=zoneinfo.ZoneInfo,
        settings=bot_settings,
        forge=forge,
        push=options.push,
        publish=mirror.publish if mirror is not None else None,
        may_act=shards.held if shards is not None else None,
        announcer=announcer,
    )
    scheduler = Scheduler(
        reconcile=reconciler.reconcile if shards is None else shards.guarded(reconciler.reconcile),
        clock=clock,
        interval_seconds=bot_settings.poll_interval_seconds,
        jitter_seconds=max(1, bot_settings.poll_interval_seconds // 10),
        workers=max(1, options.workers),
    )
    health = HealthWatch(
        scheduler,
        clock,
        poll_interval_seconds=bot_settings.poll_interval_seconds,
        leases_running=(lambda: shards.running) if shards is not None else None,
        holding=(lambda: len(shards.holding)) if shards is not None else None,
    )
    reconciler.announcer.listeners.append(metrics)
    if notifier is not None:
        reconciler.announcer.listeners.append(notifier)
    reconciler.announcer.pass_listeners.extend([metrics, health, PassGauges(reconciler, metrics)])
    events = None
    if options.events:
        instance = shards.identity if shards is not None else replica_identity(options.identity)
        forge_masked = forge_secrets(bot_settings)
        events = event_recorder(
            cluster_access(options), reconciler.spec_at, instance=instance, now=clock.now,
            secrets_for=lambda cluster: (*memory.values(cluster), *forge_masked),
        )  # fmt: skip
        reconciler.announcer.listeners.append(events)
    if shards is not None:
        keeper = shards
        metrics.watch_leases(lambda: clusters, keeper.held, lambda: len(keeper.members))

        def jobs_for(held: frozenset[str]) -> None:  # a job only for the clusters held
            if not scheduler.stopping:  # none added or removed once shutting down
                scheduler.set_clusters(held)

        shards.on_change = jobs_for
        shards.on_lost = helm_stopper(options.cache)
    return Bot(
        reconciler, scheduler, clusters, bot_settings, mirror, shards,
        metrics=metrics, health=health, notifier=notifier, events=events,
    )  # fmt: skip


# -- plan, validate, propose, comment -------------------------------------------------------


def chart_source_for(chart_dirs: Sequence[Path]) -> ChartSource:
    """Charts for ``plan``/``validate``/``propose``: ``--chart-dir`` paths, else
    ``GITOPSBOT_CHARTS``, else each release's repository over HTTP."""
    paths = list(chart_dirs) or settings.chart_paths()
    if paths:
        return LocalChartSource(paths)
    return HttpChartSource(cache_dir=settings.cache_dir())


def fleet_tree(fleet: Path, ref: str | None = None) -> FileTree:
    """The fleet's files: at ``ref`` of the repository at ``fleet``, or the directory as is."""
    return GitRefTree(fleet, ref) if ref else DirectoryTree(fleet)


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
    return as_forge(from_settings(forge, token, clock=SystemClock()))


def proposal_wiring(url: str, branch: str, *, git_only: bool) -> ProposalWiring:
    """Mirror the fleet repository, read its settings, and connect the forge."""
    cache = settings.cache_dir()
    first = open_repo(url, cache)  # fetches; the settings name the author to commit as
    fleet_settings = read_fleet(first, branch).settings
    repo = GitRepo(
        GitSettings(
            url=url,
            mirror_dir=cache / "mirrors" / hashlib.sha256(url.encode()).hexdigest()[:16],
            credentials=git_credentials(url, fleet_settings),
            author_name=fleet_settings.author_name,
            author_email=fleet_settings.author_email,
        )
    )
    return ProposalWiring(repo, open_forge(fleet_settings, repo, git_only=git_only), fleet_settings)


def proposer(wiring: ProposalWiring, branch: str, chart_dirs: Sequence[Path]) -> Proposer:
    """A proposer with a fresh chart source (HTTP sources keep an index for their lifetime,
    so each pass gets its own to see new versions)."""
    return Proposer(
        wiring.repo,
        wiring.forge,
        chart_source_for(chart_dirs),
        watched_branch=branch,
        policy_documents=builtin_policy_documents(),
    )


# -- logging ---------------------------------------------------------------------------------


def configure_logging(
    fmt: str, *, root_level: int, levels: dict[str, int] | None = None
) -> Callable[[], None] | None:
    """Log lines in ``fmt`` (``text``/``json``) to standard error, each naming the cluster,
    operation and step of the pass that emitted it (docs/logging.md). None when the embedding
    program configured logging already; else how to undo it."""
    return log_output.configure(
        fmt, root_level=root_level, levels=levels, filters=[log_context.RecordFields()]
    )
