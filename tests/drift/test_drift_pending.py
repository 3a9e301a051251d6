"""bot.drift against the state branch's journals (issue 28 items 2, 3, 5), with a cluster and
Helm faked: a change held by waves is pending (compared with the applied commit's files), the
batch the bot shrank is its own pin, and CRDs edited by hand are found after a rotation."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from gitopsbot.bot import drift as drift_check
from gitopsbot.bot.steps.executor import Executor
from gitopsbot.core.charts.chart import Chart
from gitopsbot.core.charts.observed import HelmReleaseInfo, HelmReleaseStatus
from gitopsbot.core.charts.postrender import rolling_update_policy
from gitopsbot.core.drift.report import DriftReport
from gitopsbot.core.fleet.model import (
    ClusterSpec,
    Component,
    Environment,
    PoolPolicy,
    ReleaseSpec,
    RolloutPolicy,
)
from gitopsbot.core.operations.operation import new_operation, phase_step_name
from gitopsbot.core.records.journal import (
    Effect,
    Journal,
    OperationKind,
    OperationStatus,
    PhaseProgress,
    StepKind,
    StepState,
)
from gitopsbot.core.rollouts import tf_objects as tf

T0 = datetime(2026, 12, 1, 10, 0, tzinfo=UTC)
POOL = PoolPolicy("shared", batch_percentage=50)
CRDS = [
    {
        "metadata": {"name": "gpupools.tensor-fusion.ai"},
        "spec": {"group": tf.GROUP, "names": {"kind": "GPUPool"}},
    }
]
APPLIED_SHA, HELD_SHA = "a" * 40, "b" * 40
WAVES = (
    "blocked by policy (denied): clusters/prod/release.yaml:5: WAVES denied: "
    "wave prod waits for wave staging"
)


def spec(version: str) -> ClusterSpec:
    release = ReleaseSpec("https://charts.example", "tensor-fusion", version, "tf", "tf-sys")
    values = {"controller": {"replicas": 1}}
    policy = RolloutPolicy(pools=(POOL,))
    return ClusterSpec("prod", Environment("production"), release, values, policy)


class Helm:
    def __init__(self, version: str, by_hand: bool = False) -> None:
        self.version = version
        self.by_hand = by_hand  # revision 3, a person's helm upgrade

    def history(self, release: str, namespace: str) -> list[HelmReleaseInfo]:
        found = [
            HelmReleaseInfo(release, namespace, 2, HelmReleaseStatus.DEPLOYED, "tensor-fusion",
                            self.version, self.version, "gitopsbot op=prod-aaaaaaaaaaaa")
        ]  # fmt: skip
        if self.by_hand:
            found.append(replace(found[0], revision=3, description="Upgrade complete"))
        return found

    def get_values(self, release: str, namespace: str) -> dict[str, Any]:
        return {"controller": {"replicas": 1}}


class Cluster:
    def __init__(self, batch: int = 50, crds: list[dict[str, Any]] | None = None) -> None:
        policy = {**rolling_update_policy(POOL), "batchPercentage": batch}
        manager = {"nodeManagerConfig": {"nodePoolRollingUpdatePolicy": policy}}
        self.objects: dict[str, dict[str, Any]] = {
            "TensorFusionCluster": {
                "spec": {"gpuPools": [{"name": "shared", "specTemplate": manager}]}
            },
            "GPUPool": {"spec": manager},
        }
        self.crds = CRDS if crds is None else crds

    def get(self, api: str, kind: str, namespace: str | None, name: str) -> Any:
        if kind == "Deployment":  # the controller, as the applied 1.8.0 left it
            return {"spec": {"template": {"spec": {"containers": [{"image": "ctl:1.8.0"}]}}}}
        return self.objects.get(kind)

    def list(self, api: str, kind: str) -> list[dict[str, Any]]:
        return self.crds


class NoSecrets:
    def resolve_all(self, refs: Any) -> dict[str, Any]:
        return {}


def recorded_crds() -> str:
    return tf.digest([(c["metadata"]["name"], c["spec"]) for c in CRDS])


def upgrade(sha: str = APPLIED_SHA, status: OperationStatus = OperationStatus.SUCCEEDED) -> Journal:
    made = new_operation(kind=OperationKind.UPGRADE, cluster="prod", desired_sha=sha,
                         created_at=T0, policy=RolloutPolicy(pools=(POOL,)))  # fmt: skip
    step = replace(
        made.step(str(StepKind.CRDS)),
        state=StepState.SUCCEEDED,
        finished_at=T0 + timedelta(minutes=1),
        effect=Effect(description=recorded_crds()),
    )
    helm = replace(
        made.step(str(StepKind.HELM_UPGRADE)),
        state=StepState.SUCCEEDED,
        effect=Effect(helm_revision=2, description="gitopsbot op=prod-aaaaaaaaaaaa"),
    )
    return replace(made.with_step(step).with_step(helm), status=status)


def later(kind: OperationKind, sha: str, status: OperationStatus, **kw: Any) -> Journal:
    made = new_operation(kind=kind, cluster="prod", desired_sha=sha,
                         created_at=T0 + timedelta(hours=2),
                         policy=RolloutPolicy(pools=(POOL,)))  # fmt: skip
    return replace(made, status=status, **kw)


def check(
    head: ClusterSpec,
    journals: list[Journal],
    cluster: Cluster,
    helm: Helm,
    files: dict[str, ClusterSpec] | None = None,
    charts: dict[str, Chart] | None = None,
) -> DriftReport:
    def executor_for(_s: ClusterSpec) -> Executor:
        return Executor(cluster=cluster, helm=helm, secrets=NoSecrets())  # type: ignore[arg-type]

    found = drift_check.check_clusters(
        [head],
        lambda _n: journals[-1],
        lambda s: (charts or {}).get(s.release.version),
        executor_for,
        journals_for=lambda _n: journals,
        spec_at=lambda sha, _n: (files or {}).get(sha),
    )
    report = found["prod"]
    assert isinstance(report, DriftReport), report
    return report


def test_a_bump_held_by_waves_is_pending_not_drift() -> None:
    held = later(OperationKind.UPGRADE, HELD_SHA, OperationStatus.BLOCKED, failure=WAVES)
    report = check(
        spec("1.8.7"), [upgrade(), held], Cluster(), Helm("1.8.0"),
        files={APPLIED_SHA: spec("1.8.0"), HELD_SHA: spec("1.8.7")},
    )  # fmt: skip
    assert not report.drifted, report.lines()
    assert [(p.item.what, p.item.desired, p.item.observed, p.why) for p in report.pending] == [
        ("chart", "1.8.7", "1.8.0", f"operation {held.op_id} {WAVES}")
    ]


def test_a_helm_upgrade_by_hand_while_a_bump_is_held_is_drift() -> None:
    held = later(OperationKind.UPGRADE, HELD_SHA, OperationStatus.BLOCKED, failure=WAVES)
    report = check(
        spec("1.8.7"), [upgrade(), held], Cluster(), Helm("1.8.0", by_hand=True),
        files={APPLIED_SHA: spec("1.8.0")},
    )  # fmt: skip
    assert [(i.what, i.where) for i in report.items] == [("revision", "Helm revision 3")]
    assert [p.item.what for p in report.pending] == ["chart"]


def test_a_bump_held_by_waves_before_any_operation_of_the_bot_is_pending() -> None:
    # The release was installed before the bot: the held change's first parent is compared.
    held = later(
        OperationKind.UPGRADE, HELD_SHA, OperationStatus.BLOCKED, failure=WAVES,
        base_sha=APPLIED_SHA,
    )  # fmt: skip
    report = check(
        spec("1.8.7"), [held], Cluster(), Helm("1.8.0"),
        files={APPLIED_SHA: spec("1.8.0"), HELD_SHA: spec("1.8.7")},
    )  # fmt: skip
    assert not report.drifted, report.lines()
    assert [(p.item.what, p.why) for p in report.pending] == [
        ("chart", f"operation {held.op_id} {WAVES}")
    ]


def test_the_held_versions_images_are_pending_when_the_applied_chart_cannot_be_read() -> None:
    # Git's head's chart (1.8.7) is readable, the applied one (1.8.0) not: the controller
    # image of 1.8.7 is the held change's, never drift against the applied files.
    held = later(OperationKind.UPGRADE, HELD_SHA, OperationStatus.BLOCKED, failure=WAVES)
    defaults = {"controller": {"image": {"repository": "ctl"}}}
    new = Chart("tensor-fusion", "1.8.7", "1.8.7", "", defaults, None, {}, "")
    report = check(
        spec("1.8.7"), [upgrade(), held], Cluster(), Helm("1.8.0"),
        files={APPLIED_SHA: spec("1.8.0")}, charts={"1.8.7": new},
    )  # fmt: skip
    assert not report.drifted, report.lines()
    assert sorted(p.item.what for p in report.pending) == ["chart", "image"]
    assert "images: the chart could not be read" in report.unchecked


def test_a_batch_the_bot_shrank_is_not_drift() -> None:
    done = upgrade()
    hv = phase_step_name("shared", Component.HYPERVISOR)
    done = done.with_phase(PhaseProgress(step=hv, batch_percentage=33))
    report = check(spec("1.8.7"), [done], Cluster(batch=33), Helm("1.8.7"))
    assert not report.drifted, report.lines()
    assert {p.item.observed for p in report.pending} == {"33"}
    # The same 33 without the bot's pin in its journal is drift.
    report = check(spec("1.8.7"), [upgrade()], Cluster(batch=33), Helm("1.8.7"))
    assert {(i.desired, i.observed) for i in report.items} == {("50", "33")}


def test_crds_edited_by_hand_after_a_rotation_are_drift() -> None:
    rotation = later(OperationKind.ROTATION, HELD_SHA, OperationStatus.SUCCEEDED)
    edited = [{**CRDS[0], "spec": {**CRDS[0]["spec"], "scope": "Cluster"}}]
    report = check(spec("1.8.7"), [upgrade(), rotation], Cluster(crds=edited), Helm("1.8.7"))
    assert [i.what for i in report.items] == ["crds"], report.lines()
    assert not any("CRDs" in u for u in report.unchecked)
    clean = check(spec("1.8.7"), [upgrade(), rotation], Cluster(), Helm("1.8.7"))
    assert not clean.drifted, clean.lines()
