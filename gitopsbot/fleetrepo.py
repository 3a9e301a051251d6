"""Read a fleet repository through a ``FileTree`` (a directory or a Git commit) into a ``Fleet``.

The reading is here; the parsing is pure, in ``core.fleet``. Everything wrong is
collected and raised as one ``FleetError`` (file, line, column, field for each problem).
"""

from __future__ import annotations

import gc
import threading
import zoneinfo
from collections import OrderedDict
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from functools import lru_cache

from gitopsbot.core.fleet import assembly, located_yaml
from gitopsbot.core.fleet.fields import suggest
from gitopsbot.core.fleet.layout import CLUSTERS_DIR, POLICIES_DIR, SETTINGS_FILE
from gitopsbot.core.fleet.located_yaml import DEFAULT_LIMITS, YamlLimits
from gitopsbot.core.fleet.model import ClusterSpec, Fleet
from gitopsbot.core.fleet.settings_file import parse_settings
from gitopsbot.errors import FleetError, Problem, SymlinkRefused
from gitopsbot.ports.files import DirIds, FileTree


@lru_cache(maxsize=1)
def known_timezones() -> frozenset[str] | None:
    """The IANA names the system's tz database knows; None when it has none installed (then
    only the syntax of a time zone name is checked)."""
    names = frozenset(zoneinfo.available_timezones())
    return names or None


def _decode(
    data: bytes, path: str, problems: list[Problem], limits: YamlLimits = DEFAULT_LIMITS
) -> str | None:
    """UTF-8 text, or None with the reason recorded: too large, binary, not UTF-8."""
    if len(data) > limits.max_bytes:
        problems.append(located_yaml.too_large(path, len(data), limits))
        return None
    text, errs = located_yaml.decode(data, path)
    problems.extend(errs)
    return text


def _read(
    tree: FileTree, path: str, problems: list[Problem], limits: YamlLimits = DEFAULT_LIMITS
) -> str | None:
    try:
        data = tree.read(path)
    except SymlinkRefused as exc:
        problems.extend(exc.problems)
        return None
    return None if data is None else _decode(data, path, problems, limits)


def _cluster_files(
    tree: FileTree, name: str, problems: list[Problem], limits: YamlLimits = DEFAULT_LIMITS
) -> dict[str, str]:
    directory = f"{CLUSTERS_DIR}/{name}"
    files: dict[str, str] = {}
    for entry in tree.list(directory):
        if not entry.endswith((".yaml", ".yml")):
            continue
        text = _read(tree, f"{directory}/{entry}", problems, limits)
        if text is not None:
            files[entry] = text
    return files


def _cluster_names(tree: FileTree, problems: list[Problem] | None = None) -> list[str]:
    """Every directory under clusters/ (an entry that reads as a file, README.md, is not one);
    each name is then held to the one rule, a DNS-1123 label (``..x`` and ``UPPER`` alike). A
    symbolic link there is recorded in ``problems``, never followed."""
    names = []
    for name in tree.list(CLUSTERS_DIR):
        try:
            is_file = tree.read(f"{CLUSTERS_DIR}/{name}") is not None
        except SymlinkRefused as exc:
            if problems is not None:
                problems.extend(exc.problems)
            continue
        if not is_file:
            names.append(name)
    return names


def _limits(tree: FileTree) -> YamlLimits:
    """gitopsbot.yaml's ``limits:`` for reading one cluster alone; the defaults when the file
    is missing or wrong (``load_fleet`` reports that; a cluster is still bounded)."""
    text = _read(tree, SETTINGS_FILE, [])
    if text is None:
        return DEFAULT_LIMITS
    try:
        return parse_settings(text).limits
    except FleetError:
        return DEFAULT_LIMITS


_gc_lock = threading.Lock()
_gc_pauses = 0
_gc_was_enabled = False


@contextmanager
def _gc_paused() -> Iterator[None]:
    """No cyclic garbage collection while a fleet is parsed: it allocates millions of dicts
    and lists, none in a cycle, and the collector's passes over them cost a quarter of the
    time of a 1,000-cluster fleet and find nothing. Counted, so parallel loads (the bot's
    threads) turn it back on only when the last one ends, and only if it was on."""
    global _gc_pauses, _gc_was_enabled
    with _gc_lock:
        if _gc_pauses == 0:
            _gc_was_enabled = gc.isenabled()
            gc.disable()
        _gc_pauses += 1
    try:
        yield
    finally:
        with _gc_lock:
            _gc_pauses -= 1
            if _gc_pauses == 0 and _gc_was_enabled:
                gc.enable()


def load_fleet(tree: FileTree) -> Fleet:
    """The whole fleet repository: gitopsbot.yaml, clusters/*/, policies/*.yaml.

    Raises ``FleetError`` carrying every problem found in every file.
    """
    with _gc_paused():
        return _load_fleet(tree)


