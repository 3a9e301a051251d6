"""``fleetrepo.load_fleet`` pauses the cyclic garbage collector while it parses (a quarter of
the time of a 1,000-cluster fleet otherwise), which is safe only while parsing makes no
reference cycles: each one would stay in memory until the collector runs again.

Measured in a fresh interpreter: in a pytest worker, other tests' threads (servers, sandboxes)
make garbage of their own while the collector is off, and ``gc.collect`` counts it too."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable

from gitopsbot.fleetrepo import load_fleet
from tests.fleet.fleet_testing import ROOT

MEASURE = """
import gc
from gitopsbot.fleetrepo import load_fleet
from tests.fleet.fleet_testing import alias_bomb, example_tree

good = example_tree({})
bad = example_tree({"clusters/staging/values.yaml": alias_bomb()})


def both():
    load_fleet(good)
    try:
        load_fleet(bad)  # the refused path too: the events replay, the exceptions
    except Exception:
        pass


both()  # first calls fill caches (time zones, regexes) and import what they need
gc.collect()
gc.disable()
for _ in range(3):
    both()
print(gc.collect())
"""


def test_loading_a_fleet_leaves_no_cyclic_garbage() -> None:
    done = subprocess.run(
        [sys.executable, "-c", MEASURE], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "0", done.stdout + done.stderr


def test_the_collector_is_on_again_after_a_load(tree_with: Callable[..., object]) -> None:
    import gc

    assert gc.isenabled()
    load_fleet(tree_with({}))  # type: ignore[arg-type]
    assert gc.isenabled()
