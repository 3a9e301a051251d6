"""Apply-time safety through the reconciler (issue 10 parts 1, 6, 7): the policy gate on
the watched branch, pass failures on the state branch, manual revisions reported.

Real Git (bare remote, the bot's pygit2 mirror, a person's clone), the real rules and the
real LocalChartSource; FakeHelm / FakeCluster / FakeForge at the adapters' edge."""

from __future__ import annotations

import subprocess
from datetime import timedelta

from gitopsbot.commands.status import render
from gitopsbot.core.forge.forge_types import CommitState
from gitopsbot.core.records.journal import OperationKind, OperationStatus
from gitopsbot.errors import ConfigError, GitOpsBotError, HelmChartUnusable, TransientError
from gitopsbot.ports.helm import ChartRef, UpgradeRequest
from tests.executor.conftest import NS, RELEASE, Env, fleet_files, git
from tests.executor.test_reconciler_upgrade import drive, upgrades

F3_ROLLOUT = "    phases: [hypervisor]\n  b:"


def worker_phase_without_switch(version: str, image: str) -> dict[str, str]:
    files = fleet_files(version, image)
    rollout = files["clusters/lab/rollout.yaml"]
    assert F3_ROLLOUT in rollout
    files["clusters/lab/rollout.yaml"] = rollout.replace(
        F3_ROLLOUT, "    phases: [hypervisor, worker]\n  b:", 1
    )
    return files


def state_commits(env: Env) -> int:
    out = git("rev-list", "--count", "origin/gitopsbot/state", cwd=env.human.path)
    return int(out.strip())


def test_a_denied_change_pushed_directly_is_blocked_and_never_applied(env: Env) -> None:
    rec = env.reconciler()
    rec.reconcile("lab")
    # A direct push (no pull request, branch protection bypassed): F3 denies it.
    sha = env.human.commit(
        "lab: hv:2 and a worker phase", worker_phase_without_switch("1.1.0", "hv:2")
    )
    before = upgrades(env)
    crds = env.cluster.calls.count(("apply_crds", "CustomResourceDefinition "))
    result = rec.reconcile("lab")
    assert result.action == "blocked"
    blocked = rec.store.current("lab")
    assert blocked is not None and blocked.status is OperationStatus.BLOCKED
    assert not blocked.active and blocked.remediation == ""
    assert "F3 phase-needs-its-switch denied" in blocked.failure
    f3 = next(v for v in blocked.verdicts if " F3 phase-needs-its-switch denied" in v)
    assert f3.startswith("clusters/lab/rollout.yaml:") and int(f3.split(":")[1]) > 0, f3
    # Nothing ran: no backup, no CRDs, no upgrade; nothing reverted.
    assert upgrades(env) == before
    assert all(s.state.value == "pending" for s in blocked.steps)
    assert env.cluster.calls.count(("apply_crds", "CustomResourceDefinition ")) == crds
    # The merge commit is marked, though there is no pull request.
    assert env.forge.status_of(sha, "gitopsbot/apply") is CommitState.FAILURE
    # More passes change nothing: it stays blocked, applied never, reverted never.
    for _ in range(3):
        rec.reconcile("lab")
        env.clock.t += timedelta(minutes=1)
    assert rec.store.current("lab") == blocked
    env.human.pull()
    assert git("rev-parse", "HEAD", cwd=env.human.path).strip() == sha
    text, _ = render(rec.store, "lab", env.clock.t)
    assert "blocked" in text and "F3 phase-needs-its-switch denied" in text
    assert "clusters/lab/rollout.yaml:" in text

    # A fix replaces it and is applied.
    env.human.commit("lab: hv:2, hypervisor only", fleet_files("1.1.0", "hv:2"))
    done = drive(env, rec)
    assert done.kind is OperationKind.UPGRADE and done.status is OperationStatus.SUCCEEDED
    assert env.helm.history(RELEASE, NS)[-1].chart_version == "1.1.0"


def test_an_acknowledge_rule_blocks_until_rollout_yaml_acknowledges_it(env: Env) -> None:
    rec = env.reconciler()
    rec.reconcile("lab")
    team = (
        "rules:\n  - id: TEAM-HV\n    description: hypervisor changes are announced first\n"
        "    severity: acknowledge\n"
        "    check: {kind: path, path: cluster.hypervisorImage, op: changed}\n"
    )
    files = {**fleet_files("1.0.0", "hv:2"), "policies/team.yaml": team}
    env.merge_pr(7, "lab: hv:2", files)
    rec.reconcile("lab")
    blocked = rec.store.current("lab")
    assert blocked is not None and blocked.status is OperationStatus.BLOCKED
    assert "TEAM-HV needs-acknowledgement" in blocked.failure
    assert "Nothing was applied" in env.forge.comments_on(7)[-1]
    rollout = files["clusters/lab/rollout.yaml"] + 'acknowledgements:\n  TEAM-HV: "announced"\n'
    env.merge_pr(8, "lab: acknowledge TEAM-HV", {**files, "clusters/lab/rollout.yaml": rollout})
    done = drive(env, rec)
    assert done.status is OperationStatus.SUCCEEDED, done.failure
    assert any("TEAM-HV acknowledged" in v and "announced" in v for v in done.verdicts)
    assert env.world.images() == {"hv:2"}


