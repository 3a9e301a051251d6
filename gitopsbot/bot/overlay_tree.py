"""A commit's tree with some files replaced: what a proposal branch will hold before it is
committed, read as any tree is (its plan is made from it)."""

from __future__ import annotations

from collections.abc import Mapping

from gitopsbot.ports.files import FileTree


class OverlayTree:
    """A commit's tree with some files replaced: the proposal branch before it is committed."""

    def __init__(self, base: FileTree, files: Mapping[str, bytes]) -> None:
        self._base = base
        self._files = dict(files)

    @property
    def label(self) -> str:
        return f"{self._base.label}+proposal"

    def read(self, path: str) -> bytes | None:
        return self._files[path] if path in self._files else self._base.read(path)

    def list(self, directory: str) -> list[str]:
        names = set(self._base.list(directory))
        prefix = f"{directory.rstrip('/')}/"
        for path in self._files:
            if path.startswith(prefix):
                names.add(path[len(prefix) :].split("/", 1)[0])
        return sorted(names)
