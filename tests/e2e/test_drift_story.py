"""Drift in the sandbox (issue 14 part 2): after the bot's upgrade, a person's manual
``helm upgrade --set`` and a hand edit of a GPUPool are each found by the drift check, with
real helm, kubectl, git and the local forge; the batch an availability budget shrank is the
bot's own pin, not drift (issue 28)."""

from __future__ import annotations

import argparse
import json
import subprocess
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pytest

from gitopsbot import app
from gitopsbot.adapters.metrics import BotMetrics
from gitopsbot.app import drift as drift_app
from gitopsbot.bot import drift as drift_check
from gitopsbot.bot.drift_proposer import DriftProposer
from gitopsbot.bot.drift_watch import DriftWatch
from gitopsbot.bot.journal_store import JournalStore
from gitopsbot.commands import drift as drift_command
from gitopsbot.commands import status
from gitopsbot.core.drift.report import DriftReport
from gitopsbot.core.fleet.model import DriftSettings
from gitopsbot.core.records.journal import OperationKind
from gitopsbot.fleetrepo import load_cluster, load_fleet
from gitopsbot.sandbox.forges.base import Pull
from gitopsbot.sandbox.story import StoryWorld, git
from gitopsbot.sandbox.story_bot import BotRunner
from gitopsbot.sandbox.story_fleet import CLUSTER
from gitopsbot.sandbox.story_waits import finished_op, state_reader, wait_for
from tests.e2e.conftest import NS, RELEASE, pool_policies

pytestmark = pytest.mark.slow
CANARY = "canary-enroll-0xC0FFEE-never-shown"


def check(world: StoryWorld) -> DriftReport:
    repo = world.git_repo("drift")
    repo.fetch()
    spec = load_cluster(repo.tree(repo.head("main") or "main"), CLUSTER)
    journal = fresh_state(world).current(CLUSTER)
    charts = world.chart_source()
    chart = charts.chart(spec.release.chart_repo_url, spec.release.chart_name, spec.release.version)
    make = app.executor_factory(world.run_options(), world.tools())
    return drift_check.check(drift_check.DriftInputs(spec, journal, chart), make)


