"""The command line: ``gitopsbot <command> ...``. Each command lives in gitopsbot/commands/."""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from collections.abc import Callable, Collection, Sequence
from typing import Any

from gitopsbot import __version__, app, settings
from gitopsbot.commands import SUMMARIES
from gitopsbot.errors import ConfigError, GitOpsBotError

# Order is the order shown in --help.
COMMANDS = tuple(SUMMARIES)

EPILOG = """\
examples:
  gitopsbot demo                                   # the whole story in a local sandbox
  gitopsbot validate examples/fleet                # check a fleet repository
  gitopsbot plan --cluster staging --fleet examples/fleet --chart-dir examples/charts/repo
  gitopsbot --log-format json run --once --fleet-url <fleet-url>   # JSON log lines (or after run)
  gitopsbot -v validate examples/fleet             # INFO log lines of any command
  eval "$(gitopsbot tools --fetch --shell)"        # the pinned helm and kubectl on PATH
  gitopsbot <command> --help                       # more on one command

<...> is yours to fill in (a URL, a path, a name); a comment `needs ...` says what an example
needs besides a local sandbox (tests/test_help_examples.py runs every other one).

logs: stderr, text by default (--log-format json or $GITOPSBOT_LOG_FORMAT=json: one JSON object
per line with cluster, operation and step); WARNING and up, and INFO of gitopsbot under `run`;
-v INFO, -vv DEBUG (docs/logging.md).

Ctrl-C (or SIGTERM): any command stops at a safe point, exit 130; run and propose's loop stop
after the running pass (0), status --watch ends (0); a second Ctrl-C exits at once
(docs/commands.md#interrupts).
"""


def build_parser(full: Collection[str] = COMMANDS) -> argparse.ArgumentParser:
    """The command line, the commands in ``full`` built in full and the others only their
    --help lines, so a command imports only what it runs (``gitopsbot --version`` nothing)."""
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
    parser.add_argument("--log-format", **_log_format_option(default=None))
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMANDS:
        if name in full:
            module = importlib.import_module(f"gitopsbot.commands.{name}")
            module.register(sub)
        else:
            sub.add_parser(_spelling(name), help=SUMMARIES[name])
    for each in sub.choices.values():
        # Also after the command (`gitopsbot run ... --log-format json`, as the Helm chart
        # passes it); SUPPRESS: when absent there, the global option's value stands.
        each.add_argument("--log-format", **_log_format_option(default=argparse.SUPPRESS))
    return parser


def _spelling(name: str) -> str:
    return name.replace("_", "-")


def command_named(argv: Sequence[str]) -> str | None:
    """The command ``argv`` names: its first word that is one (the global options before it
    take no command names as values); None for ``gitopsbot --help`` and the like."""
    spellings = {_spelling(name): name for name in COMMANDS}
    return next((spellings[word] for word in argv if word in spellings), None)


LOG_FORMATS = ("text", "json")
# Commands whose own loggers say what they do at the default level (docs/logging.md).
INFO_COMMANDS = frozenset({"run"})


def _log_format_option(default: object) -> dict[str, Any]:
    return {
        "choices": LOG_FORMATS,
        "default": default,
        "metavar": "FORMAT",
        "help": "log lines on stderr as text (default) or json, one object per line "
        "($GITOPSBOT_LOG_FORMAT; docs/logging.md)",
    }


def _configure_logging(args: argparse.Namespace) -> Callable[[], None] | None:
    """-v: INFO for every logger, -vv: DEBUG; else WARNING, and INFO for gitopsbot's own
    loggers under ``run`` (a long-running bot says what it is doing)."""
    fmt = args.log_format or settings.log_format() or "text"
    if fmt not in LOG_FORMATS:
        raise ConfigError(f"GITOPSBOT_LOG_FORMAT={fmt}: give one of {', '.join(LOG_FORMATS)}")
    args.resolved_log_format = fmt  # commands that print lines of their own follow it
    root_level = logging.WARNING - 10 * min(args.verbose, 2)
    levels = {"gitopsbot": min(root_level, logging.INFO)} if args.command in INFO_COMMANDS else {}
    return app.configure_logging(fmt, root_level=root_level, levels=levels)


def main(argv: Sequence[str] | None = None) -> int:
    words = sys.argv[1:] if argv is None else argv
    named = command_named(words)
    args = build_parser([named] if named else []).parse_args(words)
    try:
        undo = _configure_logging(args)
    except ConfigError as e:
        sys.stderr.write(f"gitopsbot {args.command}: {e}\n")
        return 1
    # Ctrl-C: KeyboardInterrupt at a safe point (never inside a pygit2 callback), exit 130;
    # a second one forces. run, propose's loop and status --watch choose their own way.
    # An error or status after an aborting Ctrl-C is the interrupt's doing (EINTR): 130 too.
    restore = app.interrupts.install(args.command)
    try:
        try:
            result: int = args.func(args)
        except GitOpsBotError as e:
            if app.interrupts.aborted():
                raise KeyboardInterrupt from None
            # The safety net: commands report their own errors, but none may end in a traceback.
            sys.stderr.write(f"gitopsbot {args.command}: {e}\n")
            return 1 if isinstance(e, ConfigError) else 2
        if app.interrupts.aborted() and result != app.interrupts.EXIT_INTERRUPTED:
            raise KeyboardInterrupt  # (a command returning 130 has said so itself)
    except KeyboardInterrupt:
        sys.stderr.write(f"\ngitopsbot {args.command}: interrupted\n")
        return app.interrupts.EXIT_INTERRUPTED
    finally:
        restore()
        if undo is not None:  # main() called again in one process starts afresh
            undo()
    return result
