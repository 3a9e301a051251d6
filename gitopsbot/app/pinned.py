"""The pinned helm 4, helm 3 and kubectl (``adapters.binaries``) for a person's shell:
``gitopsbot tools``.

Part of the composition root (``gitopsbot.app``): commands reach the cache through here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from gitopsbot import settings
from gitopsbot.adapters import binaries

TOOLS: tuple[str, ...] = tuple(binaries.PINS)


@dataclass(frozen=True, slots=True)
class PinnedTool:
    name: str  # as ``python -m gitopsbot.adapters.binaries`` names it: helm4, helm3, kubectl
    version: str
    names_on_path: tuple[str, ...]  # what it is called in ``path_directory()``
    path: Path | None  # None: not in the cache yet


def find(name: str, *, fetch: bool) -> PinnedTool:
    """``name`` from the cache, fetched first if ``fetch``; BinaryUnavailable if that fails."""
    tool = _tool(name)
    cache = settings.cache_dir()
    path = binaries.ensure(tool, cache) if fetch else binaries.cached(tool, cache)
    return PinnedTool(name, binaries.PINS[tool].version, binaries.PATH_NAMES[tool], path)


def path_directory(found: Mapping[str, Path]) -> Path:
    """The directory of links to put on PATH, holding each of ``found``."""
    return binaries.path_directory(
        {_tool(name): path for name, path in found.items()}, settings.cache_dir()
    )


def _tool(name: str) -> binaries.Tool:
    for tool in binaries.PINS:
        if tool == name:
            return tool
    raise ValueError(f"not a pinned tool: {name}")
