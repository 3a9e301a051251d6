"""No import cycles among the modules of ``gitopsbot.core`` and ``gitopsbot.bot`` (#31 item 2),
TYPE_CHECKING imports included: a module that needs another's names at type-checking time
only still makes the two one unit a reader must hold together. Two modules that need each
other share a Protocol (the consumer says what it needs) or move the shared names out.

import-linter's layers keep the rooms apart (tests/test_layering.py); this keeps the modules
inside ``core`` and ``bot`` free of cycles, with the graph import-linter itself builds (grimp)."""

from __future__ import annotations

import grimp

ROOMS = ("gitopsbot.core", "gitopsbot.bot")


def cycles(graph: grimp.ImportGraph, rooms: tuple[str, ...]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    mods = sorted(m for m in graph.modules if m.startswith(rooms))
    edges = {
        m: sorted(d for d in graph.find_modules_directly_imported_by(m) if d.startswith(rooms))
        for m in mods
    }
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []
    for root in mods:
        if root in index:
            continue
        work = [(root, iter(edges[root]))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(edges[w])))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    x = stack.pop()
                    on.discard(x)
                    comp.append(x)
                    if x == v:
                        break
                if len(comp) > 1:
                    found.append(sorted(comp))
    return found


def test_core_and_bot_have_no_import_cycles() -> None:
    graph = grimp.build_graph("gitopsbot", include_external_packages=False)
    assert cycles(graph, ROOMS) == []


def test_the_check_finds_a_cycle() -> None:
    """The check itself: a graph with a cycle through three modules is reported."""
    graph = grimp.ImportGraph()
    for a, b in (("x.core.a", "x.core.b"), ("x.core.b", "x.core.c"), ("x.core.c", "x.core.a")):
        graph.add_import(importer=a, imported=b)
    graph.add_import(importer="x.core.d", imported="x.core.a")
    assert cycles(graph, ("x.core",)) == [["x.core.a", "x.core.b", "x.core.c"]]