def test_manual_helm_upgrade_and_gpupool_edit_are_drift(
    make_world: Callable[..., StoryWorld],
    make_bot: Callable[..., BotRunner],
    binaries: dict[str, Path],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    world = make_world(window_lead_seconds=None)
    bot = make_bot(world)
    world.merge(world.propose().number)
    wait_for(world, finished_op(OperationKind.UPGRADE), what="the upgrade", timeout=180)
    bot.stop()
    clean = check(world)
    assert not clean.drifted, clean.lines()
    code, out, err = command(world, monkeypatch, capsys)
    assert (code, out) == (0, f"{CLUSTER}: no drift\n"), err

    # A person edits the pool's batch size by hand, where it lasts: in the TensorFusionCluster's
    # pool template, which the controller copies to the GPUPool (R11).
    where = "/spec/gpuPools/0/specTemplate/nodeManagerConfig/nodePoolRollingUpdatePolicy"
    patch = f'[{{"op":"replace","path":"{where}/batchPercentage","value":80}}]'
    kubectl(world, binaries["kubectl"], "patch", "tensorfusioncluster", "tensor-fusion",
            "--type", "json", "-p", patch)  # fmt: skip
    edited = wait_drift(world, 2)
    assert [(i.what, i.where, i.desired, i.observed) for i in edited.items] == [
        (
            "pool-policy",
            "TensorFusionCluster tensor-fusion pool shared: batchPercentage",
            "50",
            "80",
        ),
        ("pool-policy", "GPUPool tensor-fusion-shared: batchPercentage", "50", "80"),
    ]
    opened = proposer(world).reconcile(edited)
    assert opened.action == "opened"
    pull = drift_pull(world, CLUSTER)
    assert pull.title == f"Drift on {CLUSTER}: make Git match the cluster"
    assert "batchPercentage: 80" in branch_file(world, "rollout.yaml")
    assert proposer(world).reconcile(check(world)).action == "unchanged"
    kubectl(world, binaries["kubectl"], "patch", "tensorfusioncluster", "tensor-fusion",
            "--type", "json", "-p", patch.replace("80", "50"))  # fmt: skip
    gone = wait_drift(world, 0)
    assert not gone.drifted
    assert proposer(world).reconcile(gone).action == "closed"
    assert drift_pull(world, CLUSTER, state="closed").number == opened.number

    version = helm_chart_version(world)
    world.helm("upgrade", RELEASE, "tensor-fusion", "--repo", world.chart_repo_url,
               "--version", version, "--namespace", NS, "--reuse-values",
               "--set", "controller.replicas=2", "--set", f"agent.enrollToken={CANARY}",
               "--force-conflicts")  # fmt: skip
    by_hand = check(world)
    assert [(i.what, i.where, i.observed) for i in by_hand.items if i.what != "pool-policy"] == [
        ("revision", "Helm revision 3", by_hand.items[0].observed),
        ("values", "controller.replicas", "2"),
        ("secret", "agent.enrollToken", "set (digest)"),
    ]
    assert "was made outside the bot" in by_hand.items[0].observed
    # The helm upgrade rendered the chart's own pool policy again (F1): switches open.
    assert ("pool-policy", "GPUPool tensor-fusion-shared: autoUpdateHypervisor", "true") in [
        (i.what, i.where, i.observed) for i in by_hand.items
    ]

    # One request again, with the values Git can hold; the secret nowhere in it.
    again = proposer(world).reconcile(by_hand)
    assert again.action == "opened" and again.number != opened.number
    pull = drift_pull(world, CLUSTER)
    values = branch_file(world, "values.yaml")
    assert "replicas: 2" in values
    assert CANARY not in pull.body + pull.title + values + branch_file(world, "rollout.yaml")
    assert "secret | agent.enrollToken" in pull.body
    watch, _metrics = scheduled(world, "propose-git")
    watch.check_once()  # the Event of run's schedule: the secret not in it either
    told = drift_events(world, binaries["kubectl"])
    assert told and all(CANARY not in json.dumps(e) for e in told)
    assert drift_pull(world, CLUSTER).number == again.number  # the same drift: unchanged

    # The command, as a person runs it: exit 1, the secret nowhere in its output.
    code, out, err = command(world, monkeypatch, capsys, "--json")
    assert code == 1, err
    found = json.loads(out)["clusters"][0]
    assert found["cluster"] == CLUSTER and found["drift"] is True
    assert CANARY not in out + err
    code, out, err = command(world, monkeypatch, capsys, "--cluster", CLUSTER)
    assert code == 1 and "values: controller.replicas: Git (absent), cluster 2" in out
    assert CANARY not in out + err


def command(
    world: StoryWorld,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    *args: str,
) -> tuple[int, str, str]:
    """``gitopsbot drift --fleet ... --kubeconfig ...`` in this process."""
    monkeypatch.setenv("GITOPSBOT_CACHE", str(world.state_dir / "drift-cache"))
    monkeypatch.setenv("GITOPSBOT_HELM", str(world.tools().helm))
    monkeypatch.setenv("GITOPSBOT_KUBECTL", str(world.tools().kubectl))
    parser = argparse.ArgumentParser()
    drift_command.register(parser.add_subparsers())
    assert world.remote is not None  # the remote's own bare repository: no credentials needed
    fleet = str(world.remote.root / "fleet.git")
    argv = ["drift", "--fleet", fleet, "--kubeconfig", str(world.kubeconfig), *args]
    parsed = parser.parse_args(argv)
    capsys.readouterr()
    code = drift_command.run(parsed)
    done = capsys.readouterr()
    return code, done.out, done.err


def fresh_state(world: StoryWorld) -> JournalStore:
    reader = state_reader(world)
    reader.refresh()
    return reader


def proposer(world: StoryWorld) -> DriftProposer:
    """The drift requests on the story's forge, in the mode that makes Git match."""
    repo = world.git_repo("drift-proposer")
    repo.fetch()
    settings = DriftSettings(on_drift="propose-git")
    return DriftProposer(repo, world.forge_client(), watched_branch="main", settings=settings)


def scheduled(world: StoryWorld, on_drift: str) -> tuple[DriftWatch, BotMetrics]:
    options = world.run_options()
    repo = world.git_repo("drift-watch")
    repo.fetch()
    settings = load_fleet(repo.tree(repo.head("main") or "main")).settings
    settings = replace(settings, drift=DriftSettings(on_drift=on_drift))  # type: ignore[arg-type]
    metrics = BotMetrics(world.clock)
    access = app.cluster_access(options)
    watch = drift_app.drift_watch(
        options, repo=repo, bot_settings=settings, clock=world.clock,
        forge=world.forge_client(), charts=world.chart_source(), access=access,
        instance="drift-test", tools=world.tools(), metrics=metrics,
    )  # fmt: skip
    return watch, metrics


def drift_events(world: StoryWorld, binary: Path) -> list[dict[str, str]]:
    listed = json.loads(kubectl(world, binary, "get", "events.events.k8s.io", "-A", "-o", "json"))
    return [e for e in listed["items"] if e.get("reason") == "Drifted"]


def drift_pull(world: StoryWorld, cluster: str, state: str = "open") -> Pull:
    assert world.forge is not None
    with world.forge.lock:
        found = [p for p in world.forge.pulls.values()
                 if p.head == f"gitopsbot-drift/{cluster}" and p.state == state]  # fmt: skip
    assert len(found) == 1, found
    return found[0]


def branch_file(world: StoryWorld, name: str) -> str:
    assert world.remote is not None
    done = subprocess.run(
        ["git", "--git-dir", str(world.remote.root / "fleet.git"), "show",
         f"gitopsbot-drift/{CLUSTER}:clusters/{CLUSTER}/{name}"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return done.stdout


def wait_drift(world: StoryWorld, items: int, timeout: float = 30) -> DriftReport:
    """The check once the controller has copied the template to the GPUPool."""
    deadline = time.monotonic() + timeout
    while True:
        found = check(world)
        if len(found.items) == items or time.monotonic() > deadline:
            return found
        time.sleep(0.2)


def kubectl(world: StoryWorld, binary: Path, *args: str) -> str:
    done = subprocess.run(
        [str(binary), "--kubeconfig", str(world.kubeconfig), *args],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout


def helm_chart_version(world: StoryWorld) -> str:
    listed = world.helm("list", "--namespace", NS, "--output", "json")
    (release,) = json.loads(listed)
    return str(release["chart"]).rsplit("-", 1)[1]


def test_gpupool_edited_while_the_controller_is_down_is_drift(
    make_world: Callable[..., StoryWorld],
    make_bot: Callable[..., BotRunner],
    binaries: dict[str, Path],
) -> None:
    """The controller reverts a GPUPool edit at once (R11); while it is down the edit stays,
    and the check names the GPUPool."""
    world = make_world(window_lead_seconds=None)
    bot = make_bot(world)
    world.merge(world.propose().number)
    wait_for(world, finished_op(OperationKind.UPGRADE), what="the upgrade", timeout=180)
    bot.stop()
    assert world.sandbox is not None and world.sandbox.sim is not None
    world.sandbox.sim.close()
    world.sandbox.sim = None
    patch = '{"spec":{"nodeManagerConfig":{"nodePoolRollingUpdatePolicy":{"batchPercentage":80}}}}'
    kubectl(world, binaries["kubectl"], "patch", "gpupool", "tensor-fusion-shared",
            "--type", "merge", "-p", patch)  # fmt: skip
    edited = check(world)
    assert [(i.what, i.where, i.desired, i.observed) for i in edited.items] == [
        ("pool-policy", "GPUPool tensor-fusion-shared: batchPercentage", "50", "80")
    ]
    # run's schedule, as build_bot wires it: the gauge, one Event, the request.
    watch, metrics = scheduled(world, "propose-git")
    found = watch.check_once()
    assert found[CLUSTER] == edited
    assert metrics.registry.get_sample_value("gitopsbot_drift_items", {"cluster": CLUSTER}) == 1
    assert "GPUPool tensor-fusion-shared: batchPercentage" in drift_pull(world, CLUSTER).body
    assert "batchPercentage: 80" in branch_file(world, "rollout.yaml")
    watch.check_once()  # the same drift: no second Event, the request unchanged
    told = drift_events(world, binaries["kubectl"])
    assert len(told) == 1, told
    assert told[0]["type"] == "Warning" and "batchPercentage" in told[0]["note"]
    # For status (Git only): recorded once on the state branch.
    line = drift_check.status_line(fresh_state(world), CLUSTER)
    assert line is not None and line.startswith(f"{CLUSTER}: drift (1: pool-policy) since ")
    shown, _ = status.render(fresh_state(world), CLUSTER, datetime.now(UTC))
    assert f"⚠ {line}" in shown, shown


def test_a_reapply_request_merged_applies_git_again(
    make_world: Callable[..., StoryWorld],
    make_bot: Callable[..., BotRunner],
) -> None:
    """onDrift: propose-reapply: the request bumps credentials.yaml's rotation; its merge is a
    change like any other (rollout-only), and the bot applies the release from Git over the
    drift: a value changed by hand (one Git holds: a key Git lacks would be refused by R8)."""
    world = make_world(window_lead_seconds=None)
    bot = make_bot(world)
    world.merge(world.propose().number)
    wait_for(world, finished_op(OperationKind.UPGRADE), what="the upgrade", timeout=180)
    bot.stop()
    world.helm("upgrade", RELEASE, "tensor-fusion", "--repo", world.chart_repo_url,
               "--version", helm_chart_version(world), "--namespace", NS, "--reuse-values",
               "--set", "controller.replicaCount=3", "--force-conflicts")  # fmt: skip
    watch, _metrics = scheduled(world, "propose-reapply")
    found = watch.check_once()[CLUSTER]
    assert isinstance(found, DriftReport) and found.drifted
    pull = drift_pull(world, CLUSTER)
    assert pull.title == f"Drift on {CLUSTER}: re-apply Git"
    assert branch_file(world, "credentials.yaml") == "rotation: 1\n"
    # Nothing changed the cluster yet: the check only reads, the request waits for a person.
    assert check(world).drifted
    make_bot(world)
    world.merge(pull.number)
    done = wait_for(world, finished_op(OperationKind.ROLLOUT_ONLY),
                    what="the re-apply", timeout=180)  # fmt: skip
    assert done.status.value == "succeeded", done.failure
    after = check(world)
    assert [i for i in after.items if i.what in ("values", "pool-policy")] == [], after.lines()
    watch.check_once()  # the drift is gone: the request is closed
    assert drift_pull(world, CLUSTER, state="closed").number == pull.number
    assert drift_check.status_line(fresh_state(world), CLUSTER) is None  # drift.yaml removed


def test_a_batch_the_availability_budget_shrank_is_not_drift(
    make_world: Callable[..., StoryWorld],
    make_bot: Callable[..., BotRunner],
) -> None:
    """Issue 28 item 3: ``maxUnavailable: 2`` of five nodes, one cordoned by a person, shrinks
    the 40% batch to 20%; the bot pins 20 in the TensorFusionCluster (the controller copies it
    to the GPUPool) and it stays after the upgrade. Drift, as ``run`` checks it with
    ``onDrift: propose-git``, reports the bot's own pin as pending, and opens no request to
    write 20 into rollout.yaml."""
    world = make_world(
        pools=1, nodes=5, window_lead_seconds=None, batch_percentage=40, batch_interval="1s",
        hypervisor_ready_delay=0.5, on_failure="halt", poll_interval="2s",
    )  # fmt: skip
    world.store().patch_merge(
        "v1", "Node", None, "tensor-fusion-shared-gpu-002", {"spec": {"unschedulable": True}}
    )
    bot = make_bot(world)
    proposal = world.propose()
    h = world.human
    git("fetch", "--quiet", "origin", cwd=h)
    git("checkout", "--quiet", "-B", "budget", f"origin/{proposal.branch}", cwd=h)
    rollout = h / f"clusters/{CLUSTER}/rollout.yaml"
    budget = "  shared:\n    maxUnavailable: 2\n"
    rollout.write_text(rollout.read_text().replace("  shared:\n", budget, 1))
    git("commit", "--quiet", "-am", "availability budget for pool shared", cwd=h)
    git("push", "--quiet", "origin", f"budget:{proposal.branch}", cwd=h)
    world.merge(proposal.number)
    done = wait_for(world, finished_op(OperationKind.UPGRADE), what="the upgrade", timeout=180)
    bot.stop()
    assert done.status.value == "succeeded", done.failure
    assert done.phase("pool/shared/hypervisor").batch_percentage == 20
    assert pool_policies(world)["shared"]["batchPercentage"] == 20  # the pin stays

    watch, metrics = scheduled(world, "propose-git")
    deadline = time.monotonic() + 30  # until the controller has copied the pin to the GPUPool
    while True:
        found = watch.check_once()[CLUSTER]
        assert isinstance(found, DriftReport), found
        pins = [p for p in found.pending if p.item.where.endswith("batchPercentage")]
        if len(pins) == 2 or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert not found.drifted, found.lines()
    assert sorted((p.item.where, p.item.desired, p.item.observed) for p in pins) == [
        ("GPUPool tensor-fusion-shared: batchPercentage", "40", "20"),
        ("TensorFusionCluster tensor-fusion pool shared: batchPercentage", "40", "20"),
    ]
    assert all(p.why == f"pinned by the bot's operation {done.op_id}" for p in pins)
    assert metrics.registry.get_sample_value("gitopsbot_drift_items", {"cluster": CLUSTER}) == 0
    assert world.forge is not None
    with world.forge.lock:
        requests = [p for p in world.forge.pulls.values()
                    if p.head == f"gitopsbot-drift/{CLUSTER}"]  # fmt: skip
    assert requests == []
