"""Secrets and what people see: a canary secret reaches helm (merged at apply time only) but
never the state branch (backups are masked), the PR or the status output; `gitopsbot status`
prints each cluster's steps and progress from Git alone; a newer merge supersedes a queued
one."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from gitopsbot.bot.steps.executor import Executor
from gitopsbot.cli import main
from gitopsbot.commands.status import render
from gitopsbot.core.records.journal import OperationStatus
from tests.executor.conftest import Env, fleet_files
from tests.executor.test_reconciler_upgrade import drive

CANARY = "canary-secret-7f3a9c-do-not-leak"
CREDENTIALS = {
    "clusters/lab/credentials.yaml": (
        "secrets:\n  agent.enrollToken:\n    kubernetesSecret:\n"
        "      name: agent\n      key: token\n      namespace: tf-system\n"
    )
}


@pytest.fixture(autouse=True)
def _helm_and_kubectl(binaries: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    """`gitopsbot run` takes helm and kubectl from the environment here (never a download;
    docs/cluster-access.md); subprocesses inherit it."""
    monkeypatch.setenv("GITOPSBOT_HELM", str(binaries["helm4"]))
    monkeypatch.setenv("GITOPSBOT_KUBECTL", str(binaries["kubectl"]))


class CanarySecrets:
    def resolve_all(self, refs):  # type: ignore[no-untyped-def]
        return {ref.values_path: CANARY for ref in refs}


def test_secrets_reach_helm_only(env: Env) -> None:
    # What the release holds today includes the secret (installed with it).
    env.helm.releases[("tf-system", "tf")][-1].values["agent"]["enrollToken"] = CANARY
    rec = env.reconciler()
    executor = Executor(cluster=env.cluster, helm=env.helm, secrets=CanarySecrets())
    rec.executor_for = lambda spec: executor
    rec.reconcile("lab")
    env.merge_pr(9, "lab: hv:2", {**fleet_files("1.1.0", "hv:2"), **CREDENTIALS})
    journal = drive(env, rec)
    assert journal.status is OperationStatus.SUCCEEDED, journal.failure
    assert env.helm.get_values("tf", "tf-system")["agent"]["enrollToken"] == CANARY
    repo = env.repo("reader")
    head = repo.head("gitopsbot/state")
    tree = repo.tree(head)
    backup = f"clusters/lab/backups/{journal.op_id}"
    assert b"enrollToken" in tree.read(f"{backup}/values.yaml")  # the key is kept, masked
    stack = ["clusters"]
    seen_files = 0
    while stack:
        d = stack.pop()
        for name in tree.list(d):
            path = f"{d}/{name}"
            data = tree.read(path)
            if data is None:
                stack.append(path)
            else:
                seen_files += 1
                assert CANARY.encode() not in data, path
    assert seen_files >= 4
    for log_entry in repo.log("gitopsbot/state", None, 200):
        assert CANARY not in log_entry.message
    assert all(CANARY not in c for c in env.forge.comments_on(9))


def test_status_from_git(env: Env, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    rec = env.reconciler()
    rec.reconcile("lab")
    env.merge_pr(11, "lab: hv:2", fleet_files("1.0.0", "hv:2"))
    for _ in range(6):  # part-way: the helm upgrade has run, pools not finished
        rec.reconcile("lab")
        env.clock.t += timedelta(minutes=1)
    text, code = render(rec.store, None, env.clock.t)
    assert code == 0
    assert "lab: rollout-only lab-" in text and "running" in text and "(PR #11)" in text
    assert "✓ helm-upgrade" in text and "· verify" in text

    monkeypatch.setenv("GITOPSBOT_CACHE", str(env.tmp / "cli-cache"))
    assert main(["status", "--fleet-url", env.url, "--cluster", "lab"]) == 0
    out = capsys.readouterr().out
    assert "helm-upgrade" in out and "desired commit" in out
    assert main(["status", "--fleet-url", env.url, "--cluster", "nope"]) == 1
    assert "no record on the state branch" in capsys.readouterr().out


def test_a_newer_merge_supersedes_the_queued_one(env: Env) -> None:
    rec = env.reconciler()
    rec.reconcile("lab")
    first = env.merge_pr(12, "lab: hv:2", fleet_files("1.0.0", "hv:2"))
    rec.reconcile("lab")  # started
    second = env.merge_pr(13, "lab: hv:3", fleet_files("1.0.0", "hv:3"))
    assert rec.reconcile("lab").action == "queued"  # behind the running one
    third = env.merge_pr(14, "lab: hv:4", fleet_files("1.0.0", "hv:4"))
    rec.reconcile("lab")
    queued = rec.store.queued("lab")
    assert queued is not None and queued.desired_sha == third
    superseded = rec.store.history("lab", f"lab-{second[:12]}")
    assert superseded is not None and superseded.status is OperationStatus.SUPERSEDED
    assert superseded.queue.superseded_by == queued.op_id
    done = drive(env, rec, passes=120)
    assert done.desired_sha == third and done.status is OperationStatus.SUCCEEDED
    assert rec.store.history("lab", f"lab-{first[:12]}").status is OperationStatus.SUCCEEDED
    assert env.world.images() == {"hv:4"}


def test_r24_change_restarts_the_controller_once(env: Env) -> None:
    rec = env.reconciler()
    rec.reconcile("lab")
    files = fleet_files("1.0.0", "hv:1")
    files["clusters/lab/values.yaml"] += "dynamicConfig:\n  metricsTTL: 7d\n"
    env.merge_pr(15, "lab: metrics TTL", files)
    done = drive(env, rec)
    assert done.kind.value == "controller-restart" and done.status is OperationStatus.SUCCEEDED
    assert [s.name for s in done.steps] == [
        "backup",
        "helm-upgrade",
        "controller-restart",
        "controller-ready",
        "verify",
    ]
    restarts = [
        c for c in env.cluster.calls if c == ("patch_merge", "Deployment tf-system/tf-controller")
    ]
    assert len(restarts) == 1
    assert env.helm.get_values("tf", "tf-system")["dynamicConfig"] == {"metricsTTL": "7d"}


def test_run_once_from_the_command_line(env: Env, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    monkeypatch.setenv("GITOPSBOT_CACHE", str(env.tmp / "cli-cache"))
    assert main(["run", "--fleet-url", env.url, "--once"]) == 0
    assert "lab: baseline" in capsys.readouterr().out
    assert main(["status", "--fleet-url", env.url]) == 0
    out = capsys.readouterr().out
    assert "lab: no operation yet (watching since" in out
    # the helm and kubectl `run` started with (GITOPSBOT_HELM/_KUBECTL here), from tools.yaml
    assert out.endswith("tools: helm v4.1.4, kubectl v1.33.9\n")
    assert main(["run", "--fleet-url", env.url, "--once", "--cluster", "nope"]) == 1
    assert "nope: not in the fleet" in capsys.readouterr().err
    assert main(["run", "--fleet", str(env.tmp / "not-a-repo"), "--once"]) == 1
