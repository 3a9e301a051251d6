"""Typed, located reading of one parsed fleet file: strings, integers, durations, choices,
lists and nested sections, each wrong value recorded as a ``Problem`` (file, line, column,
field) with the nearest known word suggested; the shared patterns (SemVer, DNS-1123 labels,
durations) and the helpers every file format uses."""

from __future__ import annotations

import datetime as dt
import difflib
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from gitopsbot.core.fleet.located_yaml import LocatedList, LocatedMap
from gitopsbot.core.fleet.model import (
    Location,
)
from gitopsbot.errors import Problem

# SemVer 2.0.0, as Helm requires of chart versions (no leading "v" in a fleet repository).
SEMVER = re.compile(
    r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
    r"(?:-((?:0|[1-9]\d*|\d*[A-Za-z-][0-9A-Za-z-]*)(?:\.(?:0|[1-9]\d*|\d*[A-Za-z-][0-9A-Za-z-]*))*))?"
    r"(?:\+([0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*))?$"
)
# Go-style durations, whole seconds: 30s, 10m, 2h, 1h30m.
DURATION = re.compile(r"^(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?$")
# DNS-1123 label (namespaces, pool and cluster names) and Helm's release-name rule.
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
RELEASE_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
TIMEZONE = re.compile(r"^[A-Za-z][A-Za-z0-9_+\-]*(/[A-Za-z0-9_+\-]+)*$")
ENV_VAR = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
CHART_REPO = re.compile(r"^(https?|oci)://[^\s/]+\S*$")

T = TypeVar("T")


