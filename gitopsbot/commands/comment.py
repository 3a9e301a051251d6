"""`gitopsbot comment`: post (or refresh) the plan comment and policy status on a request."""

from __future__ import annotations

import argparse
from typing import Any

from gitopsbot.commands import SUMMARIES, failures
from gitopsbot.commands.propose import add_fleet_options, proposer, wire
from gitopsbot.core.policy import Decision
from gitopsbot.errors import GitOpsBotError

EXAMPLES = """\
examples:
  GITOPSBOT_FORGE_TOKEN=<forge-token> gitopsbot comment --cluster <cluster> --pr <pr> \\
      --fleet-url <fleet-url>
  gitopsbot comment --cluster <cluster> --pr <pr> --fleet . --chart-dir examples/charts/repo

The plan compares the watched branch (baseline) with the request's branch (desired state).
One comment per cluster and request, edited in place on every run; the gitopsbot/policy
status on the request's head fails when policy denies. Forge and token come from
gitopsbot.yaml's forge: section (the token through its env or file reference).
exit status: 0 posted (1 with --check when not allowed), 1 bad fleet files or settings (the
forge token's variable unset), 2 bad options, Git, forge or chart repository unavailable.
"""


def register(sub: Any) -> None:
    p = sub.add_parser(
        "comment",
        help=SUMMARIES["comment"],
        description="Compute the plan of CLUSTER between the watched branch and pull request "
        "N's branch, keep it as one comment on the request, and set the gitopsbot/policy "
        "status on its head (docs/proposals.md).",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--cluster", required=True, metavar="NAME", help="cluster under clusters/")
    p.add_argument("--pr", required=True, type=int, metavar="N", help="pull/merge request")
    add_fleet_options(p)
    p.add_argument(
        "--check", action="store_true", help="exit 1 when the plan is denied or unacknowledged"
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    try:
        wiring = wire(args)
        pr, plan = proposer(wiring, args.branch, args.chart_dir).comment(args.cluster, args.pr)
    except GitOpsBotError as e:
        return failures.report_start("comment", e)
    print(f"#{pr.number} {args.cluster}: plan posted, policy {plan.decision} {pr.url}".rstrip())
    if args.check and plan.decision != Decision.ALLOWED:
        return 1
    return 0
