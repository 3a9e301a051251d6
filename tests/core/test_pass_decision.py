"""One pass, one decision (core.pass_decision): what the pass does for every state its
cluster can be in, from what it observed, and the written precedence docs/decisions.md holds.
"""

from __future__ import annotations

import re
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from gitopsbot.core.fleet.model import (
    ClusterSpec,
    Environment,
    MaintenanceWindow,
    PoolPolicy,
    ReleaseSpec,
    RolloutPolicy,
)
from gitopsbot.core.operations import merge_queue, operation, pass_decision
from gitopsbot.core.operations.pass_decision import OperationView, PassAction, Seen
from gitopsbot.core.records.journal import OperationKind, OperationStatus, QueueState
from gitopsbot.core.rollouts import windows

T0 = datetime(2026, 6, 10, 2, 0, tzinfo=UTC)
POLICY = RolloutPolicy(pools=(PoolPolicy("gpu", batch_percentage=50),))
SPEC = ClusterSpec(
    name="prod",
    environment=Environment.PRODUCTION,
    release=ReleaseSpec("https://charts.invalid", "tensor-fusion", "1.8.7", "tf", "tensor-fusion"),
    values={},
    rollout=POLICY,
)
WAVES_DENY = "gitopsbot.yaml:9: WAVES denied: wave production waits for canary"
POLICY_DENY = "values.yaml:3: F5 denied: appVersion lower"


def op(status: OperationStatus = OperationStatus.RUNNING, **kw: object) -> operation.Journal:
    j = operation.new_operation(
        kind=OperationKind.UPGRADE, cluster="prod", desired_sha="abc", created_at=T0, policy=POLICY
    )
    return replace(j, status=status, **kw)  # type: ignore[arg-type]


def seen(**kw: object) -> Seen:
    return Seen(cluster="prod", now=T0, **kw)  # type: ignore[arg-type]


def operating() -> OperationView:
    return OperationView(spec=SPEC)


def test_nothing_active_nothing_queued_is_idle() -> None:
    assert pass_decision.decide(seen()).action is PassAction.IDLE
    done = op(OperationStatus.SUCCEEDED)
    assert pass_decision.decide(seen(current=done)).action is PassAction.IDLE


def test_a_change_held_only_by_waves_is_judged_again() -> None:
    held = op(OperationStatus.BLOCKED, verdicts=(WAVES_DENY,))
    assert pass_decision.decide(seen(current=held)).action is PassAction.REJUDGE


def test_a_change_a_policy_refused_waits_for_a_new_commit() -> None:
    refused = op(OperationStatus.BLOCKED, verdicts=(WAVES_DENY, POLICY_DENY))
    assert pass_decision.decide(seen(current=refused)).action is PassAction.IDLE


def test_a_change_queued_behind_a_held_one_goes_first() -> None:
    held = op(OperationStatus.BLOCKED, verdicts=(WAVES_DENY,))
    queued = op(OperationStatus.QUEUED, desired_sha="def")
    d = pass_decision.decide(seen(current=held, queued=queued))
    assert d.action is PassAction.ADMIT
    assert d.promoted is not None and d.promoted.status is OperationStatus.RUNNING


def test_a_rotation_merged_on_a_held_change_waits_behind_it() -> None:
    """rotation × wave hold: the held change is judged again (it goes first once its wave is
    due), the rotation waits in the queue; any other change queued is newer and goes first."""
    held = op(OperationStatus.BLOCKED, verdicts=(WAVES_DENY,))
    rotation = replace(op(desired_sha="def"), kind=OperationKind.ROTATION)
    assert pass_decision.waits_for_held(held, rotation)
    assert not pass_decision.waits_for_held(held, op(desired_sha="def"))  # not a rotation
    refused = op(OperationStatus.BLOCKED, verdicts=(WAVES_DENY, POLICY_DENY))
    assert not pass_decision.waits_for_held(refused, rotation)  # nothing to wait for
    assert not pass_decision.waits_for_held(None, rotation)
    placed = merge_queue.admit(
        rotation, running=held, queued=None, now=T0, pool_windows=(), behind_held=True
    )
    assert placed.journal.status is OperationStatus.QUEUED and placed.expected_start is None
    queued = placed.journal
    assert pass_decision.decide(seen(current=held, queued=queued)).action is PassAction.REJUDGE
    started = replace(held, status=OperationStatus.RUNNING)
    assert not pass_decision.held_by_waves(started, queued)  # it runs: the rotation after it
    done = replace(held, status=OperationStatus.SUCCEEDED)
    assert pass_decision.decide(seen(current=done, queued=queued)).action is PassAction.ADMIT