def test_a_revert_is_not_blocked_by_rules_that_judge_upgrades(env: Env) -> None:
    rec = env.reconciler()
    rec.reconcile("lab")
    sha = env.merge_pr(9, "lab: chart 1.1.0", fleet_files("1.1.0", "hv:2"))
    assert drive(env, rec).status is OperationStatus.SUCCEEDED
    # A team rule added since would refuse the old state as an upgrade (a chart change).
    team = (
        "rules:\n  - id: TEAM-FREEZE\n    description: chart frozen\n    severity: deny\n"
        "    check: {kind: path, path: cluster.hypervisorImage, op: changed}\n"
    )
    (env.human.path / "policies").mkdir(exist_ok=True)
    env.human.commit("policies: freeze", {"policies/team.yaml": team})
    rec.reconcile("lab")
    env.human.revert(sha)
    done = drive(env, rec)
    assert done.kind is OperationKind.ROLLBACK and done.status is OperationStatus.SUCCEEDED
    assert env.world.images() == {"hv:1"}


def test_a_failing_pass_is_recorded_once_and_cleared_when_passes_succeed(env: Env) -> None:
    rec = env.reconciler()
    rec.reconcile("lab")
    working = rec.executor_for

    def broken(spec: object) -> object:
        raise ConfigError('kube context "gpu-lab" not found in ~/.kube/config')

    rec.executor_for = broken  # type: ignore[assignment]
    env.merge_pr(10, "lab: hv:2", fleet_files("1.0.0", "hv:2"))
    for _ in range(3):
        try:
            rec.reconcile("lab")
        except GitOpsBotError:
            pass
        else:
            raise AssertionError("the pass should fail")
        env.clock.t += timedelta(minutes=1)
    env.human.pull()
    git("fetch", "--quiet", "origin", cwd=env.human.path)
    failing = rec.store.pass_failure("lab")
    assert failing is not None and "gpu-lab" in failing.error
    log = git("log", "--format=%s", "origin/gitopsbot/state", cwd=env.human.path)
    assert log.count("passes fail") == 1, log  # deduplicated: one commit, not one per poll
    text, _ = render(rec.store, "lab", env.clock.t)
    assert "every pass fails since" in text and "gpu-lab" in text

    rec.executor_for = working
    done = drive(env, rec)
    assert done.status is OperationStatus.SUCCEEDED
    assert rec.store.pass_failure("lab") is None


def test_an_idle_cluster_that_cannot_be_reached_shows_every_pass_fails(env: Env) -> None:
    """#28 item 9: no operation yet, no merge coming: a missing kube context, then an
    unreachable API server, are each a failing pass recorded for ``status``, not only a log
    line; the first pass that reaches the cluster clears it."""
    rec = env.reconciler()
    rec.reconcile("lab")  # the baseline: nothing applied, nothing running
    working = rec.executor_for

    def missing(spec: object) -> object:
        raise ConfigError('kube context "gpu-lab" not found in ~/.kube/config')

    rec.executor_for = missing  # type: ignore[assignment]
    for _ in range(2):
        try:
            rec.reconcile("lab")
        except GitOpsBotError:
            pass
        else:
            raise AssertionError("an idle pass that cannot reach the cluster should fail")
        env.clock.t += timedelta(seconds=5)  # the next poll, well within a minute
    text, _ = render(rec.store, "lab", env.clock.t)
    assert "no operation yet" in text
    assert "⚠ every pass fails since" in text and '"gpu-lab" not found' in text

    rec.executor_for = working
    env.helm.fail("status", TransientError("dial tcp 10.0.0.9:6443: connection refused"))
    try:
        rec.reconcile("lab")
    except GitOpsBotError:
        pass
    else:
        raise AssertionError("an unreachable cluster should fail the idle pass")
    failing = rec.store.pass_failure("lab")
    assert failing is not None and "connection refused" in failing.error

    rec.reconcile("lab")
    assert rec.store.pass_failure("lab") is None


