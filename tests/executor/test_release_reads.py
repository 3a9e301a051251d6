"""One read of the release per pass (issue 13 part 3): the helm calls a pass makes, counted on
the FakeHelm, for the pass that takes a merge in and for the Helm steps; what a pass read is
forgotten on every write (an upgrade, a rollback, a revision marked failed) and at the end of
the pass, and never seen by another thread's pass.

"history" counts ``history`` and ``status`` together: with the real helm both are a
``helm history`` subprocess (``status`` is ``--max 1``)."""

from __future__ import annotations

import threading
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest

from gitopsbot.bot.reconciler import Reconciler
from gitopsbot.bot.release_reads import PassReads
from gitopsbot.bot.steps.executor import Executor
from gitopsbot.core.charts.observed import HelmReleaseStatus
from gitopsbot.core.fleet.model import ClusterSpec
from gitopsbot.core.operations import operation
from gitopsbot.core.records.journal import (
    OperationKind,
    OperationStatus,
    RollbackPoint,
    StepState,
)
from gitopsbot.core.rollouts.tf_objects import TF
from gitopsbot.errors import HelmFailed
from gitopsbot.fleetrepo import load_fleet
from gitopsbot.ports.helm import ChartRef, RollbackRequest, UpgradeRequest
from gitopsbot.testing import FakeCluster, FakeHelm
from tests.executor.conftest import NS, RELEASE, T0, Env, fleet_files


class NoSecrets:
    def resolve_all(self, refs: Any) -> dict[str, str]:
        return {}


class HelmStorage(FakeCluster):
    """A FakeCluster whose ``mark_helm_release_failed`` reaches the FakeHelm's revisions,
    as the real one rewrites helm's release Secret."""

    def __init__(self, helm: FakeHelm) -> None:
        super().__init__()
        self.helm = helm
        self.marked: list[int] = []

    def mark_helm_release_failed(
        self, namespace: str, release: str, revision: int, reason: str
    ) -> bool:
        self.marked.append(revision)
        for r in self.helm.releases[(namespace, release)]:
            if r.info.revision == revision and r.info.status.pending:
                r.info = replace(r.info, status=HelmReleaseStatus.FAILED)
                return True
        return False


def reads(calls: list[str]) -> dict[str, int]:
    """What a pass asked helm, as subprocesses of the real helm."""
    return {
        "history": calls.count("history") + calls.count("status"),
        "get_values": calls.count("get_values"),
        "upgrade": calls.count("upgrade"),
        "rollback": calls.count("rollback"),
    }


def spec_of(env: Env) -> ClusterSpec:
    repo = env.repo("spec-reader")
    return load_fleet(repo.tree(repo.head("main"))).clusters["lab"]


def next_step(rec: Reconciler) -> str | None:
    current = rec.store.current("lab")
    steps = current.steps if current is not None else ()
    return next((s.name for s in steps if not s.state.finished), None)


def passes_until(env: Env, rec: Reconciler, step: str) -> None:
    """Run passes until ``step`` is the operation's next step to run."""
    for _ in range(20):
        current = rec.store.current("lab")
        running = current is not None and current.status is OperationStatus.RUNNING
        if running and next_step(rec) == step:
            return
        rec.reconcile("lab")
        env.world.tick()
        env.clock.t += timedelta(minutes=1)
    raise AssertionError(f"{step} never came up: {rec.store.current('lab')}")


# -- counted per pass -----------------------------------------------------------------------


def test_the_pass_that_takes_a_merge_in_reads_the_release_once(env: Env) -> None:
    rec = env.reconciler()
    assert rec.reconcile("lab").action == "baseline"
    env.merge_pr(7, "lab: chart 1.1.0, hypervisor hv:2", fleet_files("1.1.0", "hv:2"))
    before = len(env.helm.calls)

    assert rec.reconcile("lab").action == "started"

    counted = reads(env.helm.calls[before:])
    assert counted["history"] == 1 and counted["get_values"] == 1, counted


