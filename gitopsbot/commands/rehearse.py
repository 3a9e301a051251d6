"""`gitopsbot rehearse`: play one cluster's upgrade in a sandbox on a virtual clock and print
its timeline (docs/rehearsal.md)."""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gitopsbot import app, settings
from gitopsbot.bot import node_reads, rehearsal_store
from gitopsbot.bot.journal_store import JournalStore
from gitopsbot.commands import SUMMARIES, failures
from gitopsbot.commands import plan as plan_command
from gitopsbot.commands.options import add_chart_dir, add_cluster_refs
from gitopsbot.core import rehearsal as rh
from gitopsbot.errors import GitOpsBotError
from gitopsbot.fleetrepo import load_fleet
from gitopsbot.sandbox import rehearsal as sandbox_rehearsal

EXAMPLES = """\
examples:
  # the example production cluster, offline, from a Tuesday 00:00 UTC (its window opens)
  gitopsbot rehearse --cluster production --fleet examples/fleet --chart-dir examples/charts \\
      --start 2026-12-01T00:00:00Z
  # the same as JSON, the pools' rehearsed and estimated rolling seconds side by side
  gitopsbot rehearse --cluster production --fleet examples/fleet --chart-dir examples/charts \\
      --start 2026-12-01T00:00:00Z --json
  # the lines the pull request's plan comment gets (rehearsal: {attachToPlan: true})
  gitopsbot rehearse --cluster production --fleet examples/fleet --chart-dir examples/charts \\
      --compressed
  # keep the predictions for commit HEAD on the state branch, then, once the bot's operation
  # for it has finished, its measured pool times against them (needs a finished operation)
  gitopsbot rehearse --cluster <cluster> --to HEAD --record --fleet-url <fleet-url> \\
      --chart-dir examples/charts/repo
  gitopsbot rehearse --cluster <cluster> --compare <cluster>-0123456789ab \\
      --fleet-url <fleet-url>  # needs an operation the bot finished
  # node counts read from the live cluster instead of rollout.yaml's nodes:
  gitopsbot rehearse --cluster <cluster> --kubeconfig <kubeconfig> --context '' \\
      --chart-dir examples/charts/repo

Charts: helm template renders the target chart from --chart-dir (a directory holding
<name>-<version>.tgz or a chart directory) or else the release's repository. Node counts: the
pool's nodes: in rollout.yaml, or with --kubeconfig the pool's GPUNodes in the live cluster.
The clock jumps over every wait: hours of windows and batch intervals take seconds.
exit status: 0 the rehearsed operation succeeds, 1 it fails (a pool's maxDuration runs out)
or bad fleet files (--compare: no such finished, rehearsed operation), 2 bad options, chart
repository, Git or cluster unavailable.
"""


def register(sub: Any) -> None:
    p = sub.add_parser(
        "rehearse",
        help=SUMMARIES["rehearse"],
        description="Build a sandbox from the cluster's own spec (pools and node counts, "
        "windows, deadlines, canary, phases, onFailure) with the target chart, play the "
        "upgrade on a clock that jumps over waits, and print when each pool starts and "
        "finishes, where a window or deadline bites, the verification steps and what a "
        "rollback would do (docs/rehearsal.md).",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_cluster_refs(p)
    add_chart_dir(p)
    p.add_argument(
        "--start",
        type=_instant,
        metavar="TIME",
        help="rehearsal time at which the operation begins, ISO 8601 (default: now)",
    )
    p.add_argument(
        "--kubeconfig", metavar="FILE", help="read node counts per pool from this cluster"
    )
    p.add_argument(
        "--context",
        metavar="NAME",
        help="kubeconfig context for --kubeconfig ('' the current one; default: kubeContext)",
    )
    p.add_argument(
        "--record",
        action="store_true",
        help="keep the predictions on the state branch (rehearsals/<cluster>/<sha>.yaml; "
        "needs --to)",
    )
    p.add_argument(
        "--compare",
        metavar="OP",
        help="rehearse nothing: compare operation OP's measured pool times with the "
        "rehearsal recorded for its commit, and keep the comparison next to it",
    )
    p.add_argument(
        "--fleet-url",
        metavar="URL",
        help="fleet repository whose state branch --record/--compare use (default: --fleet)",
    )
    out = p.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="print the rehearsal as JSON")
    out.add_argument(
        "--compressed", action="store_true", help="print the plan comment's compressed lines"
    )
    p.set_defaults(func=run)


