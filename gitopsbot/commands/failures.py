"""How commands end on the bot's errors: the line on stderr and the exit status (1 the
fleet's files or settings are wrong, 2 something they read was out of reach).
"""

from __future__ import annotations

import sys

from gitopsbot.errors import (
    ChartError,
    ChartUnavailable,
    ConfigError,
    FleetError,
    GitError,
    GitOpsBotError,
    SecretUnavailable,
)


def report_start(command: str, exc: GitOpsBotError) -> int:
    """Say why ``gitopsbot <command>`` could not start and return its exit status: 1 for
    a setting (a secret reference it names unset is one too), 2 for anything out of reach."""
    sys.stderr.write(f"gitopsbot {command}: {exc}\n")
    return 1 if isinstance(exc, ConfigError | SecretUnavailable) else 2


def report(command: str, exc: GitOpsBotError, chart_dir_hint: str) -> int:
    """Say why ``gitopsbot <command>`` stopped and return its exit status; an unreachable
    chart repository names ``chart_dir_hint``, the way to read charts from disk instead."""
    name = f"gitopsbot {command}"
    if isinstance(exc, FleetError):
        sys.stderr.write(f"{name}: {len(exc.problems)} problem(s):\n{exc}\n")
        return 1
    if isinstance(exc, ChartUnavailable):
        sys.stderr.write(
            f"{name}: chart repository unreachable: {exc}\n"
            f"  offline? read charts from disk: {chart_dir_hint}\n"
        )
        return 2
    sys.stderr.write(f"{name}: {exc}\n")
    # A chart or Git error is out of reach even when it is also a setting's fault.
    if isinstance(exc, ConfigError) and not isinstance(exc, ChartError | GitError):
        return 1
    return 2
