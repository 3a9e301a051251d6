"""The command line: ``gitopsbot <command> ...``. Each command lives in gitopsbot/commands/."""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from collections.abc import Sequence

from gitopsbot import __version__
from gitopsbot.errors import ConfigError, GitOpsBotError

# Order is the order shown in --help.
COMMANDS = (
    "validate",
    "plan",
    "sandbox",
    "propose",
    "comment",
    "run",
    "status",
    "demo",
    "post_render",
)

EPILOG = """\
examples:
  gitopsbot demo                                   # the whole story in a local sandbox
  gitopsbot validate examples/fleet                # check a fleet repository
  gitopsbot plan --cluster staging --fleet examples/fleet
  gitopsbot <command> --help                       # more on one command
"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gitopsbot",
        description="Upgrade TensorFusion clusters from Git: plan on the pull request, "
        "apply on merge, roll back on revert.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"gitopsbot {__version__}")
    parser.add_argument(
        "-v", "--verbose", action="count", default=0, help="more log output (-vv for debug)"
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMANDS:
        module = importlib.import_module(f"gitopsbot.commands.{name}")
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.WARNING - 10 * min(args.verbose, 2),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    try:
        result: int = args.func(args)
    except GitOpsBotError as e:
        # The safety net: commands report their own errors, but none may end in a traceback.
        sys.stderr.write(f"gitopsbot {args.command}: {e}\n")
        return 1 if isinstance(e, ConfigError) else 2
    return result
