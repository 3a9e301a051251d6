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


def example_files() -> dict[str, str]:
    """Every file of examples/fleet, by path relative to it."""
    return {
        p.relative_to(EXAMPLE).as_posix(): p.read_text()
        for p in sorted(EXAMPLE.rglob("*"))
        if p.is_file()
    }


def example_tree(
    changes: Mapping[str, str | None], files: Mapping[str, str] | None = None
) -> MemoryTree:
    """The example fleet (or ``files``) in memory, with some files replaced (str) or removed
    (None)."""
    tree: dict[str, str] = dict(example_files() if files is None else files)
    for path, text in changes.items():
        if text is None:
            tree.pop(path, None)
        else:
            tree[path] = text
    return MemoryTree(tree)


def alias_bomb(levels: int = 9, width: int = 9) -> str:
    """``a: &a [lol ×width]``, ``b: &b [*a ×width]``, … : width**levels nodes once expanded
    (nine of nine: 387 million), in about 400 bytes."""
    names = "abcdefghijklmnop"[:levels]
    lines = [f"a: &a [{', '.join(['lol'] * width)}]"]
    for prev, name in itertools.pairwise(names):
        lines.append(f"{name}: &{name} [{', '.join([f'*{prev}'] * width)}]")
    return "\n".join(lines) + "\n"
