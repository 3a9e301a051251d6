"""`gitopsbot propose`: upstream chart versions proposed as pull requests (docs/proposals.md).

Also the wiring shared with `gitopsbot comment`: the fleet repository's mirror, the forge
(from ``forge:`` in gitopsbot.yaml, its token resolved from its env/file reference) or
Git-only mode, and the chart source.
"""

from __future__ import annotations

import argparse
import logging
import sys
import threading
from pathlib import Path
from typing import Any

from gitopsbot import app
from gitopsbot.bot.proposal_report import PassReport
from gitopsbot.commands import SUMMARIES
from gitopsbot.commands.failures import report_start
from gitopsbot.commands.options import add_chart_dir, add_fleet_source
from gitopsbot.errors import ConfigError, FleetError, GitOpsBotError

log = logging.getLogger(__name__)

EXAMPLES = """\
examples:
  # one pass against the fleet repository, forge and token from its gitopsbot.yaml
  GITOPSBOT_FORGE_TOKEN=<forge-token> gitopsbot propose --once --fleet-url <fleet-url>
  # offline, charts from disk, proposals as branches with PLAN.md (no forge API); --fleet is
  # a BARE repository: the bot pushes branches, and Git's local transport cannot push into a
  # working copy
  git clone --bare . ../gpu-fleet.git               # in a working copy of the fleet
  gitopsbot propose --once --fleet ../gpu-fleet.git --chart-dir examples/charts/repo --git-only
  # keep watching: a pass every proposals.interval (gitopsbot.yaml)
  gitopsbot propose --fleet-url <fleet-url>         # until Ctrl-C

Each pass reads each cluster's chart repository index, picks the newest version its
proposals.scope allows (patch, minor, major; pinned: none), skipping app-major changes (R2)
and appVersion regressions (F5), and opens one pull request per cluster bumping
chart.version and setting cluster.hypervisorImage explicitly (R4), with the plan as body.
Git over HTTPS authenticates with GITOPSBOT_GIT_TOKEN when set.
exit status: 0 pass done, 1 bad fleet files or settings (the forge token's variable unset,
--fleet a working copy), 2 bad options, Git, forge or chart repository unavailable (or a
proposal failed). Without --once, Ctrl-C stops after the running pass (0); a second one exits
at once (130).
"""


def register(sub: Any) -> None:
    p = sub.add_parser(
        "propose",
        help=SUMMARIES["propose"],
        description="Watch each cluster's chart repository and open one pull request per "
        "cluster for the newest chart version its policy allows, with the upgrade plan as "
        "body; supersede older proposals, never reopen a declined one, keep at most "
        "proposals.maxOpen open (docs/proposals.md).",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_fleet_options(p)
    p.add_argument("--once", action="store_true", help="run one pass, then exit")
    p.set_defaults(func=run)


def add_fleet_options(p: argparse.ArgumentParser) -> None:
    """Where the fleet is, which branch, charts, and Git-only mode (shared with `comment`)."""
    add_fleet_source(p)
    p.add_argument("--branch", default="main", help="branch with gitopsbot.yaml (default main)")
    add_chart_dir(p)
    p.add_argument(
        "--git-only",
        action="store_true",
        help="no forge API: proposals are branches carrying PLAN.md (also when forge.kind is "
        "git-only in gitopsbot.yaml)",
    )


Wiring = app.ProposalWiring
open_forge = app.open_forge
proposer = app.proposer


def wire(args: argparse.Namespace) -> Wiring:
    """Mirror the fleet repository, read its settings, and connect the forge."""
    url = app.fleet_url(url=args.fleet_url, path=args.fleet)
    return app.proposal_wiring(url, args.branch, git_only=args.git_only)


def _print(report: PassReport) -> None:
    for line in report.lines():
        print(line)
    sys.stdout.flush()


def refuse_working_copy(path: str | None) -> None:
    """``--fleet PATH`` must be a bare repository: propose pushes proposal branches there, and
    libgit2's local transport refuses every push into a non-bare repository (any branch)."""
    if path and (Path(path).expanduser() / ".git").exists():
        raise ConfigError(
            f"--fleet {path}: a working copy (non-bare repository); the bot pushes proposal "
            "branches and Git cannot push into a working copy over a local path. Use a bare "
            f"clone (git clone --bare {path} {path.rstrip('/')}.git, then --fleet "
            f"{path.rstrip('/')}.git) or --fleet-url with the repository's remote URL"
        )


def run(args: argparse.Namespace) -> int:
    try:
        refuse_working_copy(args.fleet)
        wiring = wire(args)
    except GitOpsBotError as e:  # the forge token's reference unset is a setting: 1
        return report_start("propose", e)
    if args.once:
        return one_pass(wiring, args)
    return loop(wiring, args)


def one_pass(wiring: Wiring, args: argparse.Namespace) -> int:
    try:
        report = proposer(wiring, args.branch, args.chart_dir).run_once()
    except (ConfigError, FleetError) as e:
        sys.stderr.write(f"gitopsbot propose: {e}\n")
        return 1
    except GitOpsBotError as e:
        sys.stderr.write(f"gitopsbot propose: {e}\n")
        return 2
    _print(report)
    return 2 if report.problems else 0


def loop(wiring: Wiring, args: argparse.Namespace) -> int:
    stop = threading.Event()

    # SIGINT/SIGTERM: the running pass finishes (its pull request opened or not), then exit
    # 0; a second signal exits at once (130).
    app.interrupts.install(
        "propose",
        graceful=True,
        message="stopping after the running pass (Ctrl-C again to force)",
        on_first=lambda signum: stop.set(),
    )
    interval = wiring.settings.proposals.interval_seconds
    print(f"gitopsbot propose: a pass every {interval}s (Ctrl-C to stop)", flush=True)
    while not stop.is_set():
        one_pass(wiring, args)  # a failed pass is reported and retried at the next interval
        stop.wait(interval)
    return 0