def test_no_pass_of_a_whole_upgrade_reads_the_release_twice(env: Env) -> None:
    rec = env.reconciler()
    rec.reconcile("lab")
    env.merge_pr(7, "lab: chart 1.1.0, hypervisor hv:2", fleet_files("1.1.0", "hv:2"))
    by_step: dict[str, dict[str, int]] = {}
    for _ in range(30):
        current = rec.store.current("lab")
        running = current is not None and current.status is OperationStatus.RUNNING
        # The step this pass runs; the intake's pass runs the backup too (#13).
        pending = next_step(rec) if running else "intake and backup"
        before = len(env.helm.calls)
        rec.reconcile("lab")
        counted = reads(env.helm.calls[before:])
        assert counted["history"] <= 1 and counted["get_values"] <= 1, (pending, counted)
        if pending is not None:
            by_step.setdefault(pending, counted)
        env.world.tick()
        env.clock.t += timedelta(minutes=1)
        current = rec.store.current("lab")
        if current is not None and not current.active:
            break
    assert current is not None and current.status is OperationStatus.SUCCEEDED
    # The intake's policy read and the backup share one read of the release.
    assert by_step["intake and backup"] == {
        "history": 1,
        "get_values": 1,
        "upgrade": 0,
        "rollback": 0,
    }
    assert "backup" not in by_step  # it ran with the first record
    assert by_step["crds"] == {"history": 0, "get_values": 0, "upgrade": 0, "rollback": 0}


def test_the_helm_upgrade_pass_reads_the_history_once(env: Env) -> None:
    rec = env.reconciler()
    rec.reconcile("lab")
    env.merge_pr(7, "lab: chart 1.1.0, hypervisor hv:2", fleet_files("1.1.0", "hv:2"))
    passes_until(env, rec, "helm-upgrade")
    before = len(env.helm.calls)

    result = rec.reconcile("lab")

    assert result.action == "succeeded" and "helm-upgrade" in result.detail, result
    counted = reads(env.helm.calls[before:])
    assert counted == {"history": 1, "get_values": 0, "upgrade": 1, "rollback": 0}, counted


def test_a_rollback_that_upgrades_instead_reads_the_history_once_in_its_pass(env: Env) -> None:
    """The rollback reads the history, finds its target was not rendered by the bot and runs
    the upgrade, which reads the history again: the pass's read (two helm calls before)."""
    spec = spec_of(env)
    journal = replace(
        operation.new_operation(
            kind=OperationKind.ROLLBACK,
            cluster="lab",
            desired_sha="f" * 40,
            created_at=T0,
            policy=spec.rollout,
        ),
        rollback_point=RollbackPoint(1, "1.0.0"),
    )
    step = journal.step("rollback")
    executor = Executor(cluster=env.cluster, helm=env.helm, secrets=NoSecrets())
    shared = PassReads().executor(executor)
    before = len(env.helm.calls)

    out = shared.run(step, journal, spec, now=env.clock.t, rollback_to=RollbackPoint(1, "1.0.0"))

    assert out.state is StepState.SUCCEEDED and "not rendered by the bot" in out.detail, out
    counted = reads(env.helm.calls[before:])
    assert counted == {"history": 1, "get_values": 0, "upgrade": 1, "rollback": 0}, counted


# -- crash safety: a write is never followed by an old read ---------------------------------


def test_a_revision_marked_failed_is_read_afresh_in_the_same_pass(tmp_path: Any) -> None:
    """A rollback finds the upgrade a killed bot left pending: it marks the revision failed
    (through the Cluster port), then the upgrade it falls back to reads the history again. An
    old read would show the revision still pending, and mark it a second time."""
    helm = FakeHelm(clock=lambda: T0)
    storage = HelmStorage(helm)
    spec = _spec_on_disk(tmp_path)
    chart = ChartRef.of(spec.release)
    install = UpgradeRequest(
        release=RELEASE,
        namespace=NS,
        chart=chart,
        version="1.0.0",
        values=spec.values,
        description="install by hand",
    )
    helm.upgrade(install)
    journal = replace(
        operation.new_operation(
            kind=OperationKind.ROLLBACK,
            cluster="lab",
            desired_sha="f" * 40,
            created_at=T0,
            policy=spec.rollout,
        ),
        rollback_point=RollbackPoint(1, "1.0.0"),
    )
    ours = operation.helm_description(journal.op_id)
    helm.upgrade(replace(install, description=ours))
    helm.set_pending(RELEASE, NS)  # its helm died with the bot: nothing runs it any more
    step = replace(journal.step("rollback"), state=StepState.RUNNING, started_at=T0)
    executor = Executor(cluster=storage, helm=helm, secrets=NoSecrets())
    before = len(helm.calls)

    out = (
        PassReads()
        .executor(executor)
        .run(step, journal, spec, now=T0, rollback_to=RollbackPoint(1, "1.0.0"))
    )

    assert out.state is StepState.SUCCEEDED, out
    assert storage.marked == [2], "marked once: the upgrade read the release afresh"
    assert out.detail.count("recovered") == 1, out.detail
    assert reads(helm.calls[before:])["history"] == 2  # before the mark, and after it
    history = helm.history(RELEASE, NS)
    assert [i.status for i in history][-2:] == [
        HelmReleaseStatus.FAILED,
        HelmReleaseStatus.DEPLOYED,
    ]


