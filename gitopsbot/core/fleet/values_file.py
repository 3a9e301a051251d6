"""``clusters/<name>/values.yaml``: the whole Helm values file, as plain data with the
location of every values path; secret-looking literals refused (docs/fleet-repo.md)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any

from gitopsbot.core.fleet import located_yaml, secrets
from gitopsbot.core.fleet.fields import FieldReader, kind_of
from gitopsbot.core.fleet.located_yaml import DEFAULT_LIMITS, PathPositions, Tagged, YamlLimits
from gitopsbot.core.fleet.model import CredentialsSpec, Location
from gitopsbot.errors import Problem


def read_values(
    r: FieldReader,
    text: str,
    credentials: CredentialsSpec,
    *,
    limits: YamlLimits = DEFAULT_LIMITS,
    strings: dict[str, str] | None = None,
) -> tuple[dict[str, Any], Mapping[str, Location], bool]:
    """The values as plain data, where each path is, and whether the file could be parsed at
    all. Problems go to ``r``: malformed YAML, values Helm cannot carry (a custom tag), a
    document that is not a mapping, secret-looking literals (never their text)."""
    got = located_yaml.read_paths(text, r.file, limits=limits, strings=strings)
    if got.problems:
        r.problems.extend(got.problems)
        return {}, {}, False
    locations = PathPositions(r.file, got.positions)
    for path, tag in got.tagged:
        where = locations.get(path)
        r.add(
            (where.line, where.column) if where else (1, 1),
            path or "(document)",
            f"unsupported YAML value ({tag})",
            "values hold mappings, lists, strings, numbers, booleans and null",
        )
    values: dict[str, Any] = {}
    if isinstance(got.value, dict):
        values = got.value
    elif got.value is not None:
        r.add((1, 1), "(document)", f"expected a mapping, got {kind_of(got.value)}")
    declared = [*credentials.secret_paths, *(s.values_path for s in credentials.secrets)]
    for path in secrets.find_secret_literals(values, declared):
        where = locations.get(path, Location(r.file, 1, 1))
        r.problems.append(
            Problem(
                r.file,
                where.line,
                where.column,
                path,
                "secret-looking literal: secrets never sit in values.yaml",
                "leave it empty and reference it in credentials.yaml under secrets:",
            )
        )
    return values, locations, True


def plain_manifest(node: Any, r: FieldReader, path: str = "") -> Any:
    """A located manifest (smoke-test.yaml's Pod) as plain data; a value with a custom tag is
    a problem at its position."""
    if isinstance(node, dict):
        out: dict[str, Any] = {}
        for key, child in node.items():
            k = key if isinstance(key, str) else str(key)
            sub = f"{path}.{k}" if path else k
            out[k] = plain_manifest(child, r, sub)
            if isinstance(child, Tagged):
                r.add(r.key_at(node, key), sub, f"unsupported YAML value ({child.tag})")
        return out
    if isinstance(node, list):
        return [plain_manifest(child, r, f"{path}[{i}]") for i, child in enumerate(node)]
    if isinstance(node, dt.date):
        return node.isoformat()
    return None if isinstance(node, Tagged) else node