def test_a_queued_change_waits_for_its_window_then_is_admitted() -> None:
    window = windows.Window.of(MaintenanceWindow("0 4 * * *", 600), UTC)
    queued = op(OperationStatus.QUEUED, queue=QueueState())
    d = pass_decision.decide(seen(queued=queued, queued_windows=(window,)))
    assert (d.action, d.until) == (PassAction.QUEUED, T0 + timedelta(hours=2))
    assert d.promoted is not None and d.promoted.queue.queued_until == d.until
    later = pass_decision.decide(
        replace(seen(queued=queued, queued_windows=(window,)), now=T0 + timedelta(hours=2))
    )
    assert later.action is PassAction.ADMIT


def test_an_operation_whose_cluster_left_the_fleet_fails() -> None:
    d = pass_decision.decide(seen(current=op()))
    assert d.action is PassAction.MISSING
    assert d.reason == "cluster prod is not in the fleet at abc"


def test_an_active_operation_takes_its_next_step() -> None:
    d = pass_decision.decide(seen(current=op(), operating=operating()))
    assert d.action is PassAction.OPERATE
    assert d.step is not None and (d.step.action, d.step.step) == (
        operation.Action.RUN_STEP,
        "backup",
    )


@pytest.mark.parametrize(
    "state",
    [
        {"current": op(), "operating": operating()},  # a step
        {"current": op(OperationStatus.BLOCKED, verdicts=(WAVES_DENY,))},  # judged, started
        {"queued": op(OperationStatus.QUEUED)},  # admitted
        {"current": op()},  # failed: cluster missing
    ],
)
def test_without_the_lease_nothing_is_changed(state: dict[str, object]) -> None:
    d = pass_decision.decide(seen(lease_held=False, **state))
    assert d.action is PassAction.NOT_HOLDER
    assert d.reason.startswith("lease not held: ")


def test_without_the_lease_waiting_and_idling_go_on() -> None:
    assert pass_decision.decide(seen(lease_held=False)).action is PassAction.IDLE
    queued = op(OperationStatus.QUEUED, queue=QueueState(T0 + timedelta(hours=1)))
    d = pass_decision.decide(seen(current=queued, operating=operating(), lease_held=False))
    assert d.action is PassAction.OPERATE
    assert d.step is not None and d.step.action is operation.Action.WAIT


# -- the written precedence ---------------------------------------------------------------

DECISIONS = Path(__file__).resolve().parents[2] / "docs" / "decisions.md"


def test_the_precedence_in_the_docs_is_the_one_the_code_follows() -> None:
    text = DECISIONS.read_text(encoding="utf-8")
    section = text.split("## Precedence", 1)[1].split("\n## ", 1)[0]
    written = re.findall(r"^\d+\. \*\*.*?\*\* `([\w-]+)`", section, flags=re.M)
    assert tuple(written) == pass_decision.PRECEDENCE


def test_every_test_the_page_names_exists() -> None:
    """A row is held by the tests it names: each ``tests/….py::name`` (and ``::name`` after
    it, the same file) is a test function of that file."""
    root = DECISIONS.parents[1]
    missing: list[str] = []
    for line in DECISIONS.read_text(encoding="utf-8").splitlines():
        current = ""
        for ref in re.findall(r"`((?:tests/[\w/]+\.py)?(?:::\w+)?)`", line):
            path, _, name = ref.partition("::")
            if path:
                current = path
                if not (root / path).exists():
                    missing.append(ref)
                    continue
            if name and current:
                source = (root / current).read_text(encoding="utf-8")
                if not re.search(rf"^def {name}\(", source, flags=re.M):
                    missing.append(f"{current}::{name}")
    assert missing == []
