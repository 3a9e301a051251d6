"""``clusters/<name>/values.yaml``: the whole Helm values file, as plain data with the
location of every values path; secret-looking literals refused (docs/fleet-repo.md)."""

from __future__ import annotations

import datetime as dt
from typing import Any

from ruamel.yaml.comments import CommentedMap, CommentedSeq

from gitopsbot.core import secrets
from gitopsbot.core.fleet.fields import FieldReader, kind_of
from gitopsbot.core.model import (
    Location,
)


def to_plain(
    node: Any, path: tuple[str | int, ...], locs: dict[str, Location], reader: FieldReader
) -> Any:
    """CommentedMap/Seq → dict/list, recording where each values path is."""
    if isinstance(node, CommentedMap):
        out: dict[str, Any] = {}
        for key, child in node.items():
            k = key if isinstance(key, str) else str(key)
            sub = (*path, k)
            locs[secrets.join_path(sub)] = reader.loc(reader.key_at(node, key))
            out[k] = to_plain(child, sub, locs, reader)
        return out
    if isinstance(node, CommentedSeq):
        items: list[Any] = []
        for i, child in enumerate(node):
            sub = (*path, i)
            locs[secrets.join_path(sub)] = reader.loc(reader.key_at(node, i))
            items.append(to_plain(child, sub, locs, reader))
        return items
    if isinstance(node, bool) or node is None:
        return node
    if isinstance(node, str):
        return str(node)
    if isinstance(node, int):
        return int(node)
    if isinstance(node, float):
        return float(node)
    if isinstance(node, dt.date):
        return node.isoformat()  # Helm reads an unquoted date as a string
    # Custom tags, !!binary, !!set...: nothing Helm's values can carry.
    where = locs.get(secrets.join_path(path))
    at = (where.line, where.column) if where else (1, 1)
    tag = getattr(getattr(node, "tag", None), "value", None) or kind_of(node)
    reader.add(
        at,
        secrets.join_path(path) if path else "(document)",
        f"unsupported YAML value ({tag})",
        "values hold mappings, lists, strings, numbers, booleans and null",
    )
    return None
