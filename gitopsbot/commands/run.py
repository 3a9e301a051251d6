"""`gitopsbot run`: the long-running loop that applies merged changes (docs/executor.md)."""

from __future__ import annotations

import argparse
import contextlib
import logging
import sys
import threading
from typing import Any

from gitopsbot import app
from gitopsbot.bot.lease_keeper import LeaseTiming
from gitopsbot.commands import SUMMARIES, failures
from gitopsbot.commands.options import add_fleet_source
from gitopsbot.core.replicas import sharding
from gitopsbot.errors import GitOpsBotError

log = logging.getLogger(__name__)

EXAMPLES = """\
examples:
  gitopsbot run --fleet-url <fleet-url>             # until Ctrl-C (or SIGTERM)
  gitopsbot run --fleet <bare-clone> --cluster <cluster> --once   # a bare clone; one round
  GITOPSBOT_GIT_TOKEN=<git-token> gitopsbot run --once --fleet-url <fleet-url> \\
      --kubeconfig <kubeconfig>
  # until Ctrl-C, with: forge webhooks; /metrics /healthz /readyz; log lines as JSON
  # (docs/logging.md); Leases in the cluster of another kubeconfig (replicas share the fleet)
  gitopsbot run --fleet-url <fleet-url> --webhook-listen 0.0.0.0:8080
  gitopsbot run --fleet-url <fleet-url> --metrics-listen 0.0.0.0:9090
  gitopsbot run --fleet-url <fleet-url> --metrics-listen 0.0.0.0:9090 --fleet-page   # + /fleet
  gitopsbot run --fleet-url <fleet-url> --log-format json
  gitopsbot run --fleet-url <fleet-url> --leases-namespace default --leases-kubeconfig <kubeconfig>

  eval "$(gitopsbot tools --fetch --shell)"         # the pinned helm (4), helm3 and kubectl
  gitopsbot run --once --fleet-url <fleet-url> --helm helm3 --kubectl kubectl   # names or paths
  gitopsbot run --once --fleet <bare-clone> --download-binaries   # pinned helm 4 + kubectl
  gitopsbot run --fleet-url <fleet-url> --in-cluster   # its ServiceAccount; needs a pod
  gitopsbot run --fleet-url <fleet-url> --leases-namespace gitopsbot   # replicas; needs a pod

helm and kubectl: --helm/--kubectl, else $GITOPSBOT_HELM/$GITOPSBOT_KUBECTL, else the pinned
ones with --download-binaries, else PATH (helm 3 or 4; `gitopsbot status` shows which).
A cluster is reached through its release.yaml: kubeContext (a --kubeconfig context),
kubeconfigSecret (a Secret in the bot's namespace), or neither: in a pod, its ServiceAccount
(no kubeconfig needed); elsewhere the kubeconfig's current context (docs/cluster-access.md).

Each cluster gets its own job: a pass every pollInterval (gitopsbot.yaml) with jitter; a pass
runs at most one step and records it on the state branch. SIGINT/SIGTERM (Ctrl-C) stop the
loop after the running pass has recorded (a step boundary), and say so; a second one exits at
once (130), leaving the running step as a crash would (the next run resumes it). --once runs
passes until every cluster is idle or waiting (for a window, the controller, a queued change),
then exits.
--leases-namespace NS: several replicas share the fleet through Kubernetes Leases in NS
(one per cluster, one per replica; RBAC: get, list, create, update on leases): each replica
works on an even share of the clusters, and a dead replica's clusters move to the others
within one lease duration (15 s). Identity: --identity, else $POD_NAME, else the host name,
plus a random suffix. A webhook wakes only the clusters this replica holds (docs/leases.md).
exit status: 0 stopped cleanly, 1 bad fleet or settings (a secret it names unset, no helm),
2 bad options, Git or a cluster unavailable, 130 forced by a second Ctrl-C
(docs/commands.md#exit-statuses, #interrupts).
"""

