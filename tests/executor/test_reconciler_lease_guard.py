"""The reconciler's lease guard (``may_act``, docs/leases.md): a replica that does not hold a
cluster's Lease carries out no step and records nothing; one that loses it while a step runs
does not record the outcome, and the replica taking over resumes without repeating the
upgrade."""

from __future__ import annotations

from gitopsbot.core.records.journal import OperationStatus, StepState
from tests.executor.conftest import Env, fleet_files
from tests.executor.test_reconciler_upgrade import drive, upgrades


def test_without_the_lease_no_step_is_carried_out(env: Env) -> None:
    rec = env.reconciler()
    assert rec.reconcile("lab").action == "baseline"
    env.merge_pr(7, "lab: chart 1.1.0, hypervisor hv:2", fleet_files("1.1.0", "hv:2"))
    assert rec.reconcile("lab").action == "started"
    before = rec.store.current("lab")
    calls = list(env.helm.calls)
    rec.may_act = lambda cluster: False
    for _ in range(5):
        result = rec.reconcile("lab")
        assert result.action == "paused" and "lease not held" in result.detail
        env.world.tick()
    assert rec.store.current("lab") == before
    assert env.helm.calls == calls
    rec.may_act = lambda cluster: True
    done = drive(env, rec)
    assert done.status is OperationStatus.SUCCEEDED, done.failure


def test_a_lease_lost_during_the_upgrade_is_not_recorded_and_the_next_holder_adopts_it(
    env: Env,
) -> None:
    rec = env.reconciler()
    assert rec.reconcile("lab").action == "baseline"
    env.merge_pr(7, "lab: chart 1.1.0, hypervisor hv:2", fleet_files("1.1.0", "hv:2"))
    before = upgrades(env)
    # Held until the helm upgrade has run: lost while the step was in flight.
    rec.may_act = lambda cluster: upgrades(env) == before
    for _ in range(20):
        result = rec.reconcile("lab")
        if result.action == "paused":
            break
    assert result.detail == "lease lost during helm-upgrade"
    assert upgrades(env) - before == 1
    journal = rec.store.current("lab")
    assert journal is not None and not journal.step("helm-upgrade").state.finished
    # Another replica (its own mirror, nothing in memory) takes over and finishes.
    other = env.reconciler(name="other-replica")
    done = drive(env, other)
    assert done.status is OperationStatus.SUCCEEDED, done.failure
    assert all(s.state is StepState.SUCCEEDED for s in done.steps)
    assert upgrades(env) - before == 1  # adopted by its description, never upgraded again
