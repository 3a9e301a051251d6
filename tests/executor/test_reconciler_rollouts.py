"""Rollouts under the rules, through the reconciler with a fake clock: a pool held by its
window until it opens, paused when the window closes mid-rollout and resumed in the next;
maxDuration halt → automatic rollback committed to the watched branch as a revert; a stall
caused by a Pending GPUNode (F4) → halt naming the node; a person's revert → rollback to the
recorded revision with CRDs untouched."""

from __future__ import annotations

from datetime import timedelta

from gitopsbot.bot import failed_marks, waves
from gitopsbot.core.records.journal import OperationKind, OperationStatus, PhaseState, StepState
from tests.executor.conftest import Env, fleet_files, git
from tests.executor.test_reconciler_upgrade import drive

M = timedelta(minutes=1)


def _until(env: Env, rec, predicate, *, passes: int = 200, step: timedelta = M):
    for _ in range(passes):
        rec.reconcile("lab")
        env.world.tick()
        j = rec.store.current("lab")
        if j is not None and predicate(j):
            return j
        env.clock.t += step
    raise AssertionError(f"condition not reached: {rec.store.current('lab')}")


def test_window_holds_pauses_and_resumes_a_pool(env: Env) -> None:
    env.world.nodes["b"] = 4  # two batches of 50%
    rec = env.reconciler()
    rec.reconcile("lab")
    env.merge_pr(3, "lab: hv:2", fleet_files("1.0.0", "hv:2", window="0 2 * * *"))

    # 01:00: pool a has no window and rolls; b waits for 02:00 with its switch closed.
    j = _until(env, rec, lambda j: j.step("pool/a/hypervisor").state is StepState.SUCCEEDED)
    assert env.clock.t.hour == 1 and not env.world.switch("b")
    j = _until(env, rec, lambda j: j.phase("pool/b/hypervisor").state is PhaseState.ROLLING)
    assert env.clock.t.hour == 2 and env.world.switch("b")

    # The window closes mid-rollout: the bot closes the switch; the controller stops.
    env.world.batches["b"] = 0
    env.clock.t = env.clock.t.replace(hour=3, minute=0)
    rec.reconcile("lab")
    j = rec.store.current("lab")
    assert j.phase("pool/b/hypervisor").state is PhaseState.PAUSED
    assert not env.world.switch("b")
    env.clock.t += timedelta(hours=5)
    rec.reconcile("lab")
    env.world.tick()
    assert not env.world.switch("b")

    # Next night it resumes and finishes.
    env.clock.t = (env.clock.t + timedelta(days=1)).replace(hour=2, minute=0)
    j = drive(env, rec)
    assert j.status is OperationStatus.SUCCEEDED, j.failure
    assert env.world.images() == {"hv:2"}
    assert not env.world.switch("b")


def test_max_duration_halts_and_rolls_back_by_revert(env: Env) -> None:
    rec = env.reconciler()
    rec.reconcile("lab")
    sha = env.merge_pr(4, "lab: hv:2", fleet_files("1.0.0", "hv:2", max_duration="3m"))
    for _ in range(30):  # the controller never moves: only the deadline can end this
        rec.reconcile("lab")
        env.clock.t += M
        j = rec.store.current("lab")
        if j.kind is OperationKind.ROLLBACK:
            break
    failed = rec.store.history("lab", j.reverts_op)
    assert failed is not None and failed.status is OperationStatus.FAILED
    assert "maxDuration" in failed.failure and failed.remediation == f"rollback:{j.op_id}"
    assert not env.world.switch("a")
    # Git stays the truth: the watched branch has the revert of the merge.
    env.human.pull()
    message = git("log", "-1", "--format=%B", cwd=env.human.path)
    assert f"This reverts commit {sha}" in message
    assert j.desired_sha == git("rev-parse", "HEAD", cwd=env.human.path).strip()
    done = drive(env, rec)
    assert done.kind is OperationKind.ROLLBACK and done.status is OperationStatus.SUCCEEDED
    # Revision 1 was installed by hand (not post-rendered): the rollback is an upgrade to its
    # chart with the Git values and policy, never a helm rollback to the chart's own policy.
    latest = env.helm.history("tf", "tf-system")[-1]
    assert latest.description == f"gitopsbot op={done.op_id} step=helm-upgrade"
    assert latest.chart_version == "1.0.0"
    assert env.world.images() == {"hv:1"}


