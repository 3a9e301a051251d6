"""R23: where a values diff changes the hypervisor port, under any pool template (the chart's
``cluster.pool.componentConfig.hypervisor.portNumber`` or another pool's), also where a whole
subtree holding it was added or removed (``core.planning.plan`` re-exports these names)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from gitopsbot.core.charts.values_diff import ValuesDiff, get_path
from gitopsbot.core.fleet.secrets import join_path

# Where the hypervisor port is written, under any pool template: the chart's
# ``cluster.pool.componentConfig.hypervisor.portNumber`` or another pool's (R23).
HYPERVISOR_PORT_KEY: tuple[str, ...] = ("componentConfig", "hypervisor", "portNumber")
DEFAULT_HYPERVISOR_PORT = 8000  # the CRD default where no port is written
_ABSENT: Any = object()


@dataclass(frozen=True, slots=True)
class PortChange:
    path: str
    before: Any
    after: Any


def _ports_under(
    parts: tuple[str | int, ...], value: Any
) -> Iterator[tuple[tuple[str | int, ...], Any]]:
    """(path, port) for every hypervisor port written at or under ``parts`` (``value``)."""
    width = len(HYPERVISOR_PORT_KEY)
    for k in range(1, width + 1):  # ``parts`` already ends inside the key
        if parts[-k:] == HYPERVISOR_PORT_KEY[:k]:
            found = get_path(value, HYPERVISOR_PORT_KEY[k:], _ABSENT)
            if found is not _ABSENT:
                yield (*parts, *HYPERVISOR_PORT_KEY[k:]), found
    # Deeper: walk containers only, building a path per container, never per leaf.
    if isinstance(value, Mapping):
        hypervisor = get_path(value, HYPERVISOR_PORT_KEY[:-1], None)
        if isinstance(hypervisor, Mapping) and HYPERVISOR_PORT_KEY[-1] in hypervisor:
            yield (*parts, *HYPERVISOR_PORT_KEY), hypervisor[HYPERVISOR_PORT_KEY[-1]]
        children: Iterable[tuple[str | int, Any]] = value.items()
    elif isinstance(value, list):
        children = enumerate(value)
    else:
        return
    for key, child in children:
        if isinstance(child, Mapping | list):
            yield from _ports_under((*parts, key), child)


def hypervisor_port_changes(diff: ValuesDiff) -> tuple[PortChange, ...]:
    """Every hypervisor ``portNumber`` whose effective value changes (R23), also where a whole
    subtree holding it was added or removed; an unset port is the CRD default (8000)."""
    sides: dict[tuple[str | int, ...], list[Any]] = {}
    last = HYPERVISOR_PORT_KEY[-1]
    for c in diff.changes:
        for side, value in enumerate((c.before, c.after)):
            if not isinstance(value, Mapping | list) and c.parts[-1:] != (last,):
                continue  # a scalar elsewhere: most of a diff
            for parts, port in _ports_under(c.parts, value):
                sides.setdefault(parts, [None, None])[side] = port
    out = []
    for parts, (before, after) in sides.items():
        old = DEFAULT_HYPERVISOR_PORT if before is None else before
        new = DEFAULT_HYPERVISOR_PORT if after is None else after
        if old != new:
            out.append(PortChange(join_path(parts), old, new))
    return tuple(sorted(out, key=lambda p: p.path))
