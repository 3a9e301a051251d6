"""A hostile file merged to the watched branch (issue 11): an alias bomb in values.yaml makes
that cluster's pass record "fleet invalid" with the located error, in well under a second,
and the bot goes on: the next good merge is applied as usual.

Real Git (the ``env`` fixture's remote and the bot's pygit2 mirror), fake helm and cluster.
"""

from __future__ import annotations

import time

from gitopsbot.commands.status import as_json, render
from gitopsbot.core.records.journal import OperationStatus
from tests.executor.conftest import Env, fleet_files
from tests.executor.test_reconciler_upgrade import drive
from tests.fleet.fleet_testing import alias_bomb


def test_an_alias_bomb_merged_blocks_only_its_change_and_the_bot_stays_responsive(
    env: Env,
) -> None:
    rec = env.reconciler()
    rec.reconcile("lab")
    bomb = {**fleet_files("1.0.0", "hv:2"), "clusters/lab/values.yaml": alias_bomb()}
    env.merge_pr(21, "lab: values", bomb)

    start = time.perf_counter()
    result = rec.reconcile("lab")
    elapsed = time.perf_counter() - start

    assert result.action == "invalid"
    assert "clusters/lab/values.yaml:6:32: alias *e expands the document past 500000 nodes" in (
        result.detail
    )
    assert elapsed < 5.0  # a whole pass with Git; the bomb itself is refused in ~1 ms
    current = rec.store.current("lab")
    assert current is None or not current.active  # nothing was started
    # Passes after it are as quick and change nothing; a good merge is applied.
    start = time.perf_counter()
    rec.reconcile("lab")
    assert time.perf_counter() - start < 5.0
    env.merge_pr(22, "lab: hv:2", fleet_files("1.0.0", "hv:2"))
    done = drive(env, rec)
    assert done.status is OperationStatus.SUCCEEDED, done.failure
    assert env.world.images() == {"hv:2"}


def test_status_says_the_newest_merge_could_not_be_loaded_until_a_newer_one_loads(
    env: Env,
) -> None:
    """#28 item 9: not "no operation yet", not the previous success as if current."""
    rec = env.reconciler()
    rec.reconcile("lab")
    env.merge_pr(20, "lab: hv:2", fleet_files("1.0.0", "hv:2"))
    assert drive(env, rec).status is OperationStatus.SUCCEEDED
    bomb = {**fleet_files("1.0.0", "hv:3"), "clusters/lab/values.yaml": alias_bomb()}
    sha = env.merge_pr(21, "lab: values", bomb)
    assert rec.reconcile("lab").action == "invalid"

    text, code = render(rec.store, "lab", env.clock.t)
    assert code == 0
    lines = text.splitlines()
    warning = next(line for line in lines if "could not be loaded" in line)
    assert f"the newest commit {sha[:12]} could not be loaded; nothing applied" in warning
    assert "clusters/lab/values.yaml:6:32: alias *e expands the document" in warning
    # Right under the head line: the operation below it is the previous commit's.
    assert lines.index(warning) < next(i for i, line in enumerate(lines) if "✓" in line)
    doc, _ = as_json(rec.store, "lab", env.clock.t)
    assert doc["clusters"]["lab"]["not_loaded"]["sha"] == sha
    # Idle passes keep it; a newer merge that loads removes it.
    rec.reconcile("lab")
    assert rec.store.load_failure("lab") is not None
    env.merge_pr(22, "lab: hv:3", fleet_files("1.0.0", "hv:3"))
    assert drive(env, rec).status is OperationStatus.SUCCEEDED
    assert rec.store.load_failure("lab") is None
    assert "could not be loaded" not in render(rec.store, "lab", env.clock.t)[0]