def test_a_manual_revision_after_the_bot_is_reported_not_undone(env: Env) -> None:
    rec = env.reconciler()
    rec.reconcile("lab")
    env.merge_pr(11, "lab: hv:2", fleet_files("1.0.0", "hv:2"))
    assert drive(env, rec).status is OperationStatus.SUCCEEDED
    spec_values = {"cluster": {"name": "lab-tfc", "hypervisorImage": "hv:9"}}
    env.helm.upgrade(
        UpgradeRequest(
            release=RELEASE,
            namespace=NS,
            chart=ChartRef(name="tensor-fusion", repo_url="https://charts.example.invalid"),
            version="1.1.0",
            values=spec_values,
            description="break-glass by alice",
        )
    )
    made = upgrades(env)
    env.clock.t += timedelta(minutes=5)
    assert rec.reconcile("lab").action == "idle"
    found = rec.store.manual_revision("lab")
    assert found is not None and found.description == "break-glass by alice"
    assert found.chart_version == "1.1.0"
    text, _ = render(rec.store, "lab", env.clock.t)
    assert "made outside the bot" in text
    commits = state_commits_after_fetch(env)
    for _ in range(3):
        env.clock.t += timedelta(minutes=5)
        rec.reconcile("lab")
    assert upgrades(env) == made  # not fought
    assert state_commits_after_fetch(env) == commits  # reported once


def test_a_manual_revision_read_while_helm_made_it_is_recorded_again_once_finished(
    env: Env,
) -> None:
    """#29: a watch's event brings the look while a person's ``helm upgrade`` is still
    running: its revision reads "Preparing upgrade"; when helm finished it, the record says
    what the person wrote. Once per change, never per look."""
    from gitopsbot.core.operations.manual_revision import ManualRevision

    rec = env.reconciler()
    rec.reconcile("lab")
    at = env.clock.t
    pending = ManualRevision(4, "1.1.0", "Preparing upgrade", at)
    done = ManualRevision(4, "1.1.0", "break-glass by alice", at + timedelta(seconds=20))
    assert rec.store.record_manual_revision("lab", pending) is True
    assert rec.store.record_manual_revision("lab", pending) is False  # the same: no commit
    assert rec.store.record_manual_revision("lab", done) is True
    assert rec.store.manual_revision("lab") == done
    assert rec.store.record_manual_revision("lab", done) is False


def test_an_idle_cluster_is_read_in_full_only_when_its_release_changed(env: Env) -> None:
    """#29: the idle check looks at the release's mark (Helm's Secrets without their records)
    every minute and reads the release itself only when the mark changed: a person's revision
    is still reported at the next look, an unchanged release is never read again."""
    rec = env.reconciler()
    rec.reconcile("lab")
    env.merge_pr(13, "lab: hv:2", fleet_files("1.0.0", "hv:2"))
    assert drive(env, rec).status is OperationStatus.SUCCEEDED
    env.clock.t += timedelta(minutes=5)
    assert rec.reconcile("lab").action == "idle"  # the first look after the operation: read
    env.helm.calls.clear()
    for _ in range(5):
        env.clock.t += timedelta(minutes=2)
        assert rec.reconcile("lab").action == "idle"
    assert "status" not in env.helm.calls and "history" not in env.helm.calls
    assert env.helm.calls.count("release_mark") == 5
    env.helm.upgrade(
        UpgradeRequest(
            release=RELEASE,
            namespace=NS,
            chart=ChartRef(name="tensor-fusion", repo_url="https://charts.example.invalid"),
            version="1.1.0",
            values={"cluster": {"name": "lab-tfc", "hypervisorImage": "hv:9"}},
            description="break-glass by bob",
        )
    )
    env.helm.calls.clear()
    env.clock.t += timedelta(minutes=2)
    assert rec.reconcile("lab").action == "idle"
    assert env.helm.calls.count("status") == 1
    found = rec.store.manual_revision("lab")
    assert found is not None and found.description == "break-glass by bob"


def state_commits_after_fetch(env: Env) -> int:
    subprocess.run(["git", "fetch", "--quiet", "origin"], cwd=env.human.path, check=True)
    return state_commits(env)


def test_a_chart_helm_cannot_use_blocks_without_revert_or_rollback(env: Env) -> None:
    """Issue 10 part 4: a step that fails before it changed anything in the cluster (helm
    cannot fetch or refuses the chart) blocks the operation: no revert is committed and no
    rollback runs, though the cluster's onFailure is rollback."""
    rec = env.reconciler()
    rec.reconcile("lab")
    sha = env.merge_pr(12, "lab: chart 1.1.0", fleet_files("1.1.0", "hv:2", on_failure="rollback"))
    env.helm.fail(
        "upgrade",
        HelmChartUnusable("helm upgrade tf: chart tensor-fusion 1.1.0 cannot be used: illegal"),
    )
    done = drive(env, rec)
    assert done.status is OperationStatus.BLOCKED, done.failure
    assert done.remediation == "" and "nothing was changed" in done.failure
    assert done.step("helm-upgrade").state.value == "failed"
    for _ in range(3):
        rec.reconcile("lab")
        env.clock.t += timedelta(minutes=1)
    env.human.pull()
    assert git("rev-parse", "HEAD", cwd=env.human.path).strip() == sha  # no revert on main
    assert rec.store.current("lab") == done  # no rollback started
    assert env.helm.history(RELEASE, NS)[-1].chart_version == "1.0.0"
    assert env.forge.status_of(sha, "gitopsbot/apply") is CommitState.FAILURE
