"""The one YAML reader for every file the bot reads: bounded, located, fast. Pure.

Text (or bytes, through ``decode``) in, values out. libyaml (PyYAML's C parser) composes the
node graph, keeping each node's line and column; scalars are resolved by ``core.fleet.yaml_scalars``
with the YAML 1.2 rules ruamel.yaml's round trip applied before, so a file means what it
meant. Round-trip editing, which must keep comments, stays with ruamel in ``core.fleet.yamledit``.

Limits (``YamlLimits``: file size, nesting depth, alias count, nodes after alias expansion;
``core.fleet.yaml_bounds``) are checked on the composed graph before any value is built, so an alias
bomb is refused in milliseconds, located at the first alias that takes the document past the
node budget; 50,000 nested ``[`` is a located problem, never a RecursionError.

Every failure is a ``Problem`` (file, line, column, message). ``read`` returns them, for
callers that collect every problem of a repository; ``load`` and ``load_all`` raise them as
one ``FleetError``.

Shapes: ``read``/``load`` give ``LocatedMap``/``LocatedList`` (dict and list subclasses with
the position of the collection, of each key and of each value) or, with ``located=False``,
plain dict and list, an alias giving the same object as its anchor (as ruamel's did).
``read_paths`` gives plain values and a ``PathPositions`` table (values path → position), an
alias expanded at each path: what ``values.yaml`` needs for messages, in one walk.

(About 500 lines: the two builders share the composing, measuring and duplicate handling;
scalars, limits and pre-parse problems live in ``yaml_scalars``, ``yaml_bounds`` and
``yaml_problems``.)
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml
from yaml._yaml import CParser
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from gitopsbot.core.fleet.model import Location
from gitopsbot.core.fleet.yaml_bounds import (
    DEFAULT_LIMITS,
    MAX_DEPTH,
    Position,
    Refused,
    YamlLimits,
    locate_overflow,
    measure,
)
from gitopsbot.core.fleet.yaml_problems import decode, size_problem, syntax_problem, too_large
from gitopsbot.core.fleet.yaml_scalars import Tagged, resolve_plain, resolve_tagged
from gitopsbot.errors import FleetError, Problem

__all__ = [
    "DEFAULT_LIMITS",
    "MAX_DEPTH",
    "LocatedList",
    "LocatedMap",
    "PathPositions",
    "PathsRead",
    "Position",
    "Tagged",
    "YamlLimits",
    "decode",
    "load",
    "load_all",
    "read",
    "read_paths",
    "too_large",
]

_PLAIN = "?"  # our resolver's tag for a plain (unquoted, untagged) scalar
_STR = "tag:yaml.org,2002:str"
_SEQ = "tag:yaml.org,2002:seq"
_MAP = "tag:yaml.org,2002:map"
_STANDARD = "tag:yaml.org,2002:"
_MERGE_TAGS = (_PLAIN, "tag:yaml.org,2002:merge")


class LocatedMap(dict[Any, Any]):
    """A mapping with the 1-based (line, column) of itself, each key and each value."""

    __slots__ = ("key_pos", "pos", "value_pos")

    def __init__(self, pos: Position = (1, 1)) -> None:
        super().__init__()
        self.pos = pos
        self.key_pos: dict[Any, Position] = {}
        self.value_pos: dict[Any, Position] = {}


class LocatedList(list[Any]):
    """A list with the 1-based (line, column) of itself and of each item."""

    __slots__ = ("item_pos", "pos")

    def __init__(self, pos: Position = (1, 1)) -> None:
        super().__init__()
        self.pos = pos
        self.item_pos: list[Position] = []


class PathPositions(Mapping[str, Location]):
    """values path (``a.b[0]["c.d"]``) → Location, stored compactly: one int a path, the file
    once (a 1,000-cluster fleet holds a million of them)."""

    __slots__ = ("_packed", "file")

    def __init__(self, file: str, packed: dict[str, int]) -> None:
        self.file = file
        self._packed = packed

    def __getitem__(self, path: str) -> Location:
        packed = self._packed[path]
        return Location(self.file, packed >> 32, packed & 0xFFFFFFFF)

    def __iter__(self) -> Iterator[str]:
        return iter(self._packed)

    def __len__(self) -> int:
        return len(self._packed)


@dataclass(slots=True)
class PathsRead:
    """``read_paths``' answer: the value, where each path is, which paths hold a tag the bot
    does not interpret, and the problems that stopped the read (then ``value`` is None)."""

    value: Any = None
    positions: dict[str, int] = field(default_factory=dict)  # path -> line << 32 | column
    tagged: list[tuple[str, str]] = field(default_factory=list)  # (path, tag)
    problems: list[Problem] = field(default_factory=list)


class _Resolver(yaml.resolver.BaseResolver):
    """Tags only what is certain while composing: resolving plain scalars is ours."""

    def resolve(self, kind: Any, value: Any, implicit: Any) -> str:
        if kind is ScalarNode:
            return _PLAIN if implicit[0] else _STR
        return _SEQ if kind is SequenceNode else _MAP


class _Loader(CParser, _Resolver):
    def __init__(self, stream: str) -> None:
        CParser.__init__(self, stream)
        _Resolver.__init__(self)


class _Duplicate(Exception):
    pass


def _events(text: str) -> Iterator[yaml.Event]:
    loader = _Loader(text)
    try:
        while loader.check_event():
            event = loader.get_event()
            if event is not None:
                yield event
    finally:
        loader.dispose()


def _scalar(node: ScalarNode) -> Any:
    tag = node.tag
    if tag == _PLAIN:
        return resolve_plain(node.value)
    if tag == _STR:
        return node.value
    return resolve_tagged(tag, node.value)


def _is_merge(key_node: Node) -> bool:
    return (
        key_node.__class__ is ScalarNode and key_node.tag in _MERGE_TAGS and key_node.value == "<<"
    )


def _hashable(key: Any) -> Any:
    if isinstance(key, list | dict) or (isinstance(key, Tagged) and not isinstance(key.value, str)):
        return Tagged(_MAP, "(a collection as a key)")
    return key


def _merge_sources(key_node: Node, value_node: Node) -> list[MappingNode]:
    sources = value_node.value if isinstance(value_node, SequenceNode) else [value_node]
    if not all(isinstance(s, MappingNode) for s in sources):
        mark = key_node.start_mark
        raise Refused((mark.line + 1, mark.column + 1), "a merge key (<<) needs a mapping")
    return list(sources)


# -- building values: located, or plain ---------------------------------------------------------


class _Builder:
    """Values from a measured graph; an alias is the object built for its anchor."""

    def __init__(self, located: bool) -> None:
        self.located = located
        self.done: dict[int, Any] = {}

    def build(self, node: Node) -> Any:
        cls = node.__class__
        if cls is ScalarNode:
            return _scalar(node)  # type: ignore[arg-type]
        known = self.done.get(id(node))
        if known is not None:
            return known
        value: Any = (
            self._list(node)  # type: ignore[arg-type]
            if cls is SequenceNode
            else self._map(node)  # type: ignore[arg-type]
        )
        if node.tag not in (_SEQ, _MAP) and not node.tag.startswith(_STANDARD):
            value = Tagged(node.tag, value)
        return value

    def _list(self, node: SequenceNode) -> list[Any]:
        out: list[Any]
        if self.located:
            mark = node.start_mark
            out = LocatedList((mark.line + 1, mark.column + 1))
            out.item_pos.extend(
                (c.start_mark.line + 1, c.start_mark.column + 1) for c in node.value
            )
        else:
            out = []
        self.done[id(node)] = out
        build = self.build
        for child in node.value:
            out.append(build(child))
        return out

    def _map(self, node: MappingNode) -> dict[Any, Any]:
        out: dict[Any, Any]
        located = self.located
        if located:
            mark = node.start_mark
            out = LocatedMap((mark.line + 1, mark.column + 1))
            key_pos, value_pos = out.key_pos, out.value_pos
        else:
            out = {}
        self.done[id(node)] = out
        build = self.build
        merges: list[MappingNode] = []
        for key_node, value_node in node.value:
            if _is_merge(key_node):
                merges.extend(_merge_sources(key_node, value_node))
                continue
            key = _hashable(build(key_node))
            if key in out:
                raise _Duplicate
            out[key] = build(value_node)
            if located:
                km, vm = key_node.start_mark, value_node.start_mark
                key_pos[key] = (km.line + 1, km.column + 1)
                value_pos[key] = (vm.line + 1, vm.column + 1)
        for source in merges:
            built = build(source)
            for key, value in built.items():
                if key not in out:
                    out[key] = value
                    if located and isinstance(built, LocatedMap):
                        key_pos[key] = built.key_pos.get(key, built.pos)
                        value_pos[key] = built.value_pos.get(key, built.pos)
        return out


def _child_path(prefix: str, part: str) -> str:
    """``core.fleet.secrets.join_path`` one key at a time (the same text)."""
    if "." in part or "[" in part or "]" in part or '"' in part or not part:
        return f"{prefix}[{json.dumps(part)}]"
    return f"{prefix}.{part}" if prefix else part


_SHARED_STRING = 200  # longer scalars are rarely equal across files: not worth a lookup


class _PathBuilder:
    """Plain values from a measured graph, with each values path's position; an alias is
    built again at each path it is used under (bounded by ``max_nodes``)."""

    def __init__(self, out: PathsRead, strings: dict[str, str]) -> None:
        self.positions = out.positions
        self.tagged = out.tagged
        self.strings = strings  # shared across files: equal keys and paths stored once

    def build(self, node: Node, path: str) -> Any:
        cls = node.__class__
        if cls is ScalarNode:
            value = _scalar(node)  # type: ignore[arg-type]
        elif cls is SequenceNode:
            value = self._list(node, path)  # type: ignore[arg-type]
        else:
            value = self._map(node, path)  # type: ignore[arg-type]
        if isinstance(value, Tagged) or (
            cls is not ScalarNode
            and node.tag not in (_SEQ, _MAP)
            and not node.tag.startswith(_STANDARD)
        ):
            self.tagged.append((path, node.tag))
            return None
        return value

    def _scalar_at(self, node: ScalarNode, path: str) -> Any:
        tag = node.tag
        if tag == _PLAIN:
            value = resolve_plain(node.value)
        elif tag == _STR:
            value = node.value
        else:
            value = resolve_tagged(tag, node.value)
        if value.__class__ is str and len(value) <= _SHARED_STRING:
            # Clusters carry mostly the chart's defaults: equal strings are stored once.
            return self.strings.setdefault(value, value)
        if value.__class__ is Tagged:
            self.tagged.append((path, tag))
            return None
        return value

    def _list(self, node: SequenceNode, path: str) -> list[Any]:
        out: list[Any] = []
        positions, strings, build = self.positions, self.strings, self.build
        for i, child in enumerate(node.value):
            sub = f"{path}[{i}]"
            sub = strings.setdefault(sub, sub)
            mark = child.start_mark
            positions[sub] = ((mark.line + 1) << 32) | (mark.column + 1)
            if child.__class__ is ScalarNode:
                out.append(self._scalar_at(child, sub))
            else:
                out.append(build(child, sub))
        return out

    def _map(self, node: MappingNode, path: str) -> dict[str, Any]:
        # The hot loop of reading values.yaml: scalars are handled inline, not through build.
        out: dict[str, Any] = {}
        positions, strings, build = self.positions, self.strings, self.build
        merges: list[MappingNode] = []
        for key_node, value_node in node.value:
            if key_node.value == "<<" and _is_merge(key_node):
                merges.extend(_merge_sources(key_node, value_node))
                continue
            key = self._key(key_node)
            if key in out:
                raise _Duplicate
            sub = _child_path(path, key)
            sub = strings.setdefault(sub, sub)
            mark = key_node.start_mark
            positions[sub] = ((mark.line + 1) << 32) | (mark.column + 1)
            if value_node.__class__ is ScalarNode:
                out[key] = self._scalar_at(value_node, sub)
            else:
                out[key] = build(value_node, sub)
        for source in merges:
            for key_node, value_node in source.value:
                key = self._key(key_node)
                if key not in out and not _is_merge(key_node):
                    sub = _child_path(path, key)
                    mark = key_node.start_mark
                    positions[sub] = ((mark.line + 1) << 32) | (mark.column + 1)
                    out[key] = build(value_node, sub)
        return out

    def _key(self, node: Node) -> str:
        """A values key is a string (Helm's values are JSON): others are written as text."""
        if node.__class__ is ScalarNode:
            raw = node.value if node.tag == _STR else _scalar(node)
            key = raw if raw.__class__ is str else str(raw)
        else:
            key = f"<{type(node).__name__}>"
        return self.strings.setdefault(key, key)


# -- duplicate keys ----------------------------------------------------------------------------


def _key_text(node: Node) -> str:
    if isinstance(node, ScalarNode):
        return str(_scalar(node))
    return f"<{type(node).__name__}>"


def _duplicate_problems(root: Node, file: str) -> list[Problem]:
    """Every duplicate key, at its second occurrence, with its dotted path."""
    problems: list[Problem] = []
    seen_nodes: set[int] = set()
    todo: list[tuple[Node, str]] = [(root, "")]
    while todo:
        node, path = todo.pop()
        if id(node) in seen_nodes:
            continue
        seen_nodes.add(id(node))
        if isinstance(node, MappingNode):
            first: dict[str, int] = {}
            for key_node, value_node in node.value:
                key = _key_text(key_node)
                sub = f"{path}.{key}" if path else key
                if key != "<<":
                    mark = key_node.start_mark
                    if key in first:
                        problems.append(
                            Problem(
                                file,
                                mark.line + 1,
                                mark.column + 1,
                                sub,
                                "duplicate key",
                                f"first defined at line {first[key]}",
                            )
                        )
                    else:
                        first[key] = mark.line + 1
                todo.append((value_node, sub))
        elif isinstance(node, SequenceNode):
            todo.extend((item, f"{path}[{i}]") for i, item in enumerate(node.value))
    problems.sort(key=lambda p: (p.line, p.column))
    return problems or [Problem(file, 0, 0, "", "duplicate key")]


def _compose(
    text: str, file: str, limits: YamlLimits, *, single: bool
) -> tuple[list[Node], list[Problem]]:
    """The measured node graphs of the text's documents, or the problems that stop them."""
    too_big = size_problem(text, file, limits)
    if too_big is not None:
        return [], [too_big]
    loader = _Loader(text)
    roots: list[Node] = []
    try:
        if single:
            root = loader.get_single_node()
            if root is not None:
                roots.append(root)
        else:
            while loader.check_node():
                node = loader.get_node()
                if node is not None:
                    roots.append(node)
    except yaml.YAMLError as exc:
        return [], [syntax_problem(exc, text, file, limits)]
    finally:
        loader.dispose()
    budget = limits
    for root in roots:
        measured = measure(root, budget)
        if measured is None:
            refused = locate_overflow(_events(text), limits)
            return [], [Problem(file, *refused.pos, "", refused.message, refused.hint)]
        nodes, aliases = measured
        budget = YamlLimits(
            budget.max_bytes,
            budget.max_depth,
            budget.max_aliases - aliases,
            budget.max_nodes - nodes,
        )
    return roots, []


def _documents(
    text: str, file: str, limits: YamlLimits, located: bool, *, single: bool
) -> tuple[list[Any], list[Problem]]:
    roots, problems = _compose(text, file, limits, single=single)
    out: list[Any] = []
    for root in roots:
        try:
            out.append(_Builder(located).build(root))
        except _Duplicate:
            return [], _duplicate_problems(root, file)
        except Refused as exc:
            return [], [Problem(file, *exc.pos, "", exc.message, exc.hint)]
    return out, problems


def read(
    text: str, file: str, *, limits: YamlLimits = DEFAULT_LIMITS, located: bool = True
) -> tuple[Any, list[Problem]]:
    """One document (None when empty) and the problems that stopped it (then the value is
    None). Never raises for bad input."""
    docs, problems = _documents(text, file, limits, located, single=True)
    return (docs[0] if docs else None), problems


def read_paths(
    text: str,
    file: str,
    *,
    limits: YamlLimits = DEFAULT_LIMITS,
    strings: dict[str, str] | None = None,
) -> PathsRead:
    """One document as plain values with the position of every values path (see the module
    docstring). ``strings`` is a table shared by the files of one read (keys and paths that
    are equal are then stored once). Never raises for bad input."""
    out = PathsRead()
    roots, out.problems = _compose(text, file, limits, single=True)
    if roots:
        try:
            out.value = _PathBuilder(out, {} if strings is None else strings).build(roots[0], "")
        except _Duplicate:
            out.problems = _duplicate_problems(roots[0], file)
        except Refused as exc:
            out.problems = [Problem(file, *exc.pos, "", exc.message, exc.hint)]
        if out.problems:
            out.value, out.positions, out.tagged = None, {}, []
    return out


def load(
    text: str, file: str, *, limits: YamlLimits = DEFAULT_LIMITS, located: bool = False
) -> Any:
    """One document as plain values (``located=True``: with positions); raises FleetError."""
    doc, problems = read(text, file, limits=limits, located=located)
    if problems:
        raise FleetError(problems)
    return doc


def load_all(
    text: str, file: str, *, limits: YamlLimits = DEFAULT_LIMITS, located: bool = False
) -> list[Any]:
    """Every document of a stream (empty ones dropped); raises FleetError."""
    docs, problems = _documents(text, file, limits, located, single=False)
    if problems:
        raise FleetError(problems)
    return [d for d in docs if d is not None]
