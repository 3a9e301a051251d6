"""A rotation taken in by the reconciler (bot/intake.py): a credentials.yaml change alone is a
``rotation`` operation with its own steps, a revert of it rotates again (never a helm
rollback, which would leave the vendor Secret behind), and a failure is never rolled back."""

from __future__ import annotations

from gitopsbot.core.journal import OperationKind, OperationStatus, StepState
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
