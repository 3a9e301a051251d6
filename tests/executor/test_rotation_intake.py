"""A rotation taken in by the reconciler (bot/intake.py): a credentials.yaml change alone is a
``rotation`` operation with its own steps, a revert of it rotates again (never a helm
rollback, which would leave the vendor Secret behind), and a failure is never rolled back."""

from __future__ import annotations

from datetime import timedelta

import pytest

from gitopsbot.core.records.journal import OperationKind, OperationStatus, StepState
from gitopsbot.errors import KubeForbidden
from tests.executor.conftest import Env, fleet_files
from tests.executor.test_reconciler_upgrade import drive

VENDOR = (
    "secrets:\n"
    "  cloudVendorCredentials.accessKey:\n    env: LAB_AK\n"
    "  cloudVendorCredentials.secretKey:\n    env: LAB_SK\n"
)
CREDENTIALS = "clusters/lab/credentials.yaml"


def test_a_rotation_and_its_revert_are_rotations(env: Env) -> None:
    rec = env.reconciler()
    assert rec.reconcile("lab").action == "baseline"
    # References added with the counter raised: rotate them now (added alone, they are adoption).
    first = env.human.commit(
        "lab: vendor keys from the environment", {CREDENTIALS: "rotation: 1\n" + VENDOR}
    )
    j = drive(env, rec)
    assert j.desired_sha == first
    assert j.kind is OperationKind.ROTATION and j.status is OperationStatus.SUCCEEDED, j.failure
    assert [s.name for s in j.steps] == [
        "backup", "helm-upgrade", "vendor-secret", "controller-restart", "controller-ready",
        "verify",
    ]  # fmt: skip
    assert env.cluster.get("v1", "Secret", "tf-system", "tf-cloud-vendor-credentials")

    second = env.human.commit(
        "lab: rotate the vendor keys again", {CREDENTIALS: "rotation: 2\n" + VENDOR}
    )
    k = drive(env, rec)
    assert (k.desired_sha, k.kind) == (second, OperationKind.ROTATION)
    upgrades = env.helm.calls.count("upgrade")
    rollbacks = env.helm.calls.count("rollback")
    back = env.human.revert(second)
    r = drive(env, rec)
    assert r.desired_sha == back
    assert r.kind is OperationKind.ROTATION and not r.reverts_op, r
    assert r.status is OperationStatus.SUCCEEDED, r.failure
    assert env.helm.calls.count("rollback") == rollbacks
    assert env.helm.calls.count("upgrade") == upgrades + 1


def test_a_failed_rotation_halts_and_is_not_rolled_back(env: Env) -> None:
    rec = env.reconciler()
    rec.reconcile("lab")
    env.human.commit("lab: vendor keys", {CREDENTIALS: "rotation: 1\n" + VENDOR})
    rollbacks = env.helm.calls.count("rollback")
    # The bot may not write the Secret (its Role lacks it): a permanent refusal.
    env.cluster.fail("apply", KubeForbidden("secrets is forbidden"), times=1000)
    j = drive(env, rec)
    assert j.kind is OperationKind.ROTATION
    assert j.status is OperationStatus.FAILED
    assert j.step("vendor-secret").state is StepState.FAILED
    assert env.helm.calls.count("rollback") == rollbacks
    assert rec.store.current("lab") == j  # no rollback operation followed


def test_references_added_with_an_upgrade_are_adopted_not_rotated(env: Env) -> None:
    rec = env.reconciler()
    rec.reconcile("lab")
    files = {**fleet_files("1.1.0", "hv:2"), CREDENTIALS: VENDOR}
    sha = env.merge_pr(8, "lab: 1.1.0, and the vendor keys referenced", files)
    j = drive(env, rec)
    assert (j.desired_sha, j.kind, j.status) == (
        sha,
        OperationKind.UPGRADE,
        OperationStatus.SUCCEEDED,
    ), j.failure
    assert "vendor-secret" not in [s.name for s in j.steps]


GREPTIME = "rotation: 1\nsecrets:\n  greptime.password:\n    env: LAB_GREPTIME\n"


def test_a_pause_in_git_holds_a_rotations_hypervisor_restart_and_says_so_once(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A rotation's restart deletes hypervisor pods: a person's pause holds it between two
    batches as it holds a rollout's switch (docs/decisions.md), and the wait is recorded once
    in the step's detail, not once per pass. The resume lets it go on."""
    monkeypatch.setenv("LAB_GREPTIME", "greptime-new-password")
    rec = env.reconciler()
    rec.reconcile("lab")
    paused = fleet_files("1.0.0", "hv:1")
    paused["clusters/lab/rollout.yaml"] = "paused: true\n" + paused["clusters/lab/rollout.yaml"]
    env.human.commit("lab: hold every pool", paused)
    head = env.human.commit("lab: rotate the GreptimeDB password", {CREDENTIALS: GREPTIME})
    held = None
    for _ in range(40):
        rec.reconcile("lab")
        env.world.tick()
        env.clock.t += timedelta(seconds=30)
        j = rec.store.current("lab")
        restart = next((s for s in j.steps if s.name.startswith("hypervisor-restart/")), None)
        if j.kind is OperationKind.ROTATION and restart is not None and restart.detail:
            held = j
            break
    assert held is not None, rec.store.current("lab")
    restart = next(s for s in held.steps if s.name.startswith("hypervisor-restart/"))
    # Started in the same record as the step before it ended, never run: run, it would have
    # been skipped at once (no vector sidecar here), its detail saying so.
    assert restart.state is StepState.RUNNING
    assert restart.detail == (f"paused: paused in Git (clusters/lab/rollout.yaml at {head[:12]})")
    commits = rec.store.head()
    for _ in range(3):
        assert rec.reconcile("lab").action == "wait"
        env.clock.t += timedelta(seconds=30)
    assert rec.store.head() == commits  # the same reason is not recorded again
    env.human.commit("lab: let go", fleet_files("1.0.0", "hv:1"))
    done = drive(env, rec)
    assert done.op_id == held.op_id and done.status is OperationStatus.SUCCEEDED, done.failure
    assert all(
        s.state is StepState.SKIPPED for s in done.steps if s.name.startswith("hypervisor-restart/")
    )  # the sandbox's pools run no vector sidecar