def _spec_on_disk(tmp_path: Any) -> ClusterSpec:
    from gitopsbot.adapters.localfiles import DirectoryTree

    for name, text in fleet_files("1.0.0", "hv:1").items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    return load_fleet(DirectoryTree(tmp_path)).clusters["lab"]


# -- what is remembered, and for how long ---------------------------------------------------


def test_reads_are_shared_within_a_pass_and_never_across_passes(env: Env) -> None:
    rec = env.reconciler()
    spec = spec_of(env)
    rel = spec.release
    start = len(env.helm.calls)
    with rec.pass_reads():
        helm = rec.executor_for(spec).helm
        assert rec.executor_for(spec).helm is helm  # the same reads all pass long
        helm.history(rel.release_name, rel.namespace)
        latest = helm.status(rel.release_name, rel.namespace)  # the history's last entry
        helm.get_values(rel.release_name, rel.namespace)["changed"] = "by the caller"
        values = helm.get_values(rel.release_name, rel.namespace)
    assert latest is not None and latest.revision == 1
    assert "changed" not in values  # a caller's change does not reach the next reader
    assert reads(env.helm.calls[start:]) == {
        "history": 1,
        "get_values": 1,
        "upgrade": 0,
        "rollback": 0,
    }
    with rec.pass_reads():  # the next pass asks helm again
        rec.executor_for(spec).helm.status(rel.release_name, rel.namespace)
    assert rec.executor_for(spec).helm is env.helm  # outside a pass: helm itself
    assert reads(env.helm.calls[start:])["history"] == 2


def test_every_write_forgets_what_was_read_a_failed_one_too(env: Env) -> None:
    spec = spec_of(env)
    rel = spec.release
    shared = PassReads().executor(Executor(cluster=env.cluster, helm=env.helm, secrets=NoSecrets()))
    helm = shared.helm

    def history_reads() -> int:
        return env.helm.calls.count("history")

    helm.history(rel.release_name, rel.namespace)
    shared.cluster.get(TF, "TensorFusionCluster", None, "lab-tfc")  # a read: remembered
    # Waiting on a watch (a pool pass, verification) reads too: nothing is forgotten.
    shared.cluster.wait_for_change(TF, "GPUPool", None, timeout=0)
    helm.history(rel.release_name, rel.namespace)
    assert history_reads() == 1

    env.helm.fail("upgrade", HelmFailed("the upgrade failed"))
    with pytest.raises(HelmFailed):
        helm.upgrade(
            UpgradeRequest(
                release=rel.release_name,
                namespace=rel.namespace,
                chart=ChartRef.of(rel),
                version="1.1.0",
                values=spec.values,
                description="a try",
            )
        )
    helm.history(rel.release_name, rel.namespace)
    assert history_reads() == 2

    shared.cluster.patch_merge(TF, "TensorFusionCluster", None, "lab-tfc", {"spec": {}})
    helm.history(rel.release_name, rel.namespace)
    assert history_reads() == 3

    helm.rollback(
        RollbackRequest(
            release=rel.release_name, namespace=rel.namespace, revision=1, description="x"
        )
    )
    latest = helm.status(rel.release_name, rel.namespace)
    assert latest is not None and latest.description == "Rollback to 1"


def test_a_pass_on_another_thread_has_its_own_reads(env: Env) -> None:
    rec = env.reconciler()
    spec = spec_of(env)
    seen: list[object] = []
    with rec.pass_reads():
        mine = rec.executor_for(spec).helm
        other = threading.Thread(target=lambda: seen.append(rec.executor_for(spec).helm))
        other.start()
        other.join()
    assert mine is not env.helm
    assert seen == [env.helm]  # no pass open there: helm itself, nothing remembered


def test_a_helm_method_the_reads_do_not_know_counts_as_a_write(env: Env) -> None:
    spec = spec_of(env)
    rel = spec.release

    class WithUninstall(FakeHelm):
        def uninstall(self, release: str, namespace: str) -> None:
            self.releases.pop((namespace, release), None)

    helm = WithUninstall()
    helm.upgrade(
        UpgradeRequest(
            release=rel.release_name,
            namespace=rel.namespace,
            chart=ChartRef.of(rel),
            version="1.0.0",
            values=spec.values,
            description="install by hand",
        )
    )
    shared = PassReads().executor(Executor(cluster=env.cluster, helm=helm, secrets=NoSecrets()))
    assert shared.helm.history(rel.release_name, rel.namespace)
    shared.helm.uninstall(rel.release_name, rel.namespace)  # type: ignore[attr-defined]
    assert shared.helm.history(rel.release_name, rel.namespace) == []