def _load_fleet(tree: FileTree) -> Fleet:
    problems: list[Problem] = []
    try:
        raw = tree.read(SETTINGS_FILE)
    except SymlinkRefused as exc:
        problems.extend(exc.problems)
        raw = b""
    # Absent: parse_fleet reports it missing. Undecodable: reported here, parsed as empty.
    settings_text = None if raw is None else (_decode(raw, SETTINGS_FILE, problems) or "")
    limits = DEFAULT_LIMITS
    if settings_text:
        try:
            limits = parse_settings(settings_text).limits
        except FleetError:
            pass  # parse_fleet reports it; the files are read with the default limits
    clusters: dict[str, Mapping[str, str]] = {}
    parsed: dict[str, ClusterSpec] = {}
    keys: dict[str, tuple[str, str, YamlLimits]] = {}
    for name in _cluster_names(tree, problems):
        key = _spec_key(tree, name, limits)
        known = _SPECS.get(key) if key is not None else None
        if known is not None:
            parsed[name] = known
            continue
        if key is not None:
            keys[name] = key
        clusters[name] = _cluster_files(tree, name, problems, limits)
    policies = _policy_documents(tree, problems)
    try:
        fleet = assembly.parse_fleet(
            settings_text,
            clusters,
            policy_documents=policies,
            known_timezones=known_timezones(),
            extra_problems=problems,
            parsed=parsed,
        )
    except FleetError as exc:
        raise FleetError(_not_missing(exc.problems, problems)) from None
    for name, key in keys.items():
        _SPECS.put(key, fleet.clusters[name])
    return fleet


class _SpecsByDir:
    """Cluster specs by (name, the Git tree id of its directory, the limits read with):
    a spec is a function of its directory's files and gitopsbot.yaml's ``limits:`` alone, and
    a tree id names the directory's exact content (file names, modes, bytes). So a new head
    of a 1,000-cluster fleet is parsed for the clusters a merge changed, not for all of them
    (#29: the whole fleet parsed at each merge was half of its first action, ~1.5 s).
    Bounded (least recently used first out); shared by the threads of the process."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._lock = threading.Lock()
        self._specs: OrderedDict[tuple[str, str, YamlLimits], ClusterSpec] = OrderedDict()

    def get(self, key: tuple[str, str, YamlLimits]) -> ClusterSpec | None:
        with self._lock:
            found = self._specs.get(key)
            if found is not None:
                self._specs.move_to_end(key)
            return found

    def put(self, key: tuple[str, str, YamlLimits], spec: ClusterSpec) -> None:
        with self._lock:
            self._specs[key] = spec
            self._specs.move_to_end(key)
            while len(self._specs) > self._size:
                self._specs.popitem(last=False)


_SPECS = _SpecsByDir(4096)


def _spec_key(tree: FileTree, name: str, limits: YamlLimits) -> tuple[str, str, YamlLimits] | None:
    """The cache key of a cluster's directory, when the tree can name its content (a Git
    commit); None for a working directory (read every time). The name is part of it: two
    clusters with byte-identical directories share a tree id, not a spec (its name, and the
    paths its problems and verdicts point at)."""
    if not isinstance(tree, DirIds):
        return None
    found = tree.dir_id(f"{CLUSTERS_DIR}/{name}")
    return (name, found, limits) if found is not None else None


def _not_missing(found: Sequence[Problem], unread: Sequence[Problem]) -> list[Problem]:
    """``found`` without "missing" for the files that are there but were refused (a symlink,
    a binary file...): their own problem says what is wrong."""
    refused = {p.file for p in unread}
    return [p for p in found if not (p.file in refused and p.message.startswith("missing"))]


def _policy_documents(tree: FileTree, problems: list[Problem]) -> list[tuple[str, str]]:
    policies: list[tuple[str, str]] = []
    for entry in tree.list(POLICIES_DIR):
        if entry.endswith((".yaml", ".yml")):
            path = f"{POLICIES_DIR}/{entry}"
            text = _read(tree, path, problems)
            if text is not None:
                policies.append((path, text))
    return policies


def policy_documents(tree: FileTree) -> tuple[tuple[str, str], ...]:
    """The fleet's own rules (``policies/*.yaml``) as (path, text), for the apply-time gate.
    Raises FleetError when one cannot be read."""
    problems: list[Problem] = []
    found = _policy_documents(tree, problems)
    if problems:
        raise FleetError(problems)
    return tuple(found)


def load_cluster(tree: FileTree, name: str) -> ClusterSpec:
    """One cluster (``clusters/<name>/``) without the rest of the fleet. Raises FleetError;
    a cluster that does not exist is reported with the names that do."""
    names = _cluster_names(tree)
    if name not in names:
        hint = suggest(name, names) if names else "no clusters/ directory"
        raise FleetError([Problem(f"{CLUSTERS_DIR}/{name}", 0, 0, "", "no such cluster", hint)])
    return _parse_cluster(tree, name)


def find_cluster(tree: FileTree, name: str) -> ClusterSpec | None:
    """``load_cluster``, or None when ``clusters/<name>/`` does not exist at all: what the bot
    reads to apply one cluster's change, without parsing the rest of the fleet (a fleet of
    hundreds of clusters costs one cluster's parse per merge). Raises FleetError."""
    # Listing the one directory, not clusters/ (whose entries would each be probed).
    if name in (".", "..") or "/" in name or not tree.list(f"{CLUSTERS_DIR}/{name}"):
        return None
    return _parse_cluster(tree, name)


def _parse_cluster(tree: FileTree, name: str) -> ClusterSpec:
    problems: list[Problem] = []
    limits = _limits(tree)
    files = _cluster_files(tree, name, problems, limits)
    try:
        spec = assembly.parse_cluster(name, files, known_timezones=known_timezones(), limits=limits)
    except FleetError as exc:
        raise FleetError([*problems, *_not_missing(exc.problems, problems)]) from None
    if problems:
        raise FleetError(problems)
    return spec