def test_pending_node_stalls_and_halts(env: Env) -> None:
    env.world.pending.add("a-gpu-1")
    rec = env.reconciler()
    rec.reconcile("lab")
    env.merge_pr(5, "lab: hv:2", fleet_files("1.0.0", "hv:2", stall="2m", on_failure="halt"))
    j = _until(env, rec, lambda j: not j.active, passes=30)
    assert j.status is OperationStatus.FAILED and j.remediation == "halt"
    assert "a-gpu-1" in j.failure and "F4" in j.failure
    assert j.step("pool/a/hypervisor").state is StepState.FAILED
    assert j.step("pool/b/hypervisor").state is StepState.PENDING  # nothing after a halt
    assert not env.world.switch("a")
    assert "a-gpu-1" in env.forge.comments_on(5)[-1]


def test_revert_rolls_back_to_the_recorded_revision(env: Env) -> None:
    rec = env.reconciler()
    rec.reconcile("lab")
    # The bot's first upgrade: revision 2, post-rendered with the Git policy.
    env.merge_pr(5, "lab: hv:2", fleet_files("1.0.0", "hv:2"))
    assert drive(env, rec).status is OperationStatus.SUCCEEDED
    sha = env.merge_pr(6, "lab: chart 1.1.0, hv:3", fleet_files("1.1.0", "hv:3"))
    upgraded = drive(env, rec)
    assert upgraded.status is OperationStatus.SUCCEEDED
    crd_applies = env.cluster.calls.count(("apply_crds", "CustomResourceDefinition "))

    env.human.revert(sha)
    done = drive(env, rec)

    assert done.kind is OperationKind.ROLLBACK and done.reverts_op == upgraded.op_id
    assert done.status is OperationStatus.SUCCEEDED, done.failure
    assert [s.name for s in done.steps][:3] == ["backup", "rollback", "controller-ready"]
    latest = env.helm.history("tf", "tf-system")[-1]
    # Revision 2 was rendered by the bot: helm rollback restores its Git policy as it was.
    assert (latest.description, latest.chart_version) == ("Rollback to 2", "1.0.0")
    assert env.world.images() == {"hv:2"}
    # R16: CRDs stay at the newer version.
    assert env.cluster.calls.count(("apply_crds", "CustomResourceDefinition ")) == crd_applies


def test_revert_to_a_release_installed_by_hand_keeps_the_git_policy(env: Env) -> None:
    """Revision 1 was installed by hand: a helm rollback would bring back whatever policy its
    manifest holds. The rollback is an upgrade to its chart with the Git values, through the
    post-renderer (every switch closed, the Git batch percentage)."""
    rec = env.reconciler()
    rec.reconcile("lab")
    sha = env.merge_pr(6, "lab: chart 1.1.0, hv:2", fleet_files("1.1.0", "hv:2"))
    assert drive(env, rec).status is OperationStatus.SUCCEEDED
    env.human.revert(sha)
    done = drive(env, rec)
    assert done.kind is OperationKind.ROLLBACK and done.status is OperationStatus.SUCCEEDED
    assert "was not rendered by the bot" in done.step("rollback").detail
    latest = env.helm.history("tf", "tf-system")[-1]
    assert latest.description == f"gitopsbot op={done.op_id} step=helm-upgrade"
    assert latest.chart_version == "1.0.0"
    assert [c for c in env.helm.calls if c == "rollback"] == []
    assert env.world.images() == {"hv:1"}
    assert not env.world.switch("a") and not env.world.switch("b")


