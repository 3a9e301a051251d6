"""The built-in policy rules shipped in the repository's ``policies/`` directory."""

from __future__ import annotations

from pathlib import Path

import gitopsbot
from gitopsbot.errors import ConfigError

# The package sits next to policies/ in a checkout and in the container image (/app).
POLICIES_DIR = Path(gitopsbot.__file__).resolve().parent.parent / "policies"


def builtin_policy_documents(directory: Path = POLICIES_DIR) -> list[tuple[str, str]]:
    """(label, text) for every ``*.yaml`` in ``directory``, sorted by name."""
    if not directory.is_dir():
        raise ConfigError(f"built-in policies not found at {directory}")
    return [
        (f"<builtin>/{p.name}", p.read_text(encoding="utf-8"))
        for p in sorted(directory.glob("*.yaml"))
    ]
