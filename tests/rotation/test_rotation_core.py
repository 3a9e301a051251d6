"""What a change rotates, the steps a rotation takes, and its plan (core.rotation, R17-R20)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gitopsbot.core.charts.observed import DeployedState
from gitopsbot.core.fleet.model import CredentialsSpec, Location, SecretRef
from gitopsbot.core.operations import operation
from gitopsbot.core.planning.plan import Plan, make_plan
from gitopsbot.core.planning.plan import StepKind as PlanStep
from gitopsbot.core.planning.render import render_markdown
from gitopsbot.core.policy import Decision
from gitopsbot.core.records.journal import OperationKind, StepKind
from gitopsbot.core.rotation import credentials as rotation
from tests.core.plan_builders import cluster, desired_values, pool, small_chart

C = rotation.Credential
AGENT = SecretRef("agent.enrollToken", "env", "TF_TOKEN")
AGENT_V2 = SecretRef("agent.enrollToken", "kubernetes-secret", "agent-token-v2", key="token")
GREPTIME = SecretRef("greptime.password", "env", "GREPTIME_PASSWORD")
AK = SecretRef("cloudVendorCredentials.accessKey", "env", "AK")
SK = SecretRef("cloudVendorCredentials.secretKey", "env", "SK")
SK_V2 = SecretRef("cloudVendorCredentials.secretKey", "env", "SK_V2")
CHART = small_chart("1.8.7", "2.17.0")


def creds(*refs: SecretRef, rotation_: int = 0) -> CredentialsSpec:
    return CredentialsSpec(secrets=refs, rotation=rotation_)


def test_a_changed_reference_rotates_that_credential_only() -> None:
    before = creds(AGENT, GREPTIME, AK, SK)
    assert rotation.rotated(before, creds(AGENT_V2, GREPTIME, AK, SK)) == {C.AGENT_TOKEN}
    assert rotation.rotated(before, creds(AGENT, GREPTIME, AK, SK_V2)) == {C.VENDOR_KEYS}
    assert rotation.rotated(before, before) == frozenset()


def test_the_counter_rotates_every_referenced_credential() -> None:
    before = creds(AGENT, AK, SK)
    after = creds(AGENT, AK, SK, rotation_=1)
    assert rotation.rotated(before, after) == {C.AGENT_TOKEN, C.VENDOR_KEYS}
    # A counter going down (a revert of a bump) reads the sources again too.
    assert rotation.rotated(after, before) == {C.AGENT_TOKEN, C.VENDOR_KEYS}
    assert rotation.rotated(after, after) == frozenset()


def test_an_added_reference_is_adoption_unless_the_counter_moves() -> None:
    # A team moving a value it has into credentials.yaml (often with an upgrade): no rotation.
    assert rotation.rotated(creds(), creds(GREPTIME)) == frozenset()
    assert rotation.rotated(creds(AGENT), creds(AGENT, GREPTIME)) == frozenset()
    assert rotation.rotated(creds(), creds(GREPTIME, rotation_=1)) == {C.GREPTIME_PASSWORD}
    assert rotation.rotated(creds(GREPTIME), creds()) == frozenset()
    # Half the vendor pair is no rotation: the Secret needs both keys; the pair completed is
    # adoption, the pair changed a rotation.
    assert rotation.rotated(creds(), creds(AK, rotation_=1)) == frozenset()
    assert rotation.rotated(creds(AK), creds(AK, SK)) == frozenset()
    assert rotation.rotated(creds(AK, SK), creds(AK, SK_V2)) == {C.VENDOR_KEYS}


def test_unknown_before_rotates_nothing() -> None:
    assert rotation.rotated(None, creds(AGENT, rotation_=5)) == frozenset()


def test_only_a_credentials_change_is_a_rotation() -> None:
    rotated = frozenset({C.AGENT_TOKEN})
    shape = operation.classify_change(
        deployed_chart="1.8.7", target_chart="1.8.7", changed=set(), rotated=rotated
    )
    assert shape.kind is OperationKind.ROTATION and shape.credentials == rotated
    mixed = operation.classify_change(
        deployed_chart="1.8.7", target_chart="1.8.7", changed={"controller.replicaCount"},
        rotated=rotated,
    )  # fmt: skip
    assert mixed.kind is OperationKind.ROLLOUT_ONLY  # the apply gate refuses it
    upgrade = operation.classify_change(
        deployed_chart="1.8.0", target_chart="1.8.7", changed=set(), rotated=rotated
    )
    assert upgrade.kind is OperationKind.UPGRADE


@pytest.mark.parametrize(
    ("rotated", "kinds"),
    [
        (
            {C.AGENT_TOKEN},
            ["backup", "helm-upgrade", "controller-restart", "controller-ready",
             "agent-reconnect", "verify"],
        ),
        (
            {C.VENDOR_KEYS},
            ["backup", "helm-upgrade", "vendor-secret", "controller-restart",
             "controller-ready", "verify"],
        ),
        (
            {C.GREPTIME_PASSWORD},
            ["backup", "helm-upgrade", "controller-restart", "controller-ready",
             "hypervisor-restart", "hypervisor-restart", "verify"],
        ),
    ],
)  # fmt: skip
def test_each_credential_takes_its_own_steps(rotated: set[C], kinds: list[str]) -> None:
    policy = cluster(pools=(pool("inference"), pool("training"))).rollout
    steps = operation.build_steps(OperationKind.ROTATION, policy, credentials=frozenset(rotated))
    assert [str(s.kind) for s in steps] == kinds
    restarts = [s for s in steps if s.kind is StepKind.HYPERVISOR_RESTART]
    assert [(s.name, s.pool) for s in restarts] == (
        [("hypervisor-restart/inference", "inference"), ("hypervisor-restart/training", "training")]
        if C.GREPTIME_PASSWORD in rotated
        else []
    )


def test_the_reconnect_check_is_read_only_and_the_others_are_recorded_first() -> None:
    assert not operation.start_must_be_recorded(StepKind.AGENT_RECONNECT)
    assert operation.start_must_be_recorded(StepKind.VENDOR_SECRET)
    assert operation.start_must_be_recorded(StepKind.HYPERVISOR_RESTART)


def _plan(before: CredentialsSpec, after: CredentialsSpec, **values: object) -> Plan:
    desired = replace(cluster(values=desired_values(**values)), credentials=after)
    deployed = DeployedState("1.8.7", "2.17.0", desired_values(), credentials=before)
    return make_plan(
        deployed=deployed, desired=desired, target_chart=CHART, deployed_chart=CHART, index=None
    )


def test_the_plan_of_a_rotation_names_what_restarts_and_what_workloads_feel() -> None:
    plan = _plan(creds(AGENT, GREPTIME, AK, SK), creds(AGENT, GREPTIME, AK, SK, rotation_=1))
    kinds = [s.kind for s in plan.steps]
    assert PlanStep.VENDOR_SECRET in kinds and PlanStep.AGENT_RECONNECT in kinds
    assert PlanStep.HYPERVISOR_RESTART in kinds and PlanStep.CRDS not in kinds
    rules = {s.rule for s in plan.steps}
    assert {"R18", "R19", "R20"} <= rules
    text = render_markdown(plan)
    assert "tf-cloud-vendor-credentials" in text
    assert "cluster-agent" in text
    assert "remote sessions" in text  # what a workload on a restarted hypervisor feels
    assert "rotation of the agent token, GreptimeDB password, cloud vendor keys" in text
    assert plan.decision is Decision.ALLOWED


def test_a_rotation_riding_on_a_values_change_is_denied_where_it_is_written() -> None:
    at = Location("clusters/c1/credentials.yaml", 3, 3)
    after = creds(AGENT_V2)
    desired = replace(
        cluster(values=desired_values(controller={"replicaCount": 3})),
        credentials=after,
        locations={"credentials.yaml:secrets.agent.enrollToken": at},
    )
    deployed = DeployedState("1.8.7", "2.17.0", desired_values(), credentials=creds(AGENT))
    plan = make_plan(
        deployed=deployed, desired=desired, target_chart=CHART, deployed_chart=CHART, index=None
    )
    assert plan.decision is Decision.DENIED
    (verdict,) = [v for v in plan.verdicts if v.rule_id == rotation.ALONE_RULE]
    assert verdict.location == at
    assert "controller.replicaCount" in verdict.message
    assert "rotate credentials in a change of its own" in verdict.message
    assert not any(s.kind is PlanStep.VENDOR_SECRET for s in plan.steps)


def test_a_secret_path_change_alone_is_no_other_change() -> None:
    # helm's values hold the old secret; the desired values hold the mask: not "values".
    before = creds(AGENT)
    plan = _plan(before, creds(AGENT_V2), agent={"enrollToken": "***"})
    assert plan.decision is Decision.ALLOWED
