"""Every wait says why (issue 28 item 4), through the reconciler with a fake clock: a client
pod of the pool that was Pending before the upgrade neither holds the canary verify for its
timeout nor fails the upgrade (it is named as pre-existing); a verify that cannot finish
records what it waits for, once, and halts at maxDuration naming it."""

from __future__ import annotations

from datetime import timedelta

from gitopsbot.core.records.journal import OperationKind, OperationStatus, PhaseState
from gitopsbot.core.rollouts.tf_objects import CLIENT_SELECTOR, GROUP
from tests.executor.conftest import Env, fleet_files
from tests.executor.test_reconciler_rollouts import _until
from tests.executor.test_reconciler_upgrade import drive

M = timedelta(minutes=1)
STEP = "pool/a/hypervisor"


def client_pod(env: Env, name: str, phase: str, created_ago: timedelta) -> None:
    key, value = CLIENT_SELECTOR.split("=")
    created = env.clock.t - created_ago
    env.cluster.put(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "namespace": "apps",
                "creationTimestamp": created.strftime("%Y-%m-%dT%H:%M:%SZ"),
                "labels": {key: value, f"{GROUP}/gpupool": "lab-tfc-a"},
            },
            "spec": {"containers": [{"name": "app", "image": "app:1"}]},
            "status": {"phase": phase},
        }
    )


def test_a_client_pod_pending_before_the_upgrade_is_reported_not_blamed(env: Env) -> None:
    env.world.nodes["a"] = 4
    client_pod(env, "stuck", "Pending", timedelta(hours=1))
    rec = env.reconciler()
    rec.reconcile("lab")
    env.merge_pr(17, "lab: hv:2", fleet_files("1.0.0", "hv:2", canary=25))
    j = _until(env, rec, lambda j: j.phase(STEP).state is PhaseState.CANARY_VERIFY)
    rec.reconcile("lab")  # the canary is judged on the pods its batch replaced: passed
    assert rec.store.current("lab").phase(STEP).canary_done
    done = drive(env, rec)
    assert done.status is OperationStatus.SUCCEEDED, done.failure
    assert done.op_id == j.op_id and done.kind is not OperationKind.ROLLBACK
    verify = next(s for s in done.steps if s.name == "verify")
    assert "pre-existing, not counted: client pod apps/stuck Pending since" in verify.detail


def test_a_verify_that_cannot_finish_says_why_and_halts_at_max_duration(env: Env) -> None:
    env.world.nodes["a"] = 4
    rec = env.reconciler()
    rec.reconcile("lab")
    env.merge_pr(18, "lab: hv:2", fleet_files("1.0.0", "hv:2", canary=25, max_duration="5m"))
    _until(env, rec, lambda j: j.phase(STEP).state is PhaseState.CANARY_VERIFY)
    client_pod(env, "new", "Pending", timedelta(0))  # after the upgrade began: counted
    j = _until(env, rec, lambda j: j.phase(STEP).batches.waiting != "", passes=3)
    b = j.phase(STEP).batches
    assert b.waiting == "canary verify: client pod apps/new is Pending"
    assert b.waiting_limit == "maxDuration (300s)" and b.waiting_until is not None
    assert j.step(STEP).detail == b.waiting  # not "canary batch finished"
    saved = rec.store.current("lab")
    rec.reconcile("lab")  # the same reason a pass later: nothing new recorded
    assert rec.store.current("lab").phase(STEP) == saved.phase(STEP)
    failed = None
    for _ in range(10):
        rec.reconcile("lab")
        env.clock.t += M
        current = rec.store.current("lab")
        if current.kind is OperationKind.ROLLBACK:
            failed = rec.store.history("lab", current.reverts_op)
            break
    assert failed is not None and failed.status is OperationStatus.FAILED
    assert "maxDuration 300s exceeded" in failed.failure
    assert "while waiting for canary verify: client pod apps/new is Pending" in failed.failure


def test_the_verify_time_stays_counted_once_the_canary_passed(env: Env) -> None:
    env.world.nodes["a"] = 4
    rec = env.reconciler()
    rec.reconcile("lab")
    env.merge_pr(19, "lab: hv:2", fleet_files("1.0.0", "hv:2", canary=25))
    j = _until(env, rec, lambda j: j.phase(STEP).state is PhaseState.CANARY_VERIFY)
    before = j.phase(STEP)
    assert before.opened_at is not None  # the verify's clock runs
    env.clock.t += 3 * M  # the verify takes 3 minutes
    rec.reconcile("lab")  # passed: the clock stops with it
    passed = rec.store.current("lab").phase(STEP)
    assert passed.canary_done and passed.opened_at is None
    counted = before.open_seconds + (env.clock.t - before.opened_at).total_seconds()
    assert passed.open_seconds == int(counted)
    rec.reconcile("lab")  # the rest opens: its clock adds to what was counted
    opened = rec.store.current("lab").phase(STEP)
    assert opened.state is PhaseState.ROLLING and opened.open_seconds == passed.open_seconds