# Passes per cluster in --once before giving up on "immediately due" work.
ONCE_LIMIT = 200


def register(sub: Any) -> None:
    p = sub.add_parser(
        "run",
        help=SUMMARIES["run"],
        description="Watch the fleet repository and carry out every merged change per cluster: "
        "backup, CRDs, helm upgrade, controller, pool rollouts under their windows and "
        "deadlines, verification; record progress on the state branch; roll back on revert.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_fleet_source(p)
    p.add_argument("--branch", default="main", help="branch with gitopsbot.yaml (default main)")
    p.add_argument(
        "--cluster",
        action="append",
        default=[],
        metavar="NAME",
        help="only this cluster (repeatable; default all)",
    )
    p.add_argument(
        "--kubeconfig",
        default="",
        help="kubeconfig file (default $KUBECONFIG, else ~/.kube/config)",
    )
    p.add_argument(
        "--in-cluster",
        action="store_true",
        help="reach clusters without kubeContext/kubeconfigSecret through the pod's "
        "ServiceAccount (default: so when in a pod and no --kubeconfig is given)",
    )
    p.add_argument(
        "--no-events",
        dest="events",
        action="store_false",
        help="no Kubernetes Events on TensorFusionClusters and GPUPools (docs/events.md)",
    )
    p.add_argument(
        "--no-propose",
        dest="propose",
        action="store_false",
        help="no proposal pass every proposals.interval: new chart versions and failed-version "
        "requests are left to `gitopsbot propose` (docs/proposals.md)",
    )
    p.add_argument("--helm", default="", metavar="PATH", help="helm 3 or 4 binary to run")
    p.add_argument("--kubectl", default="", metavar="PATH", help="kubectl binary to run")
    p.add_argument(
        "--download-binaries",
        action="store_true",
        help="use the pinned, SHA-256-verified helm 4 and kubectl, downloaded into the "
        "cache if needed (default: never download; PATH)",
    )
    p.add_argument("--once", action="store_true", help="run until idle or waiting, then exit")
    p.add_argument(
        "--no-push",
        action="store_true",
        help="push nothing to the fleet remote: state-branch records, revert commits and "
        "revert branches stay local (dry runs, debugging)",
    )
    p.add_argument(
        "--webhook-listen",
        default="",
        metavar="HOST:PORT",
        help="receive forge webhooks at POST /webhooks/<github|gitlab|gitea> on HOST:PORT "
        "(port 0: any free port, printed at start); a verified push or merge starts a pass "
        "at once (default off: polling only; ignored with --once)",
    )
    p.add_argument(
        "--metrics-listen",
        default="",
        metavar="HOST:PORT",
        help="serve Prometheus metrics at /metrics and the probes /healthz (the loop is "
        "alive) and /readyz (the fleet repository answers, leases held or waited for) on "
        "HOST:PORT, apart from the webhooks (docs/metrics.md; default off; ignored with --once)",
    )
    p.add_argument(
        "--fleet-page",
        action="store_true",
        help="also serve the read-only fleet page at /fleet on the --metrics-listen port: "
        "waves, clusters, operations, pools and nodes as `status` reads them; no login of "
        "its own, so put it behind your ingress's authentication (docs/fleet-page.md; "
        "default off)",
    )
    p.add_argument(
        "--workers",
        type=int,
        default=4,
        metavar="N",
        help="clusters reconciled side by side (default 4); one cluster never has two "
        "passes at once, and Git work is serialised",
    )
    p.add_argument(
        "--leases-namespace",
        default="",
        metavar="NS",
        help="share the fleet with other replicas through Leases in namespace NS of the "
        "management cluster (default off: this process works on every cluster)",
    )
    p.add_argument(
        "--leases-kubeconfig",
        default="",
        metavar="PATH",
        help="kubeconfig of the cluster holding the Leases (default: --kubeconfig)",
    )
    p.add_argument(
        "--identity",
        default="",
        metavar="NAME",
        help="this replica's Lease identity, before a random suffix (default $POD_NAME, "
        "else the host name)",
    )
    p.add_argument(
        "--lease-shards",
        type=int,
        default=sharding.DEFAULT_SHARDS,
        metavar="N",
        help=f"shard Leases the fleet is cut into, 1 to {sharding.MAX_SHARDS} (default "
        f"{sharding.DEFAULT_SHARDS}; every replica the same, docs/leases.md)",
    )
    # Lease timing (client-go's duration and deadline, a 4 s retry); short ones for tests.
    p.add_argument("--lease-duration", type=int, default=15, help=argparse.SUPPRESS)
    p.add_argument("--lease-renew-deadline", type=float, default=10.0, help=argparse.SUPPRESS)
    p.add_argument("--lease-retry-period", type=float, default=4.0, help=argparse.SUPPRESS)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.workers < 1:
        sys.stderr.write(f"gitopsbot run: --workers {args.workers}: give 1 or more\n")
        return 2
    if getattr(args, "fleet_page", False) and not args.metrics_listen:
        sys.stderr.write("gitopsbot run: --fleet-page is served on --metrics-listen: give both\n")
        return 2
    if args.once and args.leases_namespace:
        sys.stderr.write("gitopsbot run: --once works alone; --leases-namespace is for `run`\n")
        return 2
    try:
        timing = LeaseTiming(
            args.lease_duration, args.lease_renew_deadline, args.lease_retry_period
        )
    except ValueError as e:
        sys.stderr.write(f"gitopsbot run: lease timing: {e}\n")
        return 2
    try:
        sharding.check_shards(args.lease_shards)
    except ValueError as e:
        sys.stderr.write(f"gitopsbot run: --lease-shards: {e}\n")
        return 2
    try:
        options = app.RunOptions(
            fleet_url=app.fleet_url(url=args.fleet_url, path=args.fleet),
            branch=args.branch,
            kubeconfig=args.kubeconfig,
            clusters=tuple(args.cluster),
            push=not args.no_push,
            workers=args.workers,
            helm=args.helm,
            kubectl=args.kubectl,
            download_binaries=args.download_binaries,
            in_cluster=args.in_cluster,
            events=args.events,
            propose=args.propose,
            leases_namespace=args.leases_namespace,
            leases_kubeconfig=args.leases_kubeconfig,
            identity=args.identity,
            lease_timing=timing,
            lease_shards=args.lease_shards,
        )
        bot = app.build_bot(options)
    except GitOpsBotError as e:
        return failures.report_start("run", e)
    if args.once:
        return run_once(bot)
    app.open_files.raise_soft_limit()  # a fleet's sockets outnumber a 1,024 default
    try:
        receiver = app.webhook_receiver(bot, args.webhook_listen) if args.webhook_listen else None
        if receiver is not None:
            receiver.start()  # bind now: a taken port is a message, not a traceback
    except GitOpsBotError as e:
        sys.stderr.write(f"gitopsbot run: {e}\n")
        return 1
    except OSError as e:
        sys.stderr.write(f"gitopsbot run: --webhook-listen {args.webhook_listen}: {e}\n")
        return 1
    try:
        metrics = (
            app.metrics_server(bot, args.metrics_listen, fleet_page=args.fleet_page)
            if args.metrics_listen
            else None
        )
        if metrics is not None:
            metrics.start()  # bind now, as the receiver
    except (GitOpsBotError, OSError) as e:
        if receiver is not None:
            receiver.stop()
        where = "" if isinstance(e, GitOpsBotError) else f"--metrics-listen {args.metrics_listen}: "
        sys.stderr.write(f"gitopsbot run: {where}{e}\n")
        return 1
    json_lines = getattr(args, "resolved_log_format", "text") == "json"
    bot.watch_releases()
    return run_forever(bot, receiver, metrics, json_lines=json_lines)


FORCED = "the running step is left as a crash leaves it; the next run resumes it"


def run_once(bot: app.Bot) -> int:
    # Ctrl-C: the pass in flight finishes and records; no pass starts after it.
    app.interrupts.install(
        "run",
        graceful=True,
        message="stopping at the next step boundary (Ctrl-C again to force)",
        force_message=FORCED,
    )
    status = 0
    for cluster in bot.clusters:
        for _ in range(ONCE_LIMIT):
            if app.interrupts.requested():
                break
            try:
                result = bot.reconciler.reconcile(cluster)
            except GitOpsBotError as e:
                sys.stderr.write(f"gitopsbot run: {cluster}: {e}\n")
                status = 2
                break
            print(f"{cluster}: {result.action} {result.detail}".rstrip())
            now = bot.reconciler.clock.now()
            if result.next_at is None or result.next_at > now:
                break
    bot.flush()  # the last pass may have left a record for the next pass's push
    bot.close()
    if app.interrupts.requested():
        print(f"gitopsbot run: {app.interrupts.signal_name()}: stopped cleanly at a step boundary")
    return status


def run_forever(
    bot: app.Bot,
    receiver: app.WebhookReceiver | None = None,
    metrics: app.MetricsServer | None = None,
    *,
    json_lines: bool = False,
) -> int:
    """The long-running loop. Its few lines of its own (watching, where the endpoints are,
    stopped) go to standard output as text, or with ``--log-format json`` to the log as
    JSON lines, so a container's log is JSON throughout."""
    stop = threading.Event()

    def say(text: str) -> None:
        if json_lines:
            log.info("%s", text)
        else:
            print(f"gitopsbot run: {text}", flush=True)

    # SIGINT/SIGTERM: stop taking passes; the ones in flight record their step first. A
    # second signal exits at once (130).
    app.interrupts.install(
        "run", graceful=True, on_first=lambda signum: stop.set(), force_message=FORCED
    )
    if bot.shards is None:
        bot.scheduler.set_clusters(bot.clusters)
    bot.scheduler.start()
    if bot.drift is not None:  # drift checks every drift.interval (docs/drift.md)
        bot.drift.start()
    if bot.proposals is not None:  # a proposal pass every proposals.interval
        bot.proposals.start()
    if bot.shards is not None:  # jobs come and go with the cluster Leases held
        bot.shards.start()
        where = f"Leases in {bot.shards.namespace} as {bot.shards.identity}"
        say(f"sharing the fleet through {where}")
    say(f"watching {', '.join(bot.clusters)} (Ctrl-C to stop)")
    if receiver is not None:  # started by the caller
        say(f"webhooks at {receiver.url}/webhooks/<provider>")
    if metrics is not None:  # started by the caller
        say(f"metrics at {metrics.url}/metrics")
        if metrics.serves_fleet:
            say(f"fleet page at {metrics.url}/fleet")
    # On a terminal (text log), the operations are redrawn in place below the log lines
    # (docs/progress.md); in a container or a pipe, the log's one line per change is all.
    live = (
        app.live_view(bot.reconciler, sys.stderr)
        if not json_lines and sys.stderr.isatty()
        else contextlib.nullcontext()
    )
    try:
        with live:
            # Short waits: a SIGTERM the kernel hands to another thread is taken by Python's
            # handler (which sets ``stop``) only once the main thread is back from its wait.
            while not stop.wait(0.5):
                pass
        why = app.interrupts.signal_name() or "stop"
        say(
            f"{why}: stopping at the next step boundary: the running passes record their step "
            "first (Ctrl-C again to force)"
        )
    finally:
        if receiver is not None:
            receiver.stop()
        bot.scheduler.shutdown(wait=True)  # graceful: at a step boundary
        bot.flush()  # a record left for the next pass's push goes out now
        if bot.shards is not None:
            bot.shards.stop()  # released: the other replicas take the clusters at once
        bot.close()  # the pull requests show the last recorded transitions
        if metrics is not None:  # last: the probes answered "stopping" meanwhile
            metrics.stop()
    say(f"{why}: stopped cleanly at a step boundary")
    return 0
