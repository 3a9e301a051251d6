"""Test support for tests/fleet: the example fleet, an in-memory FileTree, an alias bomb."""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "fleet"


class MemoryTree:
    """A FileTree over a dict of POSIX path -> bytes (the port's contract, nothing more)."""

    def __init__(self, files: Mapping[str, bytes | str], label: str = "<memory>") -> None:
        self._files = {p: d.encode() if isinstance(d, str) else d for p, d in files.items()}
        self._label = label

    @property
    def label(self) -> str:
        return self._label

    def read(self, path: str) -> bytes | None:
        return self._files.get(path)

    def list(self, directory: str) -> list[str]:
        prefix = directory.rstrip("/") + "/" if directory else ""
        names = {p[len(prefix) :].split("/", 1)[0] for p in self._files if p.startswith(prefix)}
        return sorted(names)


def alias_bomb(levels: int = 9, width: int = 9) -> str:
    """``a: &a [lol ×width]``, ``b: &b [*a ×width]``, … : width**levels nodes once expanded
    (nine of nine: 387 million), in about 400 bytes."""
    names = "abcdefghijklmnop"[:levels]
    lines = [f"a: &a [{', '.join(['lol'] * width)}]"]
    for prev, name in itertools.pairwise(names):
        lines.append(f"{name}: &{name} [{', '.join([f'*{prev}'] * width)}]")
    return "\n".join(lines) + "\n"
