"""Test support for tests/fleet: where the example fleet is, and an in-memory FileTree."""

from __future__ import annotations

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
