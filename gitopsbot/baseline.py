"""Reading fleet files as a *baseline*: what is there, literal secrets included.

The loader refuses a secret-looking literal in values.yaml, rightly for a desired state. A
baseline (``gitopsbot plan --from REF``, the watched branch under a pull request) is what is
there, and the change that moves the literals out of values.yaml is exactly the one that needs
a plan. So when the loader's only complaints are such literals, each is replaced by ``***`` in
the file's text (``core.fleet.yamledit``: the line stays where it was) and the files are read again:
the literal never reaches a spec, a plan or a message. The callers get, per values file, each
literal's values path and where it is written, for the plan's note (docs/plan.md). Any other
problem raises the loader's FleetError unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping

from gitopsbot.core.fleet.model import ClusterSpec, Fleet, Location
from gitopsbot.core.fleet.secrets import MASK
from gitopsbot.core.fleet.yamledit import YamlEditError, set_values
from gitopsbot.errors import FleetError
from gitopsbot.fleetrepo import load_cluster, load_fleet
from gitopsbot.ports.files import FileTree

# How the loader refuses a secret-looking literal in values.yaml (``Problem.message``).
SECRET_LITERAL = "secret-looking literal"
VALUES_FILE = "values.yaml"

Literals = dict[str, Location]  # values path → where it is written


class _Replaced:
    """A tree with some files' contents replaced (values files with the literals masked)."""

    def __init__(self, base: FileTree, files: Mapping[str, bytes]) -> None:
        self._base = base
        self._files = dict(files)

    @property
    def label(self) -> str:
        return self._base.label

    def read(self, path: str) -> bytes | None:
        return self._files[path] if path in self._files else self._base.read(path)

    def list(self, directory: str) -> list[str]:
        return self._base.list(directory)


def _literals(error: FleetError) -> dict[str, Literals] | None:
    """values file → its literals, when every problem of ``error`` is a literal secret in a
    values.yaml; None when anything else is wrong too."""
    found: dict[str, Literals] = {}
    for p in error.problems:
        literal = p.message.startswith(SECRET_LITERAL) and p.field
        if not literal or not p.file.endswith(f"/{VALUES_FILE}"):
            return None
        found.setdefault(p.file, {})[p.field] = Location(p.file, p.line, p.column)
    return found or None


def _masked(tree: FileTree, literals: Mapping[str, Literals], error: FleetError) -> FileTree:
    files: dict[str, bytes] = {}
    for path, found in literals.items():
        try:
            text = (tree.read(path) or b"").decode("utf-8")
            files[path] = set_values(text, dict.fromkeys(found, MASK)).encode("utf-8")
        except (UnicodeDecodeError, YamlEditError):
            raise error from None
    return _Replaced(tree, files)


def load_cluster_baseline(tree: FileTree, name: str) -> tuple[ClusterSpec, Literals]:
    """``fleetrepo.load_cluster`` for a baseline: the cluster with its values.yaml literals
    masked, and those literals. Raises FleetError for any other problem."""
    try:
        return load_cluster(tree, name), {}
    except FleetError as exc:
        literals, error = _literals(exc), exc
        if literals is None:
            raise
    spec = load_cluster(_masked(tree, literals, error), name)
    return spec, {path: loc for found in literals.values() for path, loc in found.items()}


def load_fleet_baseline(tree: FileTree) -> tuple[Fleet, dict[str, Literals]]:
    """``fleetrepo.load_fleet`` for a baseline: the fleet with every values.yaml literal
    masked, and the literals per cluster name. Raises FleetError for any other problem."""
    try:
        return load_fleet(tree), {}
    except FleetError as exc:
        literals, error = _literals(exc), exc
        if literals is None:
            raise
    fleet = load_fleet(_masked(tree, literals, error))
    # "clusters/<name>/values.yaml" → <name>
    return fleet, {path.split("/")[-2]: found for path, found in literals.items()}
