"""Single steps through the executor on the fakes: CRDs skipped for an older target (R16) and
refused when a stored version would be dropped (R7); verification catching F6's leftover
tf-hypervisor-<node> pod, a wrong image and a non-Running node (R15); a release stuck in
pending-* reported, not forced (R8); a rollback whose revision aged out becomes an upgrade to
the recorded version; and the reconciler's merge queue and revert-PR paths end to end."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from gitopsbot.bot.steps.executor import Executor
from gitopsbot.bot.steps.helm_upgrade import LOCK_WAIT_SECONDS
from gitopsbot.core.charts.observed import HelmReleaseStatus
from gitopsbot.core.operations import operation
from gitopsbot.core.records.journal import (
    OperationKind,
    OperationStatus,
    RollbackPoint,
    Step,
    StepKind,
    StepState,
)
from gitopsbot.core.rollouts.tf_objects import TF
from gitopsbot.errors import ConfigError, HelmChartUnusable
from gitopsbot.fleetrepo import find_cluster, load_fleet
from gitopsbot.ports.helm import ChartRef, UpgradeRequest
from tests.executor.conftest import CRD, NS, T0, Env, fleet_files
from tests.executor.test_reconciler_upgrade import drive


class NoSecrets:
    def resolve_all(self, refs):  # type: ignore[no-untyped-def]
        return {}


def _spec(env: Env, sha: str | None = None):
    repo = env.repo("spec-reader")
    return load_fleet(repo.tree(sha or repo.head("main"))).clusters["lab"]


def _journal(spec, kind=OperationKind.UPGRADE, point=None):
    j = operation.new_operation(
        kind=kind,
        cluster="lab",
        desired_sha="f" * 40,
        created_at=T0,
        policy=spec.rollout,
    )
    return replace(j, rollback_point=point)


def _executor(env: Env) -> Executor:
    return Executor(cluster=env.cluster, helm=env.helm, secrets=NoSecrets())


def test_crds_never_downgraded(env: Env) -> None:
    spec = _spec(env)  # target 1.0.0
    j = _journal(spec, point=RollbackPoint(helm_revision=3, chart_version="1.1.0"))
    out = _executor(env).run(j.step("crds"), j, spec, now=env.clock.t)
    assert out.state is StepState.SKIPPED and "R16" in out.detail


def test_crds_refused_when_a_stored_version_would_be_dropped(env: Env) -> None:
    live = env.cluster.get(
        "apiextensions.k8s.io/v1", "CustomResourceDefinition", None, "gpupools.tensor-fusion.ai"
    )
    live["status"]["storedVersions"] = ["v1alpha1", "v1"]
    env.cluster.put(live)
    spec = _spec(env)
    j = _journal(spec, point=RollbackPoint(helm_revision=1, chart_version="1.0.0"))
    out = _executor(env).run(j.step("crds"), j, spec, now=env.clock.t)
    assert out.state is StepState.FAILED
    assert "v1alpha1" in out.detail and "storedVersions" in out.detail
    assert ("apply_crds", "CustomResourceDefinition ") not in env.cluster.calls[-3:]


def test_crds_applied_and_confirmed(env: Env) -> None:
    spec = _spec(env)
    j = _journal(spec, point=RollbackPoint(helm_revision=1, chart_version="1.0.0"))
    out = _executor(env).run(j.step("crds"), j, spec, now=env.clock.t)
    assert out.state is StepState.SUCCEEDED and "1 CRDs" in out.detail
    assert "gpupools" in CRD


def test_verify_catches_f6_duplicates_wrong_images_and_nodes(env: Env) -> None:
    spec = _spec(env)
    ex = _executor(env)
    step = Step("verify", StepKind.VERIFY, StepState.RUNNING, started_at=env.clock.t)
    assert ex.run(step, _journal(spec), spec, now=env.clock.t).state is StepState.SUCCEEDED
    env.cluster.put(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "tf-hypervisor-a-gpu-0", "namespace": NS},
            "spec": {"nodeName": "a-gpu-0", "containers": [{"image": "old:2.13"}]},
            "status": {"phase": "Running"},
        }
    )
    pod = env.cluster.get("v1", "Pod", NS, "hypervisor-b-gpu-1")
    pod["spec"]["containers"][0]["image"] = "hv:0"
    env.cluster.put(pod)
    node = env.cluster.get(TF, "GPUNode", None, "b-gpu-0")
    node["status"]["phase"] = "Pending"
    env.cluster.put(node)
    running = ex.run(step, _journal(spec), spec, now=env.clock.t)
    assert running.state is StepState.RUNNING  # retried for a while first
    late = ex.run(step, _journal(spec), spec, now=env.clock.t + timedelta(minutes=11))
    assert late.state is StepState.FAILED
    assert "F6" in late.detail and "tf-hypervisor-a-gpu-0" in late.detail
    assert "runs ['hv:0'], expected hv:1" in late.detail
    assert "GPUNode b-gpu-0 is Pending" in late.detail


def test_a_release_someone_else_holds_is_waited_for_then_blocks_never_forced(env: Env) -> None:
    spec = _spec(env)
    env.helm.set_pending("tf", NS, HelmReleaseStatus.PENDING_UPGRADE)  # "install by hand"
    j = _journal(spec)
    step = replace(j.step("helm-upgrade"), state=StepState.RUNNING, started_at=env.clock.t)
    out = _executor(env).run(step, j, spec, now=env.clock.t)
    assert out.state is StepState.RUNNING and "pending-upgrade" in out.detail
    assert "another helm operation holds the release" in out.detail
    late = env.clock.t + timedelta(seconds=LOCK_WAIT_SECONDS)
    out = _executor(env).run(step, j, spec, now=late)
    assert out.state is StepState.FAILED and out.blocked, out
    assert "Nothing of this operation was applied" in out.detail
    assert env.helm.calls.count("upgrade") == 1  # only the install in the fixture


def test_a_pending_revision_of_a_live_bot_helm_is_waited_for_then_adopted(env: Env) -> None:
    spec = _spec(env)
    j = _journal(spec)
    mine = f"gitopsbot op={j.op_id} step=helm-upgrade"
    env.helm.upgrade(
        UpgradeRequest(
            release="tf",
            namespace=NS,
            chart=ChartRef.of(spec.release),
            version="1.0.0",
            values=spec.values,
            description=mine,
            post_render_policy=spec.rollout,
        )
    )
    env.helm.set_pending("tf", NS, HelmReleaseStatus.PENDING_UPGRADE)
    env.helm.running.add(mine)  # its helm still runs on this machine
    out = _executor(env).run(j.step("helm-upgrade"), j, spec, now=env.clock.t)
    assert out.state is StepState.RUNNING and "still runs here" in out.detail
    env.helm.running.discard(mine)
    history = env.helm.releases[(NS, "tf")]
    history[-1].info = replace(history[-1].info, status=HelmReleaseStatus.DEPLOYED)
    out = _executor(env).run(j.step("helm-upgrade"), j, spec, now=env.clock.t)
    assert out.state is StepState.SUCCEEDED and "already made by this operation" in out.detail
    assert env.helm.calls.count("upgrade") == 2  # the install and the one adopted


def test_a_chart_helm_cannot_use_blocks_the_operation(env: Env) -> None:
    spec = _spec(env)
    env.helm.fail("upgrade", HelmChartUnusable("chart tensor-fusion 9.9.9 not found"))
    j = _journal(spec)
    out = _executor(env).run(j.step("helm-upgrade"), j, spec, now=env.clock.t)
    assert out.state is StepState.FAILED and out.blocked
    assert "nothing was changed" in out.detail


def test_rollback_to_a_revision_gone_from_history_upgrades_instead(env: Env) -> None:
    spec = _spec(env)
    j = _journal(spec, OperationKind.ROLLBACK, point=RollbackPoint(1, "1.0.0"))
    out = _executor(env).run(
        j.step("rollback"),
        j,
        spec,
        now=env.clock.t,
        rollback_to=RollbackPoint(helm_revision=99, chart_version="1.0.0"),
    )
    assert out.state is StepState.SUCCEEDED and "gone" in out.detail
    latest = env.helm.history("tf", NS)[-1]
    assert latest.chart_version == "1.0.0" and latest.description.startswith("gitopsbot op=")


def test_merge_outside_every_window_waits_and_says_when(env: Env) -> None:
    rec = env.reconciler()
    rec.reconcile("lab")
    files = fleet_files("1.0.0", "hv:2", window="0 3 * * *")
    # Pool a gets a window too: now no pool may roll at 01:00.
    files["clusters/lab/rollout.yaml"] = files["clusters/lab/rollout.yaml"].replace(
        "  b:\n",
        '    maintenanceWindow:\n      cron: "0 4 * * *"\n      duration: 1h\n'
        "      timeZone: UTC\n  b:\n",
    )
    env.merge_pr(21, "lab: hv:2", files)
    result = rec.reconcile("lab")
    assert result.action == "queued" and result.next_at == env.clock.t.replace(hour=3)
    queued = rec.store.queued("lab")
    assert queued is not None and queued.status is OperationStatus.QUEUED
    assert "Expected start: 2026-06-10T03:00:00+00:00" in env.forge.comments_on(21)[-1]
    env.clock.t = env.clock.t.replace(hour=2, minute=59)
    assert rec.reconcile("lab").action == "queued"
    env.clock.t = env.clock.t.replace(hour=3, minute=0)
    assert rec.reconcile("lab").action == "started"
    started = rec.store.current("lab")
    assert started.status is OperationStatus.RUNNING
    assert rec.store.queued("lab") is None
    # Its backup went into the commit that started it (#13), with the next step's start.
    assert started.step("backup").state is StepState.SUCCEEDED
    assert started.rollback_point is not None
    assert started.step("helm-upgrade").state is StepState.RUNNING
    head = env.repo("state-reader").head("gitopsbot/state")
    reader = env.repo("state-reader")
    assert "started; backup succeeded" in reader.log("gitopsbot/state", None, 1)[0].summary
    assert reader.read(head, f"clusters/lab/backups/{started.op_id}/values.yaml") is not None


def test_failed_verification_opens_a_revert_pull_request(env: Env) -> None:
    env.world.pending.add("b-gpu-1")  # b never verifies: its node stays Pending
    rec = env.reconciler()
    rec.reconcile("lab")
    sha = env.merge_pr(
        22, "lab: hv:2", fleet_files("1.0.0", "hv:2", on_failure="revert-pr", stall="5m")
    )
    done = drive(env, rec, passes=60)
    assert done.status is OperationStatus.FAILED
    assert done.remediation.startswith("revert-pr:#")
    number = int(done.remediation.split("#")[1])
    pr = env.forge.get_pull_request(number)
    assert pr.branch == f"gitopsbot/revert/{done.op_id}" and pr.base == "main"
    repo = env.repo("pr-reader")
    head = repo.head(pr.branch)
    assert f"This reverts commit {sha}" in repo.log(pr.branch, None, 1)[0].message
    assert b"hv:1" in repo.read(head, "clusters/lab/values.yaml")
    assert env.repo("main-reader").head("main") == sha  # main untouched: a person merges


@pytest.mark.parametrize("per_cluster", [False, True], ids=["whole fleet", "one cluster"])
def test_bad_fleet_files_merged_apply_nothing(env: Env, per_cluster: bool) -> None:
    rec = env.reconciler()
    if per_cluster:
        rec.load_cluster = find_cluster  # as ``gitopsbot run`` reads a cluster
    rec.reconcile("lab")
    files = fleet_files("1.0.0", "hv:2")
    files["clusters/lab/rollout.yaml"] += "maxParallelPools: many\n"
    env.merge_pr(23, "lab: broken", files)
    result = rec.reconcile("lab")
    assert result.action == "invalid" and "rollout.yaml" in result.detail
    assert rec.store.current("lab") is None
    assert env.helm.calls.count("upgrade") == 1  # only the fixture's install
    assert rec.reconcile("lab").action == "idle"  # not retried on every pass
    fixed = env.merge_pr(24, "lab: fixed", fleet_files("1.0.0", "hv:2"))
    assert rec.reconcile("lab").action == "started"
    assert rec.store.current("lab").desired_sha == fixed


def test_a_merge_reads_only_its_cluster(env: Env) -> None:
    # Another team's cluster broken in the same merge does not hold this one back, and this
    # cluster's change costs this cluster's parse only (fleets of hundreds of clusters).
    rec = env.reconciler()
    rec.load_cluster = find_cluster
    rec.reconcile("lab")
    files = fleet_files("1.0.0", "hv:2")
    files["clusters/other/release.yaml"] = "chart: [broken\n"
    sha = env.merge_pr(25, "lab: hv:2; other: broken", files)
    assert rec.reconcile("lab").action == "started"
    assert rec.store.current("lab").desired_sha == sha
    assert rec._fleets == {}  # no whole-fleet load on the way
    with pytest.raises(ConfigError, match=r"release\.yaml"):
        find_cluster(rec.repo.tree(sha), "other")
    assert find_cluster(rec.repo.tree(sha), "gone") is None


def test_smoke_test_result_is_read_back(env: Env) -> None:
    from gitopsbot.core.fleet.model import SmokeTest

    manifest = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "cuda-smoke"},
        "spec": {"restartPolicy": "Never", "containers": [{"name": "t", "image": "cuda:12"}]},
    }
    spec = replace(_spec(env), smoke_test=SmokeTest(manifest=manifest, timeout_seconds=300))
    ex = _executor(env)
    step = Step("verify", StepKind.VERIFY, StepState.RUNNING, started_at=env.clock.t)
    first = ex.run(step, _journal(spec), spec, now=env.clock.t)
    assert first.state is StepState.RUNNING and "started" in first.detail
    pod = env.cluster.get("v1", "Pod", NS, "cuda-smoke")
    assert pod is not None  # created in the release namespace
    assert ex.run(step, _journal(spec), spec, now=env.clock.t).state is StepState.RUNNING
    pod["status"] = {"phase": "Succeeded"}
    env.cluster.put(pod)
    done = ex.run(step, _journal(spec), spec, now=env.clock.t)
    assert done.state is StepState.SUCCEEDED and "smoke test succeeded" in done.detail
    assert env.cluster.get("v1", "Pod", NS, "cuda-smoke") is None
    # A failing test fails verification.
    ex.run(step, _journal(spec), spec, now=env.clock.t)
    pod = env.cluster.get("v1", "Pod", NS, "cuda-smoke")
    pod["status"] = {"phase": "Failed"}
    env.cluster.put(pod)
    failed = ex.run(step, _journal(spec), spec, now=env.clock.t)
    assert failed.state is StepState.FAILED and "Failed" in failed.detail
    # Timeout while pending.
    ex.run(step, _journal(spec), spec, now=env.clock.t)
    late = ex.run(step, _journal(spec), spec, now=env.clock.t + timedelta(seconds=301))
    assert late.state is StepState.FAILED