def kind_of(value: object) -> str:
    """A YAML-ish type name for messages (never the value: it may be a secret)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, Mapping):
        return "mapping"
    if isinstance(value, list):
        return "list"
    if isinstance(value, dt.date):
        return "date"
    return type(value).__name__


def nearest(word: str, known: Sequence[str]) -> str:
    """'did you mean ...?' for the nearest known word (difflib), else ''."""
    close = difflib.get_close_matches(word, list(known), n=1, cutoff=0.6)
    return f"did you mean '{close[0]}'?" if close else ""


def suggest(word: str, known: Sequence[str]) -> str:
    """'did you mean ...?' for the nearest known word (difflib), else the known words."""
    return nearest(word, known) or ("known: " + ", ".join(known) if known else "")


def parse_duration(text: str) -> int | None:
    """``1h30m`` → 5400; None when it is not a whole-second Go-style duration."""
    m = DURATION.match(text.strip())
    if not text.strip() or m is None:
        return None
    h, mi, s = (int(g) if g else 0 for g in m.groups())
    return h * 3600 + mi * 60 + s


def is_semver(version: str) -> bool:
    return bool(SEMVER.match(version))


@dataclass
class FieldReader:
    """Reads one parsed file, recording problems against it."""

    file: str
    problems: list[Problem] = field(default_factory=list)

    # -- locations -------------------------------------------------------------------------

    @staticmethod
    def key_at(node: Any, key: Any) -> tuple[int, int]:
        if isinstance(node, LocatedMap):
            return node.key_pos.get(key, node.pos)
        if isinstance(node, LocatedList) and isinstance(key, int) and 0 <= key < len(node):
            return node.item_pos[key]
        return FieldReader.node_at(node)

    @staticmethod
    def value_at(node: Any, key: Any) -> tuple[int, int]:
        if isinstance(node, LocatedMap) and key in node.value_pos:
            return node.value_pos[key]
        return FieldReader.key_at(node, key)

    @staticmethod
    def node_at(node: Any) -> tuple[int, int]:
        pos = getattr(node, "pos", None)
        return pos if isinstance(pos, tuple) else (1, 1)

    def add(self, at: tuple[int, int], fld: str, message: str, hint: str = "") -> None:
        self.problems.append(Problem(self.file, at[0], at[1], fld, message, hint))

    def loc(self, at: tuple[int, int]) -> Location:
        return Location(self.file, at[0], at[1])

    # -- structure -------------------------------------------------------------------------

    def mapping(
        self, node: Any, fld: str, at: tuple[int, int], known: Sequence[str] | None = None
    ) -> LocatedMap | None:
        """``node`` when it is a mapping (a problem when not); with ``known``, its keys are
        checked against them too (``known_keys``)."""
        if isinstance(node, LocatedMap):
            if known is not None:
                self.known_keys(node, fld, known)
            return node
        self.add(at, fld or "(document)", f"expected a mapping, got {kind_of(node)}")
        return None

    def known_keys(self, node: LocatedMap, prefix: str, known: Sequence[str]) -> None:
        for key in node:
            if not isinstance(key, str):
                self.add(
                    self.key_at(node, key),
                    prefix or "(document)",
                    f"key is a {kind_of(key)}, not a string",
                )
            elif key not in known:
                self.add(
                    self.key_at(node, key),
                    join(prefix, key),
                    "unknown key",
                    suggest(key, known),
                )

    def document(self, doc: Any, known: Sequence[str] | None = None) -> LocatedMap | None:
        """A file's top-level mapping (with ``known``, its keys checked); None for an empty
        file, which is no problem, or for one that is not a mapping, which is."""
        return None if doc is None else self.mapping(doc, "", (1, 1), known)

    def entries(self, node: LocatedMap, key: str, prefix: str) -> list[tuple[Any, tuple[int, int]]]:
        """The items of an optional list under ``key`` with where each stands; none when the
        key is absent, null or (a problem) not a list."""
        if node.get(key) is None:
            return []
        items = node[key]
        if not isinstance(items, LocatedList):
            self.add(
                self.value_at(node, key),
                join(prefix, key),
                f"expected a list, got {kind_of(items)}",
            )
            return []
        return [(item, self.key_at(items, i)) for i, item in enumerate(items)]

    def distinct_entries(
        self,
        top: LocatedMap,
        key: str,
        read: Callable[[FieldReader, int, Any, tuple[int, int]], T | None],
        by: str,
        name: Callable[[T], str],
        same: Callable[[str], str] = str,
    ) -> tuple[T, ...]:
        """The entries of the optional top-level list ``key``, each read by ``read`` (None:
        its problems are recorded). An entry whose ``by`` field names what an earlier one's
        did (``name``, compared as ``same`` makes it) is reported as listed twice and left out."""
        out: list[T] = []
        seen: set[str] = set()
        for i, (item, at) in enumerate(self.entries(top, key, "")):
            entry = read(self, i, item, at)
            if entry is None:
                continue
            if same(name(entry)) in seen:
                self.add(at, f"{key}[{i}].{by}", f"'{name(entry)}' is listed twice")
                continue
            seen.add(same(name(entry)))
            out.append(entry)
        return tuple(out)

    def section(self, node: LocatedMap, key: str, prefix: str, known: Sequence[str]) -> LocatedMap:
        """An optional nested mapping, checked for unknown keys; empty when absent or wrong."""
        if key not in node or node[key] is None:
            return LocatedMap()
        sub = self.mapping(node[key], join(prefix, key), self.value_at(node, key), known)
        return LocatedMap() if sub is None else sub

    # -- scalars ---------------------------------------------------------------------------

    def _get(
        self,
        node: LocatedMap,
        key: str,
        prefix: str,
        default: T,
        convert: Callable[[Any, str, tuple[int, int]], T | None],
        *,
        required: bool,
    ) -> T:
        fld = join(prefix, key)
        if key not in node:
            if required:
                self.add(self.node_at(node), fld, "required key is missing")
            return default
        at = self.value_at(node, key)
        value = node[key]
        if value is None and not required:
            return default
        out = convert(value, fld, at)
        return default if out is None else out

    def string(
        self,
        node: LocatedMap,
        key: str,
        prefix: str,
        default: str = "",
        *,
        required: bool = False,
        pattern: re.Pattern[str] | None = None,
        what: str = "",
    ) -> str:
        def conv(value: Any, fld: str, at: tuple[int, int]) -> str | None:
            if not isinstance(value, str):
                hint = "quote it" if isinstance(value, int | float) else ""
                self.add(at, fld, f"expected a string, got {kind_of(value)}", hint)
                return None
            if required and not value.strip():
                self.add(at, fld, "must not be empty")
                return None
            if pattern is not None and value and not pattern.match(value):
                self.add(at, fld, f"not a valid {what or 'value'}")
                return None
            return str(value)

        return self._get(node, key, prefix, default, conv, required=required)

    def integer(
        self,
        node: LocatedMap,
        key: str,
        prefix: str,
        default: int,
        *,
        low: int | None = None,
        high: int | None = None,
    ) -> int:
        def conv(value: Any, fld: str, at: tuple[int, int]) -> int | None:
            if isinstance(value, bool) or not isinstance(value, int):
                self.add(at, fld, f"expected an integer, got {kind_of(value)}")
                return None
            if (low is not None and value < low) or (high is not None and value > high):
                if high is None:
                    self.add(at, fld, f"must be at least {low}, got {int(value)}")
                else:
                    self.add(at, fld, f"{int(value)} is outside {low}..{high}")
                return None
            return int(value)

        return self._get(node, key, prefix, default, conv, required=False)

    def boolean(self, node: LocatedMap, key: str, prefix: str, default: bool) -> bool:
        def conv(value: Any, fld: str, at: tuple[int, int]) -> bool | None:
            if not isinstance(value, bool):
                hint = "write true or false" if isinstance(value, str) else ""
                self.add(at, fld, f"expected true or false, got {kind_of(value)}", hint)
                return None
            return bool(value)

        return self._get(node, key, prefix, default, conv, required=False)

    def duration(
        self,
        node: LocatedMap,
        key: str,
        prefix: str,
        default: T,
        *,
        minimum: int = 1,
        required: bool = False,
    ) -> int | T:
        def conv(value: Any, fld: str, at: tuple[int, int]) -> int | T | None:
            if not isinstance(value, str):
                hint = (
                    f"write '{value}s' for seconds"
                    if isinstance(value, int) and not isinstance(value, bool)
                    else ""
                )
                self.add(
                    at,
                    fld,
                    f"expected a duration such as 30s, 10m, 2h or 1h30m, got {kind_of(value)}",
                    hint,
                )
                return None
            seconds = parse_duration(value)
            if seconds is None:
                self.add(at, fld, "not a duration", "use whole h/m/s units: 30s, 10m, 2h, 1h30m")
                return None
            if seconds < minimum:
                self.add(at, fld, f"must be at least {minimum}s")
                return None
            return seconds

        fallback: int | T = default
        return self._get(node, key, prefix, fallback, conv, required=required)

    def choice(
        self,
        node: LocatedMap,
        key: str,
        prefix: str,
        default: str,
        options: Sequence[str],
        *,
        required: bool = False,
    ) -> str:
        def conv(value: Any, fld: str, at: tuple[int, int]) -> str | None:
            if not isinstance(value, str) or value not in options:
                shown = f"'{value}'" if isinstance(value, str) else f"a {kind_of(value)}"
                self.add(
                    at,
                    fld,
                    f"{shown} is not one of {', '.join(options)}",
                    nearest(str(value), options) if isinstance(value, str) else "",
                )
                return None
            return value

        return self._get(node, key, prefix, default, conv, required=required)

    def string_list(
        self, node: LocatedMap, key: str, prefix: str, default: tuple[str, ...]
    ) -> tuple[tuple[str, ...], list[tuple[int, int]]]:
        fld = join(prefix, key)
        if key not in node or node[key] is None:
            return default, []
        value = node[key]
        if not isinstance(value, LocatedList):
            self.add(self.value_at(node, key), fld, f"expected a list, got {kind_of(value)}")
            return default, []
        items: list[str] = []
        where: list[tuple[int, int]] = []
        for i, item in enumerate(value):
            at = self.key_at(value, i)
            if not isinstance(item, str):
                self.add(at, f"{fld}[{i}]", f"expected a string, got {kind_of(item)}")
                continue
            items.append(str(item))
            where.append(at)
        return tuple(items), where

    def labels(self, node: LocatedMap, key: str, prefix: str) -> dict[str, str]:
        """A mapping of string keys to string values (``labels:`` of a wave or of release.yaml);
        a number or boolean value is refused rather than turned into text, so ``tier: 1`` and
        ``tier: "1"`` cannot silently differ."""
        fld = join(prefix, key)
        if node.get(key) is None:
            return {}
        labels = self.mapping(node[key], fld, self.value_at(node, key))
        if labels is None:
            return {}
        out: dict[str, str] = {}
        for name, value in labels.items():
            if not isinstance(name, str) or not name.strip():
                self.add(self.key_at(labels, name), fld, "a label name must be a non-empty string")
                continue
            if not isinstance(value, str):
                hint = "quote it" if isinstance(value, bool | int | float) else ""
                self.add(
                    self.value_at(labels, name),
                    f"{fld}.{name}",
                    f"a label value must be a string, got {kind_of(value)}",
                    hint,
                )
                continue
            out[name] = value
        return out


def join(prefix: str, key: object) -> str:
    return f"{prefix}.{key}" if prefix else str(key)
