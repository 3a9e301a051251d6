"""Every command and subcommand's --help has examples (README: "every command has"): walks
the parser tree of gitopsbot.cli, so a command added to COMMANDS without examples fails here."""

from __future__ import annotations

import argparse
from collections.abc import Iterator

import pytest

from gitopsbot.cli import COMMANDS, build_parser, main


def _commands(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _commands(sub, (*path, name))


ALL = sorted(path for path, _ in _commands(build_parser()))


def test_the_walk_sees_every_command() -> None:
    top = {path[0] for path in ALL if path}
    assert top == {name.replace("_", "-") for name in COMMANDS}
    assert ("sandbox", "up") in ALL and ("sandbox", "down") in ALL


@pytest.mark.parametrize("path", ALL, ids=lambda p: " ".join(p) or "gitopsbot")
def test_help_has_examples(path: tuple[str, ...], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main([*path, "--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert "\nexamples:\n" in out, f"gitopsbot {' '.join(path)} --help has no examples"
    examples = out.split("\nexamples:\n", 1)[1]
    assert "gitopsbot" in examples  # they show the command itself