def test_a_stale_synced_status_does_not_end_the_phase(env: Env) -> None:
    # Right after the upgrade the GPUPool still reads "synced at 100" from the last
    # rollout; the pods on the old image say otherwise, so the bot still opens the switch.
    env.world.notice_late = 5
    rec = env.reconciler()
    rec.reconcile("lab")
    env.merge_pr(8, "lab: hv:2", fleet_files("1.0.0", "hv:2"))
    done = drive(env, rec)
    assert done.status is OperationStatus.SUCCEEDED, done.failure
    assert env.world.images() == {"hv:2"}
    assert done.phase("pool/a/hypervisor").started_at is not None  # the switch was opened


def test_a_chart_version_set_back_by_hand_is_a_downgrade_not_a_rollback(env: Env) -> None:
    """#28 item 10: a commit that writes the older chart version back by hand (not `git
    revert`) is an upgrade to the older version, judged as one; no rollback is recorded, so
    no failed-version request blames the version it left."""
    rec = env.reconciler()
    rec.reconcile("lab")
    env.merge_pr(16, "lab: chart 1.1.0, hv:2", fleet_files("1.1.0", "hv:2"))
    upgraded = drive(env, rec)
    assert upgraded.status is OperationStatus.SUCCEEDED
    # Not `git revert`: a person writes the old files back by hand, chart version included.
    env.human.pull()
    env.human.commit("lab: back to 1.0.0", fleet_files("1.0.0", "hv:1"))
    rec.reconcile("lab")
    down = rec.store.current("lab")
    assert down is not None and down.kind is OperationKind.UPGRADE and not down.reverts_op
    # Judged as an upgrade: the policies see a lower appVersion (F5), which needs a person.
    assert down.status is OperationStatus.BLOCKED, down
    downgrade = "F5 app-version-downgrade needs-acknowledgement: chart 1.0.0 ships app 1.0.0"
    assert downgrade in down.failure
    assert env.world.images() == {"hv:2"}  # nothing applied
    files = fleet_files("1.0.0", "hv:1")
    rollout = "clusters/lab/rollout.yaml"
    files[rollout] += 'acknowledgements:\n  F5: "1.1.0 breaks our driver; back to 1.0.0"\n'
    env.human.commit("lab: acknowledge the downgrade", files)
    done = drive(env, rec)
    assert done.kind is OperationKind.UPGRADE and not done.reverts_op, done
    assert done.status is OperationStatus.SUCCEEDED, done.failure
    latest = env.helm.history("tf", "tf-system")[-1]
    assert latest.description == f"gitopsbot op={done.op_id} step=helm-upgrade"
    assert latest.chart_version == "1.0.0"
    assert env.world.images() == {"hv:1"}
    version_of = waves.version_reader(rec.repo)
    assert failed_marks.rollbacks(rec.store, ["lab"], version_of) == []


def test_a_hand_made_undo_is_a_rollback(env: Env) -> None:
    rec = env.reconciler()
    rec.reconcile("lab")
    env.merge_pr(16, "lab: hv:2", fleet_files("1.0.0", "hv:2"))
    upgraded = drive(env, rec)
    assert upgraded.status is OperationStatus.SUCCEEDED
    # Not `git revert`: a person writes the old files back by hand (the chart stays).
    env.human.pull()
    env.human.commit("lab: back to hv:1", fleet_files("1.0.0", "hv:1"))
    done = drive(env, rec)
    assert done.kind is OperationKind.ROLLBACK and done.reverts_op == upgraded.op_id
    # Revision 1 was installed by hand (not post-rendered): the rollback is an upgrade to its
    # chart with the Git values and policy, never a helm rollback to the chart's own policy.
    latest = env.helm.history("tf", "tf-system")[-1]
    assert latest.description == f"gitopsbot op={done.op_id} step=helm-upgrade"
    assert latest.chart_version == "1.0.0"
    assert env.world.images() == {"hv:1"}