def _instant(text: str) -> datetime:
    try:
        at = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not an ISO 8601 time: {text!r}") from exc
    return at if at.tzinfo is not None else at.replace(tzinfo=UTC)


def rehearse(args: argparse.Namespace) -> rh.Rehearsal:
    plan = plan_command.build_plan(args)
    fleet = load_fleet(app.fleet_tree(Path(args.fleet), args.to_ref))
    spec = fleet.clusters[args.cluster]  # build_plan said so when it is not there
    rel = spec.release
    source = plan_command.chart_source(args.chart_dir, fleet.settings)
    chart = source.chart(rel.chart_repo_url, rel.chart_name, rel.version)
    nodes: dict[str, int] = {}
    if args.kubeconfig:
        with app.live_cluster(args.kubeconfig, spec, args.context) as cluster:
            nodes = node_reads.pool_node_counts(cluster, spec)
    tools = app.resolve_tools(app.RunOptions(fleet_url="", download_binaries=True))
    desired = ""
    if args.to_ref:
        desired = app.fleet_commit(Path(args.fleet), args.to_ref)
    with tempfile.TemporaryDirectory(prefix="gitopsbot-rehearsal-") as work:
        options = sandbox_rehearsal.Options(
            helm=tools.helm,
            workdir=Path(work),
            start=args.start or datetime.now(UTC).replace(microsecond=0),
            chart=sandbox_rehearsal.find_chart(
                list(args.chart_dir), rel.chart_name, rel.version, rel.chart_repo_url
            ),
            nodes=nodes,
            desired_sha=desired,
        )
        return sandbox_rehearsal.rehearse(spec, plan, chart.crds, options)


def _store(args: argparse.Namespace) -> JournalStore:
    url = app.fleet_url(url=args.fleet_url, path=None if args.fleet_url else args.fleet)
    repo = app.open_repo(url, settings.cache_dir())
    fleet = app.read_fleet(repo, "main")
    return JournalStore(repo, branch=fleet.settings.state_branch, push=True)


def compare(args: argparse.Namespace) -> int:
    store = _store(args)
    journal = store.history(args.cluster, args.compare)
    current = store.current(args.cluster)
    if journal is None and current is not None and current.op_id == args.compare:
        journal = current
    if journal is None:
        sys.stderr.write(f"gitopsbot rehearse: no operation {args.compare} of {args.cluster}\n")
        return 1
    found = rehearsal_store.compare_finished(store, journal)
    if found is None:
        sys.stderr.write(
            f"gitopsbot rehearse: {args.compare} is not finished, or its commit "
            f"{journal.desired_sha[:12]} was never rehearsed with --record\n"
        )
        return 1
    sys.stdout.write("\n".join(found.lines()) + "\n")
    return 0


def run(args: argparse.Namespace) -> int:
    if args.record and not args.to_ref:
        sys.stderr.write("gitopsbot rehearse: --record needs --to REF (the commit rehearsed)\n")
        return 2
    try:
        if args.compare:
            return compare(args)
        done = rehearse(args)
        if args.record:
            rehearsal_store.save(_store(args), done)
    except GitOpsBotError as exc:
        return failures.report("rehearse", exc, "--chart-dir examples/charts")
    except Exception as exc:  # the live cluster's client raises its own errors
        if type(exc).__module__.startswith(("kubernetes", "urllib3")):
            sys.stderr.write(f"gitopsbot rehearse: cluster unreachable: {exc}\n")
            return 2
        raise
    if args.json:
        sys.stdout.write(json.dumps(rh.to_dict(done), indent=2) + "\n")
    elif args.compressed:
        sys.stdout.write(rh.compressed(done))
    else:
        sys.stdout.write(rh.render_text(done))
        sys.stdout.write(f"(rehearsed in {done.wall_seconds:.1f}s of real time)\n")
    return 0 if done.succeeded else 1
