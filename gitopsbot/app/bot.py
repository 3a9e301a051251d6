"""The long-running bot: ``build_bot`` wires the reconciler, scheduler, Leases, the
announcer's listeners (progress log, metrics, notifications, Events) and the forge; the
webhook and metrics endpoints; logging.

Part of the composition root (``gitopsbot.app``): the only package that knows concrete
classes.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import zoneinfo
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from gitopsbot.adapters import tools as tool_lookup
from gitopsbot.adapters.builtin_policies import builtin_policy_documents
from gitopsbot.adapters.chat_notifier import Notifier, SecretMemory
from gitopsbot.adapters.chat_notifier import from_settings as notifier_from_settings
from gitopsbot.adapters.clock import SystemClock
from gitopsbot.adapters.cluster_access import ClusterAccess
from gitopsbot.adapters.forge.connect import connect
from gitopsbot.adapters.gitonly import GitOnlyForge
from gitopsbot.adapters.metrics import BotMetrics
from gitopsbot.adapters.metrics_server import MetricsServer as MetricsServer  # re-exported: run
from gitopsbot.adapters.oci_registry import RegistryLogins
from gitopsbot.adapters.release_watch import ReleaseWatches
from gitopsbot.adapters.secrets import SecretResolver
from gitopsbot.adapters.terminal import LiveScreen
from gitopsbot.adapters.webhooks import WebhookReceiver as WebhookReceiver  # re-exported: run
from gitopsbot.app.clusters import (
    apply_gate,
    chart_keyrings,
    chart_source,
    cluster_access,
    cluster_connection,
    event_recorder,
    executor_factory,
    helm_stopper,
    lease_client,
    registry_logins,
    renderer,
    replica_identity,
    resolve_tools,
)
from gitopsbot.app.drift import drift_watch
from gitopsbot.app.fleet_page import fleet_pages
from gitopsbot.app.forge_access import connect_forge
from gitopsbot.app.git_access import git_credentials, open_repo, read_fleet
from gitopsbot.app.options import RunOptions
from gitopsbot.bot.announcer import Announcer
from gitopsbot.bot.drift_watch import DriftWatch
from gitopsbot.bot.event_recorder import EventRecorder
from gitopsbot.bot.gauges import PassGauges
from gitopsbot.bot.health import HealthWatch
from gitopsbot.bot.journal_store import JournalStore
from gitopsbot.bot.live_board import LiveBoard
from gitopsbot.bot.pass_base import PassResult
from gitopsbot.bot.pr_mirror import PullRequestMirror
from gitopsbot.bot.progress_log import ProgressLog
from gitopsbot.bot.proposal_report import PassReport
from gitopsbot.bot.proposal_watch import ProposalWatch
from gitopsbot.bot.proposer import Proposer
from gitopsbot.bot.push_router import PushRouter
from gitopsbot.bot.reconciler import Reconciler
from gitopsbot.bot.scheduler import Scheduler
from gitopsbot.bot.shard_keeper import ShardKeeper
from gitopsbot.bot.shared_repo import SharedRepo
from gitopsbot.core.fleet.model import BotSettings
from gitopsbot.core.forge.webhook_events import EventKind, WebhookEvent
from gitopsbot.core.records import tool_record
from gitopsbot.errors import ConfigError, GitOpsBotError
from gitopsbot.fleetrepo import find_cluster, load_fleet
from gitopsbot.ports.charts import ChartArchives, ChartSource
from gitopsbot.ports.clock import Clock
from gitopsbot.ports.forge import Forge
from gitopsbot.ports.repo import Repo


def forge_secrets(fleet_settings: BotSettings) -> tuple[str, ...]:
    """The forge token (or GitHub App key) and webhook secret, to be masked in notifications
    (none when unset or unreadable: the forge's own start reports that)."""
    out: list[str] = []
    forge = fleet_settings.forge
    key = forge.app.private_key if forge.app is not None else None
    for ref in (forge.token, forge.webhook_secret, key):
        if forge.kind != "git-only" and ref is not None and ref.source != "kubernetes-secret":
            try:
                out.append(SecretResolver().resolve(ref))
            except GitOpsBotError:
                pass
    return tuple(out)


def masked_secrets(fleet_settings: BotSettings, registries: RegistryLogins) -> tuple[str, ...]:
    """What every notification and Kubernetes Event masks, whatever the cluster: the forge's
    secrets and the ``chartRegistries`` passwords (a helm or registry error may quote a
    login, and helm's own masking does not reach a step detail posted to a chat)."""
    return (*forge_secrets(fleet_settings), *registries.secrets())


log = logging.getLogger(__name__)


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
    drift: DriftWatch | None = None  # drift checks on a schedule (docs/drift.md)
    proposals: ProposalWatch | None = None  # proposal passes on a schedule (docs/proposals.md)
    router: PushRouter | None = None  # a webhook's push wakes the clusters it touched
    release_watches: ReleaseWatches | None = None  # idle releases watched (docs/executor.md)

    def watch_releases(self) -> None:
        """From now on idle clusters' releases are watched, not only looked at every minute
        (docs/executor.md "The idle check"); not for ``--once``, which stops when idle."""
        self.reconciler.release_watch = self.release_watches

    def flush(self) -> None:
        """Push the state-branch records still waiting in the mirror (after the scheduler
        stopped, before the Leases go: still as their holder)."""
        try:
            self.reconciler.store.flush()
        except GitOpsBotError as e:
            log.warning("state branch push at stop: %s", e)

    def close(self, timeout: float = 30.0) -> None:
        """Post what the pull-request mirror and the notifier still hold (after the
        scheduler stopped)."""
        if self.drift is not None:
            self.drift.close(min(timeout, 10.0))
        if self.proposals is not None:
            self.proposals.close(min(timeout, 10.0))
        if self.router is not None:
            self.router.close()
        if self.release_watches is not None:
            self.release_watches.close()
        close_posters(self.mirror, self.notifier, self.events, timeout)


def webhook_receiver(bot: Bot, listen: str) -> WebhookReceiver:
    """A receiver on ``HOST:PORT`` whose verified deliveries nudge the loop: a push to the
    watched branch or a merged request wakes the jobs of the clusters it touched, every
    cluster's when that cannot be told (``bot.push_router``). Polling stays the safety net.
    With replicas sharing the fleet only the clusters this replica holds have jobs, so a nudge
    wakes only those; another replica's clusters are reached by that replica's polling (or
    its own webhook delivery)."""
    host, _, port = listen.rpartition(":")
    if not port.isdigit():
        raise ConfigError(f"--webhook-listen {listen!r}: expected HOST:PORT")
    forge = bot.settings.forge
    secrets: dict[str, str] = {}
    if forge.kind != "git-only" and forge.webhook_secret is not None:
        secrets[forge.kind] = SecretResolver().resolve(forge.webhook_secret)

    router = bot.router
    if router is None:  # a Bot built without the fleet poll (tests): routing of its own
        router = bot.router = push_router(bot.reconciler.repo, bot)

    def nudge(event: WebhookEvent) -> None:
        watched = bot.settings.watched_branch
        if (event.kind is EventKind.PUSH and event.branch == watched) or event.merged:
            router.push()  # the clusters the push touched (bot.push_router)

    return receiver(secrets, nudge, host=host or "127.0.0.1", port=int(port))


def metrics_server(bot: Bot, listen: str, *, fleet_page: bool = False) -> MetricsServer:
    """``/metrics``, ``/healthz`` and ``/readyz`` on ``HOST:PORT`` (docs/metrics.md); with
    ``fleet_page``, the read-only fleet page under ``/fleet`` (docs/fleet-page.md)."""
    host, colon, port = listen.rpartition(":")
    if not colon or not port.isdigit() or bot.metrics is None or bot.health is None:
        raise ConfigError(f"--metrics-listen {listen!r}: expected HOST:PORT")
    return MetricsServer(
        bot.metrics.registry,
        bot.health.alive,
        bot.health.ready,
        host=host.strip("[]") or "0.0.0.0",
        port=int(port),
        fleet=fleet_pages(bot.reconciler, bot.settings.watched_branch) if fleet_page else None,
        # Page requests waiting on a read of a large fleet must not take the threads the
        # probes and Prometheus need: two more threads with the page.
        threads=4 if fleet_page else 2,
    )


def push_router(repo: Repo, bot: Bot, poll_seconds: float | None = None) -> PushRouter:
    """Routing of pushes to the clusters they touched, for webhooks and the fleet poll
    (``bot.push_router``); ``poll_seconds``: the poll's fetch serves that long (half an
    interval)."""
    shared = repo if isinstance(repo, SharedRepo) else None
    poll_fetch = None
    if shared is not None and poll_seconds is not None:
        poll_fetch = functools.partial(shared.fetch, fresh_seconds=poll_seconds)
    return PushRouter(
        repo,
        invalidate=shared.invalidate if shared is not None else None,
        poll_fetch=poll_fetch,
        watched=lambda: bot.settings.watched_branch,
        clusters=lambda: bot.clusters,
        nudge=bot.scheduler.nudge,
        answered=bot.health.fleet_polled if bot.health is not None else None,
    )


def close_posters(
    mirror: PullRequestMirror | None,
    notifier: Notifier | None,
    events: EventRecorder | None,
    timeout: float,
) -> None:
    """Post what the pull-request mirror, the notifier and the Events recorder still hold
    and stop their threads (chat and Events wait less: their posts are not records)."""
    if mirror is not None:
        mirror.close(timeout)
    if notifier is not None:
        notifier.close(min(timeout, 10.0))
    if events is not None:
        events.close(min(timeout, 5.0))


@dataclass
class Wired:
    """A reconciler and what posts for it from threads of its own (closed by ``Bot.close``)."""

    reconciler: Reconciler
    mirror: PullRequestMirror | None
    notifier: Notifier | None
    events: EventRecorder | None

    def close(self, timeout: float = 30.0) -> None:
        close_posters(self.mirror, self.notifier, self.events, timeout)


@contextlib.contextmanager
def live_view(reconciler: Reconciler, out: TextIO) -> Iterator[None]:
    """``run`` (and the demo) on a terminal: the operations ``reconciler`` drives, redrawn in
    place at the bottom of ``out`` (``bot.live_board``), while what the process prints to
    standard output and error scrolls above."""
    with LiveScreen(out, below_output=True) as screen:
        announcer = reconciler.announcer
        board = LiveBoard(announcer.latest, screen, reconciler.clock)
        board.start()
        announcer.listeners.append(board)  # drawn after each transition, not only each second
        try:
            yield
        finally:
            announcer.listeners.remove(board)
            board.stop()


def wire_reconciler(
    options: RunOptions,
    *,
    repo: Repo,
    store: JournalStore,
    bot_settings: BotSettings,
    clock: Clock,
    tools: tool_lookup.ToolSet,
    forge: Forge | None,
    charts: ChartSource,
    access: ClusterAccess,
    instance: str,
    metrics: BotMetrics | None = None,
    may_act: Callable[[str], bool] | None = None,
) -> Wired:
    """The reconciler of ``gitopsbot run`` and of the sandbox's in-process bot alike: each
    cluster's executor over ``access``, the policy gate over ``charts``, the pull-request
    mirror, and the announcer's listeners (progress log, metrics, chat notifications,
    Kubernetes Events as ``instance``)."""
    # Forge writes are paced: posted from their own thread, passes never wait on them.
    mirror = PullRequestMirror(forge) if forge is not None else None
    # Chat webhooks (docs/notifications.md): URLs read now, so a bad one stops the start.
    memory = SecretMemory()
    registries = registry_logins(bot_settings)
    forge_masked = masked_secrets(bot_settings, registries)
    notifier = notifier_from_settings(
        bot_settings, SecretResolver(), secrets_for=memory.values, secrets=forge_masked
    )
    # What each recorded transition and pass means, told to listeners: the log's progress
    # lines, metrics, notifications and Events.
    progress = ProgressLog()
    announcer = Announcer([progress], [progress])
    reconciler = Reconciler(
        repo=repo,
        store=store,
        executor_for=executor_factory(
            options,
            tools,
            access,
            memory,
            archives=charts if isinstance(charts, ChartArchives) else None,
            registries=registries,
        ),
        gate=apply_gate(
            repo,
            charts,
            renderer=renderer(tools.helm, options.cache),
            state_branch=bot_settings.state_branch,
        ),
        clock=clock,
        load_fleet=load_fleet,
        load_cluster=find_cluster,
        resolve_tz=zoneinfo.ZoneInfo,
        settings=bot_settings,
        forge=forge,
        push=options.push,
        publish=mirror.publish if mirror is not None else None,
        may_act=may_act,
        announcer=announcer,
    )
    if metrics is not None:
        announcer.listeners.append(metrics)
        announcer.pass_listeners.extend([metrics, PassGauges(reconciler, metrics)])
    if notifier is not None:
        announcer.listeners.append(notifier)
    events = None
    if options.events:
        events = event_recorder(
            access, reconciler.spec_at, instance=instance, now=clock.now,
            secrets_for=lambda cluster: (*memory.values(cluster), *forge_masked),
        )  # fmt: skip
        announcer.listeners.append(events)
    return Wired(reconciler, mirror, notifier, events)


def loop(
    reconcile: Callable[[str], PassResult],
    *,
    clock: Clock,
    interval_seconds: int,
    jitter_seconds: int,
    workers: int,
    soonest_seconds: float = 0.5,
    follow_up: Callable[[str], PassResult] | None = None,
    poll: Callable[[], None] | None = None,
) -> Scheduler:
    """The long-running loop: ``workers`` threads taking due clusters from a fair queue
    (docs/executor.md). ``follow_up``: the pass run when the previous one asked to come back
    at once, no webhook since (no fetch). ``poll``: the fleet poll, every interval; given,
    idle clusters rest (docs/decisions.md#resting-clusters)."""
    return Scheduler(
        reconcile=reconcile,
        follow_up=follow_up,
        poll=poll,
        clock=clock,
        interval_seconds=interval_seconds,
        jitter_seconds=jitter_seconds,
        workers=workers,
        soonest_seconds=soonest_seconds,
    )


def release_watches(access: ClusterAccess, nudge: Callable[[str], None]) -> ReleaseWatches:
    """Idle clusters' releases watched over each cluster's own connection, all on one
    event-loop thread; a change runs the cluster's pass now (``nudge``; docs/executor.md
    "The idle check"). Given to the reconciler by ``Bot.watch_releases``."""
    return ReleaseWatches(
        lambda spec: cluster_connection(access, spec).configuration, on_change=nudge
    )


def receiver(
    secrets: Mapping[str, str],
    nudge: Callable[[WebhookEvent], None],
    *,
    host: str = "127.0.0.1",
    port: int = 0,
) -> WebhookReceiver:
    """Forge webhooks at ``POST /webhooks/<provider>``, verified with ``secrets`` (provider →
    secret); each verified delivery is handed to ``nudge``."""
    return WebhookReceiver(dict(secrets), nudge, host=host, port=port)


def forge_client(
    kind: str,
    *,
    url: str,
    repository: str,
    token: str,
    closers: list[Callable[[], None]] | None = None,
) -> Forge:
    """A forge provider (``github``, ``gitlab``, ``gitea``) at ``url`` for ``repository``;
    its HTTP client's ``close`` goes to ``closers``."""
    provider = connect(kind, url=url, repository=repository, token=token, clock=SystemClock())
    if closers is not None:
        closers.append(provider.http.close)
    return provider


def build_bot(options: RunOptions) -> Bot:
    clock = SystemClock()
    first = git_credentials(options.fleet_url)
    git_repo = open_repo(options.fleet_url, options.cache, first)
    fleet = read_fleet(git_repo, options.branch)
    bot_settings = fleet.settings
    metrics = BotMetrics(clock)  # a registry of its own (docs/metrics.md)
    # The forge now: a GitHub App's wrong key or missing installation is exit 1 at start.
    forge_access = connect_forge(bot_settings, clock, metrics.forge_call)
    forge = forge_access.forge
    tokens = forge_access.tokens
    configured = git_credentials(options.fleet_url, bot_settings, tokens=tokens) or first
    if configured != first:
        # gitopsbot.yaml names the key to use from now on (git.sshKey), or a GitHub App whose
        # installation tokens Git shares with the forge client: fetch and push with it.
        git_repo = open_repo(options.fleet_url, options.cache, configured)
    # Passes of different clusters run side by side; their Git work is serialised.
    # The fleet poll fetches every interval (none if one began within half of it) and wakes
    # the clusters a push touched; passes reuse a fetch for 1.5 intervals, so an idle fleet
    # of N clusters fetches once per interval (was N, then 2), and a push without a webhook
    # is seen within an interval (``bot.push_router``).
    interval = bot_settings.poll_interval_seconds
    repo = SharedRepo(git_repo, fresh_seconds=interval * 1.5)
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
            shards=options.lease_shards,
        )
    # helm and kubectl now: a missing one is exit 1 at start, not a failure at the first apply.
    tools = resolve_tools(options)
    store = JournalStore(repo, branch=bot_settings.state_branch, push=options.push)
    store.record_tools(tool_record.of({**tools.versions(), **tools.paths()}))  # for `status`
    instance = shards.identity if shards is not None else replica_identity(options.identity)
    access = cluster_access(options)
    # OCI chart registries' logins read now: an unset password stops the start.
    logins = registry_logins(bot_settings)
    # The keyrings signed charts are verified with, checked now (docs/fleet-repo.md).
    keyrings = chart_keyrings(bot_settings)
    wired = wire_reconciler(
        options,
        repo=repo,
        store=store,
        bot_settings=bot_settings,
        clock=clock,
        tools=tools,
        forge=forge,
        charts=chart_source(
            options.cache, helm=lambda: tools.helm, registries=logins, keyrings=keyrings
        ),
        access=access,
        instance=instance,
        metrics=metrics,
        may_act=shards.held if shards is not None else None,
    )
    watch = drift_watch(
        options, repo=repo, bot_settings=bot_settings, clock=clock, forge=forge,
        charts=chart_source(options.cache, helm=lambda: tools.helm, registries=logins),
        access=cluster_access(options), instance=instance,
        tools=tools, metrics=metrics, may_act=shards.held if shards is not None else None,
        fleet_at=wired.reconciler.fleet_at,
    )  # fmt: skip
    reconciler = wired.reconciler
    follow_up = functools.partial(reconciler.reconcile, fetch=False)  # see bot.scheduler
    routers: list[PushRouter] = []  # made once the Bot is: it nudges the scheduler
    scheduler = loop(
        reconciler.reconcile if shards is None else shards.guarded(reconciler.reconcile),
        poll=lambda: routers[0].poll() if routers else None,
        follow_up=follow_up if shards is None else shards.guarded(follow_up),
        clock=clock,
        interval_seconds=bot_settings.poll_interval_seconds,
        jitter_seconds=max(1, bot_settings.poll_interval_seconds // 10),
        workers=max(1, options.workers),
    )
    watches = release_watches(access, scheduler.nudge)  # the long-running loop's only
    reconciler.peers = lambda: scheduler.clusters  # first baselines in one commit (#29)
    watch.yield_to = lambda: scheduler.urgent  # drift gives way to woken passes (#29)
    health = HealthWatch(
        scheduler,
        clock,
        poll_interval_seconds=bot_settings.poll_interval_seconds,
        leases_running=(lambda: shards.running) if shards is not None else None,
        holding=(lambda: len(shards.holding)) if shards is not None else None,
    )
    reconciler.announcer.pass_listeners.append(health)
    metrics.watch_scheduler(scheduler.stats)  # queue depth, oldest wait, delays (#29)
    metrics.watch_release_watches(watches.counts)
    if shards is not None:
        keeper = shards
        metrics.watch_leases(lambda: clusters, keeper.held, lambda: len(keeper.members))

        def jobs_for(held: frozenset[str]) -> None:  # a job only for the clusters held
            # A cluster just taken over: its journal is the last holder's, on the remote;
            # the next pass fetches it, whatever the mirror fetched recently.
            repo.invalidate()
            if not scheduler.stopping:  # none added or removed once shutting down
                scheduler.set_clusters(held)
            watches.keep_only(held)  # the releases of clusters given up: their holder's

        shards.on_change = jobs_for
        shards.on_lost = helm_stopper(options.cache)
    bot = Bot(
        reconciler, scheduler, clusters, bot_settings, wired.mirror, shards,
        metrics=metrics, health=health, notifier=wired.notifier, events=wired.events,
        drift=watch, proposals=proposal_watch(
            options, repo, bot_settings, forge, shards, clusters, helm=tools.helm
        ),
        release_watches=watches,
    )  # fmt: skip
    bot.router = push_router(repo, bot, poll_seconds=interval / 2)
    routers.append(bot.router)
    return bot


def proposal_watch(
    options: RunOptions,
    repo: Repo,
    bot_settings: BotSettings,
    forge: Forge | None,
    shards: ShardKeeper | None,
    clusters: tuple[str, ...] = (),
    helm: Path | None = None,
) -> ProposalWatch | None:
    """``run``'s proposal passes (``bot.proposal_watch``): through the bot's serialised
    repository, its forge (Git-only mode without one), each pass with a fresh chart source
    (an HTTP one keeps its index for its lifetime); with Leases, the replica holding the
    first cluster's proposes. None with ``--no-propose`` or ``proposals.enabled: false``."""
    if not options.propose or not bot_settings.proposals.enabled:
        return None
    requests = forge if forge is not None else GitOnlyForge(repo)

    def run_once() -> PassReport:
        proposer = Proposer(
            repo,
            requests,
            chart_source(
                options.cache,
                registries=registry_logins(bot_settings),
                keyrings=chart_keyrings(bot_settings),
            ),
            watched_branch=options.branch,
            policy_documents=builtin_policy_documents(),
            renderer=renderer(helm, options.cache) if helm is not None else None,
        )
        return proposer.run_once()

    leader = None
    if shards is not None:
        keeper, first = shards, min(clusters, default="")
        leader = lambda: bool(first) and keeper.held(first)  # noqa: E731
    interval = float(bot_settings.proposals.interval_seconds)
    return ProposalWatch(interval_seconds=interval, run_once=run_once, leader=leader)