def test_canary_batch_then_verification_then_the_rest(env: Env) -> None:
    env.world.nodes["a"] = 4
    rec = env.reconciler()
    rec.reconcile("lab")
    env.merge_pr(17, "lab: hv:2", fleet_files("1.0.0", "hv:2", canary=25))
    _until(env, rec, lambda j: j.phase("pool/a/hypervisor").state is PhaseState.CANARY_VERIFY)
    pods = env.cluster.list("v1", "Pod", "tf-system")
    on_new = [p for p in pods if p["spec"]["containers"][0]["image"] == "hv:2"]
    assert len(on_new) == 1  # one node of four: the canary batch
    assert not env.world.switch("a")  # paused for verification
    done = drive(env, rec)
    assert done.status is OperationStatus.SUCCEEDED, done.failure
    assert done.phase("pool/a/hypervisor").canary_done
    assert env.world.images() == {"hv:2"}


def test_a_failing_canary_halts_before_the_rest(env: Env) -> None:
    env.world.nodes["a"] = 4
    rec = env.reconciler()
    rec.reconcile("lab")
    env.merge_pr(18, "lab: hv:2", fleet_files("1.0.0", "hv:2", canary=25, on_failure="halt"))
    _until(env, rec, lambda j: j.phase("pool/a/hypervisor").state is PhaseState.CANARY_VERIFY)
    pod = next(
        p
        for p in env.cluster.list("v1", "Pod", "tf-system")
        if p["spec"]["containers"][0]["image"] == "hv:2"
    )
    pod["status"]["phase"] = "CrashLoopBackOff"
    env.cluster.put(pod)
    j = _until(env, rec, lambda j: not j.active, passes=15)  # after 10 minutes of retries
    assert j.status is OperationStatus.FAILED and "canary" in j.failure
    pods = env.cluster.list("v1", "Pod", "tf-system")
    assert sum(p["spec"]["containers"][0]["image"] == "hv:2" for p in pods) == 1
    assert not env.world.switch("a")


def test_a_finished_phase_brings_the_next_pass_forward(env: Env) -> None:
    # When a pool's phase finishes, the next pool may start: the pass asks to come back at
    # once rather than a poll later (issue 5's rollout benchmark: added time between pools).
    env.world.nodes["b"] = 4
    rec = env.reconciler()
    rec.reconcile("lab")
    env.merge_pr(3, "lab: hv:2", fleet_files("1.0.0", "hv:2"))
    for _ in range(200):
        result = rec.reconcile("lab")
        env.world.tick()
        j = rec.store.current("lab")
        if j is not None and j.step("pool/a/hypervisor").state is StepState.SUCCEEDED:
            break
        env.clock.t += M
    else:
        raise AssertionError("pool a never finished")
    assert result.next_at == env.clock.t


TWO = "controller:\n  replicaCount: 2\n"
THREE = "controller:\n  replicaCount: 3\n"


def _files(image: str, extra: str = TWO) -> dict[str, str]:
    files = fleet_files("1.0.0", image, max_duration="3m")
    files["clusters/lab/values.yaml"] += extra
    return files


def _queue_behind_hv2(env: Env, rec, queued_files: dict[str, str]) -> str:
    """A first change (two controller replicas) applied by the bot, so that the revision
    before hv:2 is the bot's and the rollback is a real ``helm rollback`` (which restores
    that revision, and nothing merged after it); hv:2 merged and started; ``queued_files``
    merged while it runs, queued behind it."""
    rec.reconcile("lab")
    env.merge_pr(3, "lab: two controller replicas", _files("hv:1"))
    drive(env, rec)
    env.merge_pr(4, "lab: hv:2", _files("hv:2"))
    rec.reconcile("lab")
    queued = env.merge_pr(5, "lab: the change queued behind hv:2", queued_files)
    assert rec.reconcile("lab").action == "queued"
    return queued


