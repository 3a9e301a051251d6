"""FileTree over a directory on disk, refusing paths that escape it and symbolic links."""

from __future__ import annotations

from pathlib import Path

from gitopsbot.errors import SymlinkRefused
from gitopsbot.ports.files import FileTree


class DirectoryTree(FileTree):
    def __init__(self, root: Path) -> None:
        self._root = root.resolve()

    @property
    def label(self) -> str:
        return str(self._root)

    def _path(self, path: str) -> Path | None:
        parts = [p for p in path.split("/") if p not in ("", ".")]
        here = self._root
        for i, part in enumerate(parts):
            if part == "..":
                return None
            here = here / part
            if here.is_symlink():
                raise SymlinkRefused("/".join(parts[: i + 1]))
        full = here.resolve()
        if full != self._root and self._root not in full.parents:
            return None
        return full

    def read(self, path: str) -> bytes | None:
        full = self._path(path)
        if full is None or not full.is_file():
            return None
        return full.read_bytes()

    def list(self, directory: str) -> list[str]:
        try:
            full = self._path(directory)
        except SymlinkRefused:
            return []  # read() of the same path names it
        if full is None or not full.is_dir():
            return []
        return sorted(p.name for p in full.iterdir())
