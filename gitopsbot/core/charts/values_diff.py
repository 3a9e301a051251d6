"""Keyed diff of two Helm values trees: added, removed and changed paths, secrets masked.

Paths are dotted with list items as ``[i]`` (``core.fleet.secrets.join_path``). Mappings are
compared key by key and lists item by item; where the type differs the whole value changes.
``apply_diff(a, diff_values(a, b)) == b`` for any two JSON-like trees. ``Change.before`` and
``.after`` hold real values (the executor may need them); anything shown to people goes
through ``masked`` first.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from functools import lru_cache
from typing import Any

from gitopsbot.core.fleet.secrets import (
    MASK,
    declared_paths,
    is_secret_key,
    join_path,
    looks_like_token,
    split_path,
    under_declared,
)

PathParts = tuple[str | int, ...]


class ChangeKind(StrEnum):
    ADDED = "added"
    REMOVED = "removed"
    CHANGED = "changed"


_MISSING: Any = object()


@dataclass(frozen=True, slots=True)
class Change:
    kind: ChangeKind
    parts: PathParts
    before: Any = None
    after: Any = None

    @property
    def path(self) -> str:
        return join_path(self.parts)


@dataclass(frozen=True, slots=True)
class ValuesDiff:
    changes: tuple[Change, ...]

    def __bool__(self) -> bool:
        return bool(self.changes)

    def of_kind(self, kind: ChangeKind) -> tuple[Change, ...]:
        return tuple(c for c in self.changes if c.kind == kind)

    def touches(self, prefix: str) -> bool:
        """Any change at or under the dotted ``prefix`` (also where a whole subtree holding
        ``prefix`` was added or removed)."""
        want = split_path(prefix)
        for c in self.changes:
            n = len(c.parts)
            if c.parts[: len(want)] == want:
                return True
            if n < len(want) and want[:n] == c.parts:
                rest = want[n:]
                if any(
                    isinstance(v, Mapping | list) and has_path(v, rest) for v in (c.before, c.after)
                ):
                    return True
        return False

    def masked(self, extra_paths: Iterable[str] = ()) -> ValuesDiff:
        """The same diff with secret values replaced by ``***`` (for PR text and logs)."""
        declared = declared_paths(extra_paths)
        return ValuesDiff(
            tuple(
                Change(
                    c.kind,
                    c.parts,
                    _mask(c.parts, c.before, declared, _secret_so_far(c.parts)),
                    _mask(c.parts, c.after, declared, _secret_so_far(c.parts)),
                )
                for c in self.changes
            )
        )


# Keys repeat across thousands of leaves and plans; the regex verdict per key is memoized.
_secret_key = lru_cache(maxsize=8192)(is_secret_key)


def _secret_so_far(parts: PathParts) -> bool:
    return any(isinstance(p, str) and _secret_key(p) for p in parts)


def _mask(parts: PathParts, value: Any, declared: tuple[PathParts, ...], secret: bool) -> Any:
    """Mask leaves at secret paths: a secret-looking key on the way (``secret``), a declared
    path or under one (core.secrets rules), or a token-shaped string anywhere."""
    if value is None or value == "" or isinstance(value, bool):
        return value
    if isinstance(value, Mapping):
        return {
            k: _mask((*parts, str(k)), v, declared, secret or _secret_key(str(k)))
            for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return [_mask((*parts, i), v, declared, secret) for i, v in enumerate(value)]
    if secret or looks_like_token(value) or under_declared(parts, declared):
        return MASK
    return value


def diff_values(source: Mapping[str, Any], target: Mapping[str, Any]) -> ValuesDiff:
    out: list[Change] = []
    _diff(source, target, (), out)
    return ValuesDiff(tuple(out))


def _same(a: Any, b: Any) -> bool:
    """Equal subtrees, type-strict (``true`` is not ``1``): C-speed ``==`` first, then the JSON
    text, which tells booleans, integers and floats apart. Most of a values file is unchanged,
    so this prunes the walk."""
    if a != b:
        return False
    dump = json.dumps
    try:
        return dump(a, sort_keys=True, default=repr) == dump(b, sort_keys=True, default=repr)
    except (TypeError, ValueError):  # keys of mixed types cannot be sorted: walk instead
        return False


def _diff(a: Any, b: Any, parts: PathParts, out: list[Change]) -> None:
    if isinstance(a, Mapping | list) and _same(a, b):
        return
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        for key in a:
            if key not in b:
                out.append(Change(ChangeKind.REMOVED, (*parts, key), before=a[key]))
            else:
                _diff(a[key], b[key], (*parts, key), out)
        for key in b:
            if key not in a:
                out.append(Change(ChangeKind.ADDED, (*parts, key), after=b[key]))
        return
    if isinstance(a, list) and isinstance(b, list):
        for i in range(min(len(a), len(b))):
            _diff(a[i], b[i], (*parts, i), out)
        for i in range(len(b), len(a)):
            out.append(Change(ChangeKind.REMOVED, (*parts, i), before=a[i]))
        for i in range(len(a), len(b)):
            out.append(Change(ChangeKind.ADDED, (*parts, i), after=b[i]))
        return
    # bool is an int in Python; a true -> 1 edit is still a change.
    if type(a) is not type(b) or a != b:
        out.append(Change(ChangeKind.CHANGED, parts, before=a, after=b))


def apply_diff(source: Mapping[str, Any], diff: ValuesDiff) -> Any:
    """``source`` with ``diff`` applied (a deep copy; the input is left alone)."""
    root: Any = copy.deepcopy(dict(source))
    # List removals by descending index so earlier indexes stay valid.
    removals = sorted(
        diff.of_kind(ChangeKind.REMOVED),
        key=lambda c: (len(c.parts), c.parts[-1] if isinstance(c.parts[-1], int) else -1),
        reverse=True,
    )
    for c in diff.changes:
        if c.kind == ChangeKind.CHANGED:
            if not c.parts:
                root = copy.deepcopy(c.after)
            else:
                _parent(root, c.parts)[c.parts[-1]] = copy.deepcopy(c.after)
    for c in removals:
        parent = _parent(root, c.parts)
        del parent[c.parts[-1]]
    for c in diff.changes:
        if c.kind == ChangeKind.ADDED:
            parent = _parent(root, c.parts)
            if isinstance(parent, list):
                parent.insert(int(c.parts[-1]), copy.deepcopy(c.after))
            else:
                parent[c.parts[-1]] = copy.deepcopy(c.after)
    return root


def _parent(root: Any, parts: PathParts) -> Any:
    node = root
    for p in parts[:-1]:
        node = node[p]
    return node


def get_path(values: Any, parts: Iterable[str | int], default: Any = None) -> Any:
    """The value at ``parts`` or ``default`` when any step is missing."""
    node: Any = values
    for p in parts:
        if isinstance(node, Mapping):
            if p not in node:
                return default
            node = node[p]
        elif isinstance(node, list) and isinstance(p, int) and 0 <= p < len(node):
            node = node[p]
        else:
            return default
    return node


def has_path(values: Any, parts: Iterable[str | int]) -> bool:
    return get_path(values, parts, _MISSING) is not _MISSING


def leaf_paths(values: Any, parts: PathParts = ()) -> list[PathParts]:
    """Every leaf path (empty mappings and lists count as leaves)."""
    if isinstance(values, Mapping) and values:
        return [p for k, v in values.items() for p in leaf_paths(v, (*parts, k))]
    if isinstance(values, list) and values:
        return [p for i, v in enumerate(values) for p in leaf_paths(v, (*parts, i))]
    return [parts]


def merge_values(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """Helm's coalescing: mappings merge key by key; anything else in ``override`` wins.

    A ``null`` in ``override`` deletes the key, as in Helm."""
    out: dict[str, Any] = dict(base)
    for key, value in override.items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = merge_values(out[key], value)
        else:
            out[key] = value
    return out
