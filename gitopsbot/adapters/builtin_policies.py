"""The built-in policy rules, read from the installed package ``gitopsbot._builtin_policies``.

The repository's top-level ``policies/`` directory is the source of truth; setup.py installs it
as that package, so a wheel (and the container image, which installs only the wheel) carries
the rules, and an editable install maps the package back onto ``policies/``.
"""

from __future__ import annotations

from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path

from gitopsbot.errors import ConfigError

PACKAGE = "gitopsbot._builtin_policies"


def builtin_policy_documents(directory: Path | None = None) -> list[tuple[str, str]]:
    """(label, text) for every ``*.yaml`` of the built-in rules (or of ``directory``), by name."""
    root: Traversable
    if directory is not None:
        if not directory.is_dir():
            raise ConfigError(f"built-in policies not found at {directory}")
        root = directory
    else:
        try:
            root = resources.files(PACKAGE)
        except ModuleNotFoundError as exc:
            raise ConfigError(
                f"built-in policies not installed (package {PACKAGE} missing); "
                "reinstall gitopsbot (pip install .)"
            ) from exc
    return [
        (f"<builtin>/{entry.name}", entry.read_text(encoding="utf-8"))
        for entry in sorted(root.iterdir(), key=lambda e: e.name)
        if entry.name.endswith(".yaml") and entry.is_file()
    ]
