"""`gitopsbot drift`: where each cluster differs from Git, read from the cluster (docs/drift.md)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from gitopsbot import app
from gitopsbot.app import drift as drift_app
from gitopsbot.commands import SUMMARIES, failures
from gitopsbot.commands.options import add_chart_dir, add_fleet_source
from gitopsbot.core.drift.report import DriftReport
from gitopsbot.errors import GitOpsBotError

EXAMPLES = """\
examples:
  # every cluster; in a fresh `gitopsbot sandbox up` the chart was installed without the bot
  gitopsbot drift --fleet-url <fleet-url> --kubeconfig <kubeconfig>   # exit 1: drift found
  gitopsbot drift --fleet-url <fleet-url> --kubeconfig <kubeconfig> \\
      --cluster <cluster> --json                                      # exit 1: as JSON

Compares each cluster's deployed state with Git's: the chart version and values of the Helm
release (secrets by digest only, never shown), a Helm revision made outside the bot, the
TensorFusion CRD bundle, the pool policy the bot pins in the TensorFusionCluster and its
GPUPools, and the component images (docs/drift.md). Only reads: never changes the cluster.
exit status: 0 no drift, 1 drift found (or bad fleet files, a --cluster not in the fleet),
2 Git or a cluster unavailable (a cluster not checked) (docs/commands.md#exit-statuses).
"""


def register(sub: Any) -> None:
    p = sub.add_parser(
        "drift",
        help=SUMMARIES["drift"],
        description="Report where each cluster's deployed state differs from what the bot "
        "would deploy from Git: chart version, values (secrets by digest), a Helm revision "
        "made outside the bot, CRDs, the pinned pool policy, images (docs/drift.md).",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_fleet_source(p, "a bare clone of the fleet repository")
    p.add_argument("--cluster", action="append", default=[], metavar="NAME", help="only this one")
    p.add_argument("--json", action="store_true", help="one JSON document on stdout")
    p.add_argument(
        "--kubeconfig",
        default="",
        metavar="PATH",
        help="kubeconfig of kubeContexts (default $KUBECONFIG, else ~/.kube/config)",
    )
    add_chart_dir(p, "read charts (for the images) from this directory instead of the network")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    try:
        options = app.RunOptions(
            fleet_url=app.fleet_url(url=args.fleet_url, path=args.fleet),
            kubeconfig=args.kubeconfig,
            clusters=tuple(args.cluster),
        )
        found = drift_app.check_fleet(options, args.chart_dir)
    except GitOpsBotError as e:
        return failures.report_start("drift", e)
    return show(found.reports, as_json=args.json)


def show(reports: dict[str, DriftReport | str], *, as_json: bool) -> int:
    """Print the reports; 2 when a cluster was not checked, else 1 when any drifted."""
    if as_json:
        clusters = [
            r.as_json() if isinstance(r, DriftReport) else {"cluster": n, "error": r}
            for n, r in sorted(reports.items())
        ]
        sys.stdout.write(json.dumps({"clusters": clusters}, indent=2) + "\n")
    else:
        for name, found in sorted(reports.items()):
            lines = found.lines() if isinstance(found, DriftReport) else [f"{name}: {found}"]
            sys.stdout.write("\n".join(lines) + "\n")
    if any(not isinstance(r, DriftReport) for r in reports.values()):
        return 2
    return 1 if any(r.drifted for r in reports.values() if isinstance(r, DriftReport)) else 0