def _until_rolling_back(env: Env, rec) -> None:
    for _ in range(30):  # the controller never moves: only the deadline ends hv:2
        rec.reconcile("lab")
        env.clock.t += M
        if rec.store.current("lab").kind is OperationKind.ROLLBACK:
            return
    raise AssertionError(rec.store.current("lab"))


def _carried_after(env: Env, rec, queued_sha: str) -> None:
    """The queued change superseded; the revert's tree (it without hv:2) run after the
    rollback: hv:1 back, and its three replicas kept."""
    rollback = rec.store.current("lab")
    following = rec.store.queued("lab")
    assert following is not None and following.op_id == f"{rollback.op_id}-after"
    assert following.desired_sha == rollback.desired_sha  # the revert, on top of the change
    assert following.kind is OperationKind.ROLLOUT_ONLY and following.pr_number == 5
    gone = rec.store.history("lab", f"lab-{queued_sha[:12]}")
    assert gone.status is OperationStatus.SUPERSEDED and gone.queue.superseded_by == following.op_id
    rollbacks = env.helm.calls.count("rollback")
    rec = env.reconciler(name="restarted")  # what it needs is on the state branch, not in memory
    done = drive(env, rec, passes=120)
    assert env.helm.calls.count("rollback") == rollbacks + 1  # a helm rollback to revision 2
    assert (done.op_id, done.status) == (following.op_id, OperationStatus.SUCCEEDED), done.failure
    assert env.world.images() == {"hv:1"}  # not hv:2 again
    assert env.helm.get_values("tf", "tf-system")["controller"] == {"replicaCount": 3}
    assert rec.store.history("lab", rollback.op_id).status is OperationStatus.SUCCEEDED
    assert rec.store.history("lab", gone.op_id) == gone  # superseded once, never run


def test_a_change_queued_behind_a_failed_one_never_applies_it_again(env: Env) -> None:
    """The queued change's own commit still holds hv:2: started from it after the rollback, it
    brought hv:2 back. It is superseded, and what Git holds at the revert (its own change
    without hv:2) runs after the rollback instead (docs/decisions.md, rollback × a queued
    change)."""
    rec = env.reconciler()
    queued_sha = _queue_behind_hv2(env, rec, _files("hv:2", THREE))
    _until_rolling_back(env, rec)
    _carried_after(env, rec, queued_sha)


def test_a_persons_revert_carries_the_queued_change_too(env: Env) -> None:
    """A person reverts hv:2 while it runs, the change queued behind it: the same. The helm
    rollback restores the revision before hv:2, so the queued change's three replicas come
    only from what runs after it."""
    rec = env.reconciler()
    queued_sha = _queue_behind_hv2(env, rec, _files("hv:2", THREE))
    hv2 = rec.store.current("lab")
    env.human.revert(hv2.desired_sha)
    assert rec.reconcile("lab").action == "started"
    assert rec.store.current("lab").kind is OperationKind.ROLLBACK
    _carried_after(env, rec, queued_sha)


def test_a_queued_change_with_nothing_beyond_the_failed_one_is_superseded_alone(
    env: Env,
) -> None:
    """Queued behind hv:2 with nothing of its own beyond it (a comment): superseded by the
    rollback, and nothing runs after it."""
    rec = env.reconciler()
    files = _files("hv:2")
    files["clusters/lab/release.yaml"] += "# the same hv:2, merged again\n"
    queued_sha = _queue_behind_hv2(env, rec, files)
    _until_rolling_back(env, rec)
    rollback = rec.store.current("lab")
    assert rec.store.queued("lab") is None
    gone = rec.store.history("lab", f"lab-{queued_sha[:12]}")
    assert gone.status is OperationStatus.SUPERSEDED and gone.queue.superseded_by == rollback.op_id
    done = drive(env, rec, passes=120)
    assert done.op_id == rollback.op_id and env.world.images() == {"hv:1"}
