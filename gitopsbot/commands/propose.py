"""`gitopsbot propose`: upstream chart versions proposed as pull requests (docs/proposals.md).

Also the wiring shared with `gitopsbot comment`: the fleet repository's mirror, the forge
(from ``forge:`` in gitopsbot.yaml, its token resolved from its env/file reference) or
Git-only mode, and the chart source.
"""

from __future__ import annotations

import argparse
import hashlib
import logging
import signal
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

from gitopsbot import app, settings
from gitopsbot.adapters.builtin_policies import builtin_policy_documents
from gitopsbot.adapters.clock import SystemClock
from gitopsbot.adapters.forge.connect import from_settings
from gitopsbot.adapters.forge.provider import as_forge
from gitopsbot.adapters.git import GitRepo, GitSettings
from gitopsbot.adapters.gitonly import GitOnlyForge
from gitopsbot.adapters.secrets import SecretResolver
from gitopsbot.bot.proposer import PassReport, Proposer
from gitopsbot.commands.plan import add_chart_dir, chart_source
from gitopsbot.core.model import BotSettings
from gitopsbot.errors import ConfigError, FleetError, GitOpsBotError
from gitopsbot.ports.forge import Forge

log = logging.getLogger(__name__)

EXAMPLES = """\
examples:
  # one pass against the fleet repository, forge and token from its gitopsbot.yaml
  GITOPSBOT_FORGE_TOKEN=... gitopsbot propose --once --fleet-url https://github.com/acme/fleet.git
  # offline, charts from disk, proposals as branches with PLAN.md (no forge API); --fleet is
  # a BARE repository (git clone --bare ~/src/gpu-fleet ~/src/gpu-fleet.git): the bot pushes
  # branches, and Git's local transport cannot push into a working copy
  gitopsbot propose --once --fleet ~/src/gpu-fleet.git --chart-dir examples/charts/repo --git-only
  # keep watching: a pass every proposals.interval (gitopsbot.yaml)
  gitopsbot propose --fleet-url https://github.com/acme/fleet.git

Each pass reads each cluster's chart repository index, picks the newest version its
proposals.scope allows (patch, minor, major; pinned: none), skipping app-major changes (R2)
and appVersion regressions (F5), and opens one pull request per cluster bumping
chart.version and setting cluster.hypervisorImage explicitly (R4), with the plan as body.
Git over HTTPS authenticates with GITOPSBOT_GIT_TOKEN when set.
exit status: 0 pass done, 1 bad fleet files or settings, 2 Git, forge or chart repository
unavailable (or a proposal failed).
"""


def register(sub: Any) -> None:
    p = sub.add_parser(
        "propose",
        help="propose upstream chart versions as pull requests",
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
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--fleet-url", metavar="URL", help="the fleet repository's Git URL")
    where.add_argument("--fleet", metavar="PATH", help="a local clone of the fleet repository")
    p.add_argument("--branch", default="main", help="branch with gitopsbot.yaml (default main)")
    add_chart_dir(p)
    p.add_argument(
        "--git-only",
        action="store_true",
        help="no forge API: proposals are branches carrying PLAN.md (also when forge.kind is "
        "git-only in gitopsbot.yaml)",
    )


@dataclass(frozen=True, slots=True)
class Wiring:
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


def wire(args: argparse.Namespace) -> Wiring:
    """Mirror the fleet repository, read its settings, and connect the forge."""
    url = app.fleet_url(url=args.fleet_url, path=args.fleet)
    cache = settings.cache_dir()
    first = app.open_repo(url, cache)  # fetches; the settings name the author to commit as
    fleet_settings = app.read_fleet(first, args.branch).settings
    repo = GitRepo(
        GitSettings(
            url=url,
            mirror_dir=cache / "mirrors" / hashlib.sha256(url.encode()).hexdigest()[:16],
            credentials=app.git_credentials(url, fleet_settings),
            author_name=fleet_settings.author_name,
            author_email=fleet_settings.author_email,
        )
    )
    return Wiring(repo, open_forge(fleet_settings, repo, git_only=args.git_only), fleet_settings)


def proposer(wiring: Wiring, branch: str, chart_dirs: Sequence[Path]) -> Proposer:
    """A proposer with a fresh chart source (HTTP sources keep an index for their lifetime,
    so each pass gets its own to see new versions)."""
    return Proposer(
        wiring.repo,
        wiring.forge,
        chart_source(list(chart_dirs)),
        watched_branch=branch,
        policy_documents=builtin_policy_documents(),
    )


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
    except (ConfigError, FleetError) as e:
        sys.stderr.write(f"gitopsbot propose: {e}\n")
        return 1
    except GitOpsBotError as e:
        sys.stderr.write(f"gitopsbot propose: {e}\n")
        return 2
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

    def on_signal(signum: int, frame: FrameType | None) -> None:
        log.warning("signal %s: stopping after the running pass", signum)
        stop.set()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    interval = wiring.settings.proposals.interval_seconds
    print(f"gitopsbot propose: a pass every {interval}s (Ctrl-C to stop)", flush=True)
    while not stop.is_set():
        one_pass(wiring, args)  # a failed pass is reported and retried at the next interval
        stop.wait(interval)
    return 0
