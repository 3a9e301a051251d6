"""A command imports only what it runs: the parser of one command is built without the others.

Every ``gitopsbot`` the tests, the chart's Job and a person's shell start paid for importing all
twelve commands (the Kubernetes client, the scheduler, the servers) before: about 0.8 s each.
"""

from __future__ import annotations

import argparse
import subprocess
import sys

import pytest

from gitopsbot import cli
from gitopsbot.commands import SUMMARIES


def _modules_after(*argv: str) -> set[str]:
    """The modules a fresh interpreter holds after ``gitopsbot ARGV`` (run in-process, so
    sys.modules can be read at its end)."""
    code = (
        "import sys\n"
        "from gitopsbot import cli\n"
        "try:\n"
        f"    cli.main({list(argv)!r})\n"
        "except SystemExit:\n"
        "    pass\n"
        "print('\\n'.join(sorted(sys.modules)))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    ).stdout
    return set(out.split())


@pytest.mark.slow
@pytest.mark.parametrize(
    ("argv", "absent"),
    [
        (("--version",), {"gitopsbot.commands.status", "pygit2", "kubernetes", "rich"}),
        (("--help",), {"gitopsbot.commands.run", "gitopsbot.app.bot", "kubernetes"}),
        (("status", "--help"), {"kubernetes", "apscheduler", "gitopsbot.commands.run"}),
        (("validate", "--help"), {"kubernetes", "apscheduler", "gitopsbot.commands.sandbox"}),
        (("run", "--help"), {"kubernetes", "apscheduler", "gitopsbot.commands.status"}),
    ],
)
def test_a_command_imports_only_what_it_runs(argv: tuple[str, ...], absent: set[str]) -> None:
    loaded = _modules_after(*argv)
    assert "gitopsbot.cli" in loaded
    assert not absent & loaded


@pytest.mark.slow
def test_the_chosen_command_is_parsed_in_full() -> None:
    loaded = _modules_after("validate", "--help")
    assert "gitopsbot.commands.validate" in loaded


def test_the_top_level_help_is_the_same_built_lazily_or_in_full() -> None:
    assert cli.build_parser([]).format_help() == cli.build_parser().format_help()


def test_every_command_s_parser_is_the_same_alone_or_among_all() -> None:
    whole = cli.build_parser()
    for name in cli.COMMANDS:
        alone = cli.build_parser([name])
        spelling = name.replace("_", "-")
        assert _sub(alone, spelling).format_help() == _sub(whole, spelling).format_help()


def _sub(parser: argparse.ArgumentParser, spelling: str) -> argparse.ArgumentParser:
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return action.choices[spelling]


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["status", "--fleet", "x"], "status"),
        (["-v", "--log-format", "json", "run", "--once"], "run"),
        (["post-render", "--policy", "p"], "post_render"),
        (["--help"], None),
        (["--version"], None),
        ([], None),
        # A value that spells a command after the command is the command's business.
        (["plan", "--cluster", "status"], "plan"),
    ],
)
def test_the_command_is_the_first_word_that_names_one(argv: list[str], named: str | None) -> None:
    assert cli.command_named(argv) == named


def test_every_command_has_its_help_line() -> None:
    assert set(SUMMARIES) == set(cli.COMMANDS)
    assert all(line and len(line) < 90 for line in SUMMARIES.values())
