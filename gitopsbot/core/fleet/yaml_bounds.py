"""The limits of ``core.fleet.located_yaml``, checked on libyaml's composed node graph before any
value is built; and, once one is broken, the replay of the parse events that says where.

An alias is a shared node in the graph, so measuring visits each distinct node once and an
alias bomb (nine levels of nine aliases: 387 million nodes expanded) is measured in the time
of its 400 bytes of text. Pure."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode

Position = tuple[int, int]


@dataclass(frozen=True, slots=True)
class YamlLimits:
    """Bounds on one YAML file (docs/fleet-repo.md, ``limits:`` in gitopsbot.yaml). The
    defaults fit the real chart's 45 KB values.yaml and its CRDs many times over."""

    max_bytes: int = 1 << 20  # 1 MiB: Helm keeps a whole release in a 1 MiB Secret anyway
    max_depth: int = 100  # the real chart's deepest file (a CRD) nests 27 levels
    max_aliases: int = 1000
    max_nodes: int = 500_000  # scalars, mappings and lists, aliases expanded


DEFAULT_LIMITS = YamlLimits()
# The deepest ``max_depth`` may be set: values are built recursively (two Python frames a
# level) and libyaml refuses nesting deeper than 1000 on its own.
MAX_DEPTH = 250


class Refused(Exception):
    """A broken limit, at the position that broke it."""

    def __init__(self, pos: Position, message: str, hint: str = "") -> None:
        super().__init__(message)
        self.pos = pos
        self.message = message
        self.hint = hint


def measure(root: Node, limits: YamlLimits) -> tuple[int, int] | None:
    """(nodes after alias expansion, alias count) of a composed graph; None when the graph is
    recursive or passes a limit (the caller then replays the events to locate it).

    Each distinct node is visited once: an alias costs the size of its anchor's subtree,
    remembered, so a bomb is measured in the time of its text, not of its expansion."""
    walker = _Measure(limits.max_depth)
    try:
        total, _ = walker.walk(root, 1)
    except _Overflow:
        return None
    if total > limits.max_nodes or walker.aliases > limits.max_aliases:
        return None
    return total, walker.aliases


class _Measure:
    """A class, not a closure: a recursive closure is a reference cycle, left for the cyclic
    collector, which ``fleetrepo.load_fleet`` pauses while it parses."""

    def __init__(self, max_depth: int) -> None:
        self.max_depth = max_depth
        self.known: dict[int, tuple[int, int]] = {}  # node -> (expanded size, height)
        self.open: set[int] = set()
        self.aliases = 0

    def walk(self, node: Node, depth: int) -> tuple[int, int]:
        key = id(node)
        seen = self.known.get(key)
        if seen is not None:
            self.aliases += 1
            if seen[1] and depth + seen[1] - 1 > self.max_depth:
                raise _Overflow
            return seen
        if isinstance(node, ScalarNode):
            self.known[key] = (1, 0)
            return 1, 0
        if key in self.open or depth > self.max_depth:
            raise _Overflow
        self.open.add(key)
        total, below = 1, 0
        children = (
            [c for pair in node.value for c in pair]
            if isinstance(node, MappingNode)
            else node.value
        )
        for child in children:
            size, height = self.walk(child, depth + 1)
            total += size
            if height > below:
                below = height
        self.open.discard(key)
        self.known[key] = (total, below + 1)
        return total, below + 1


class _Overflow(Exception):
    pass


def locate_overflow(events: Iterable[yaml.Event], limits: YamlLimits) -> Refused:
    """Replay the parse events to find where the document first breaks a limit: the first
    alias that takes it past the node budget, the first too deep collection..."""
    anchors: dict[str, tuple[int, int]] = {}  # anchor -> (expanded size, height)
    stack: list[list[Any]] = []  # open collections: [anchor, size so far, height below]
    open_anchors: set[str] = set()
    total = 0
    aliases = 0
    hint_nodes = "an alias bomb? limits.maxNodes in gitopsbot.yaml"
    hint_depth = "limits.maxDepth in gitopsbot.yaml"

    def count(size: int, height: int) -> None:
        nonlocal total
        total += size
        if stack:
            stack[-1][1] += size
            stack[-1][2] = max(stack[-1][2], height)

    for event in events:
        mark = event.start_mark
        pos = (mark.line + 1, mark.column + 1) if mark is not None else (0, 0)
        if isinstance(event, yaml.AliasEvent):
            name = event.anchor or ""
            aliases += 1
            if name in open_anchors:
                return Refused(
                    pos, f"alias *{name} refers to its own anchor (a recursive document)"
                )
            if aliases > limits.max_aliases:
                return Refused(
                    pos,
                    f"more than {limits.max_aliases} aliases",
                    "limits.maxAliases in gitopsbot.yaml",
                )
            size, height = anchors.get(name, (1, 0))
            if len(stack) + height > limits.max_depth:
                return Refused(
                    pos,
                    f"nested deeper than {limits.max_depth} levels (aliases expanded)",
                    hint_depth,
                )
            if total + size > limits.max_nodes:
                return Refused(
                    pos,
                    f"alias *{name} expands the document past {limits.max_nodes} nodes",
                    hint_nodes,
                )
            count(size, height)
        elif isinstance(event, yaml.ScalarEvent):
            if total + 1 > limits.max_nodes:
                return Refused(pos, f"more than {limits.max_nodes} nodes", hint_nodes)
            if event.anchor is not None:
                anchors[event.anchor] = (1, 0)
            count(1, 0)
        elif isinstance(event, yaml.CollectionStartEvent):
            if len(stack) + 1 > limits.max_depth:
                return Refused(pos, f"nested deeper than {limits.max_depth} levels", hint_depth)
            if total + 1 > limits.max_nodes:
                return Refused(pos, f"more than {limits.max_nodes} nodes", hint_nodes)
            total += 1
            if event.anchor is not None:
                open_anchors.add(event.anchor)
            stack.append([event.anchor, 1, 0])
        elif isinstance(event, yaml.CollectionEndEvent):
            name, size, below = stack.pop()
            if name is not None:
                open_anchors.discard(name)
                anchors[name] = (size, below + 1)
            total -= size  # counted as it came; count() adds it again to the parent
            count(size, below + 1)
    return Refused((0, 0), "the document breaks the reader's limits")
