"""FileTree over a directory on disk, refusing paths that escape it."""

from __future__ import annotations

from pathlib import Path


class DirectoryTree:
    def __init__(self, root: Path) -> None:
        self._root = root.resolve()

    @property
    def label(self) -> str:
        return str(self._root)

    def _path(self, path: str) -> Path | None:
        full = (self._root / path).resolve()
        if full != self._root and self._root not in full.parents:
            return None
        return full

    def read(self, path: str) -> bytes | None:
        full = self._path(path)
        if full is None or not full.is_file():
            return None
        return full.read_bytes()

    def list(self, directory: str) -> list[str]:
        full = self._path(directory)
        if full is None or not full.is_dir():
            return []
        return sorted(p.name for p in full.iterdir())
