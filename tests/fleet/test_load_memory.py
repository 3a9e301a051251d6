"""``fleetrepo.load_fleet`` pauses the cyclic garbage collector while it parses (a quarter of
the time of a 1,000-cluster fleet otherwise), which is safe only while parsing makes no
reference cycles: each one would stay in memory until the collector runs again."""

from __future__ import annotations

import gc
from collections.abc import Callable

from gitopsbot.fleetrepo import load_fleet
from tests.fleet.fleet_testing import MemoryTree, alias_bomb


def test_loading_a_fleet_leaves_no_cyclic_garbage(tree_with: Callable[..., MemoryTree]) -> None:
    good = tree_with({})
    bad = tree_with({"clusters/staging/values.yaml": alias_bomb()})
    load_fleet(good)  # first calls fill caches (time zones, regexes)
    was_enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        for _ in range(3):
            load_fleet(good)
            try:
                load_fleet(bad)  # the refused path too: the events replay, the exceptions
            except Exception:  # noqa: BLE001
                pass
        assert gc.collect() == 0
    finally:
        if was_enabled:
            gc.enable()


def test_the_collector_is_on_again_after_a_load(tree_with: Callable[..., MemoryTree]) -> None:
    assert gc.isenabled()
    load_fleet(tree_with({}))
    assert gc.isenabled()
