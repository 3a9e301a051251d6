"""Rollout gates in the sandbox (issue 18, docs/rollout-gates.md): real helm 4, git over HTTP,
the API emulator and controller simulator, the local GitHub, and a Prometheus-compatible
server on loopback (sandbox/prometheus.py) named by the cluster's ``prometheus:`` block.

One pool of three nodes rolls in three batches (33%: one node each); its gates are
judged before each batch with the switch closed:

- every gate passes: the rollout goes batch by batch, the switch closed between batches
  (phase ``between-batches``), each judgement recorded with its evidence, one query per
  boundary, and it succeeds;
- the Prometheus gate fails after the first batch: the pool halts naming the gate and the
  value seen, the switch is closed, ``onFailure: halt`` leaves the cluster as it is, and the
  nodes beyond the first batch stay on the old image;
- Prometheus answers 503: inconclusive, the switch stays closed, one retry a second later,
  then a halt saying inconclusive; a Prometheus that recovers before the retries run out
  lets the rollout go on;
- a ``kubernetes`` gate ``no-crashloop`` with a pod made to wait in CrashLoopBackOff in the
  API emulator fails and halts.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator

import pytest

from gitopsbot.core.records.journal import Journal, OperationKind, OperationStatus, PhaseState
from gitopsbot.sandbox.prometheus import PromServer
from gitopsbot.sandbox.story import StoryWorld, git
from gitopsbot.sandbox.story_bot import BotRunner
from gitopsbot.sandbox.story_fleet import CLUSTER
from gitopsbot.sandbox.story_waits import finished_op, state_reader, wait_for
from tests.e2e.conftest import (  # noqa: F401  (_needs_git, _uses_binaries: autouse)
    NEW_IMAGE,
    OLD_IMAGE,
    Watch,
    _needs_git,
    _uses_binaries,
    helm_history,
    pool_policies,
)

pytestmark = pytest.mark.slow

ROLLOUT = f"clusters/{CLUSTER}/rollout.yaml"
STEP = "pool/shared/hypervisor"
QUERY = "sum(rate(tf_worker_errors_total[5m]))"


@pytest.fixture
def prom() -> Iterator[PromServer]:
    with PromServer() as server:
        yield server


def gates_yaml(*, retries: int = 1, kube: str = "") -> str:
    lines = [
        "    gates:",
        "      - name: error-rate",
        f"        prometheus: {{query: '{QUERY}', below: 0.5}}",
        "      - name: no-alerts",
        "        alerts: {matchers: {severity: critical}}",
    ]
    if kube:
        lines += ["      - name: apps-healthy", f"        kubernetes: {kube}"]
    lines += [f"    gateRetries: {retries}", "    gateRetryInterval: 1s"]
    return "\n".join(lines) + "\n"


def merge_with_gates(world: StoryWorld, prom: PromServer, gates: str) -> str:
    """The proposal, with the cluster's Prometheus and the pool's gates added to its
    rollout.yaml by a person before the merge; returns the operation id."""
    proposal = world.propose()
    h = world.human
    git("fetch", "--quiet", "origin", cwd=h)
    git("checkout", "--quiet", "-B", "gates", f"origin/{proposal.branch}", cwd=h)
    path = h / ROLLOUT
    text = path.read_text()
    text = f"prometheus:\n  url: {prom.url}\n  timeout: 2s\n" + text
    text = text.replace("  shared:\n", "  shared:\n" + gates, 1)
    path.write_text(text)
    git("commit", "--quiet", "-am", "gates for pool shared", cwd=h)
    git("push", "--quiet", "origin", f"gates:{proposal.branch}", cwd=h)
    sha = world.merge(proposal.number)
    return f"{CLUSTER}-{sha[:12]}"


def story(make_world: Callable[..., StoryWorld], **changes: object) -> StoryWorld:
    options: dict[str, object] = {
        "pools": 1,
        "window_lead_seconds": None,
        "batch_percentage": 33,  # three batches of one node (the controller rounds up)
        "batch_interval": "1s",
        "hypervisor_ready_delay": 0.5,
        "on_failure": "halt",
        "poll_interval": "2s",
    }
    options.update(changes)
    return make_world(**options)


def queries(prom: PromServer) -> int:
    return sum(1 for r in prom.requests if r.path == "/api/v1/query" and r.query == QUERY)


def shared_switch(world: StoryWorld) -> bool:
    return bool(pool_policies(world)["shared"].get("autoUpdateHypervisor"))


def on_new(images: dict[str, list[str]]) -> set[str]:
    return {node for node, got in images.items() if got == [NEW_IMAGE]}


def states(watch: Watch, op: str) -> list[PhaseState]:
    out: list[PhaseState] = []
    for _, j in watch.passes:
        if j is not None and j.op_id == op and any(p.step == STEP for p in j.phases):
            state = j.phase(STEP).state
            if not out or out[-1] is not state:
                out.append(state)
    return out


def test_gates_pass_batch_by_batch(
    make_world: Callable[..., StoryWorld],
    make_bot: Callable[..., BotRunner],
    prom: PromServer,
) -> None:
    t0 = time.monotonic()
    prom.vector(QUERY, ({"job": "tf"}, 0.01))
    prom.alert({"alertname": "DiskFilling", "severity": "warning"})  # not critical: no matter
    world = story(make_world)
    watch = Watch()
    make_bot(world, on_pass=watch)
    op = merge_with_gates(world, prom, gates_yaml())
    done = wait_for(world, finished_op(OperationKind.UPGRADE), what="the upgrade", timeout=120)
    assert done.op_id == op and done.status is OperationStatus.SUCCEEDED, done.failure
    phase = done.phase(STEP)
    assert phase.state is PhaseState.DONE
    # three batches: durations of the two that ended at a boundary, gates judged there
    assert len(phase.batches.seconds) >= 2, phase.batches
    assert phase.batches.gates_passed >= 66
    notes = {n.gate: n for n in phase.batches.gates}
    assert notes["error-rate"].outcome == "pass" and "0.01" in notes["error-rate"].evidence
    assert notes["no-alerts"].outcome == "pass"
    # the switch was closed between batches, and judged before each batch: before the first,
    # after the first and after the second
    seen = states(watch, op)
    assert seen.count(PhaseState.BETWEEN) >= 2, seen
    assert queries(prom) >= 3
    assert any(r.path == "/api/v1/alerts" for r in prom.requests)
    assert not shared_switch(world)
    images = world.hypervisor_images()
    assert on_new(images) == set(images)
    print(f"gates pass: {time.monotonic() - t0:.1f}s")


def after_first_batch(watch: Watch, do: Callable[[Journal], None]) -> Callable[..., None]:
    """The bot's ``on_pass``: recorded by ``watch``; ``do(journal)`` runs inside every pass
    once the pool is past its first batch, before the bot's next pass (which judges the
    gates), so the change lands exactly at that boundary."""

    def on_pass(result: object, journal: Journal | None) -> None:
        watch(result, journal)  # type: ignore[arg-type]
        if journal is None or not any(p.step == STEP for p in journal.phases):
            return
        if journal.phase(STEP).progress > 0:
            do(journal)

    return on_pass


def held_still(world: StoryWorld, seconds: float = 3.0) -> set[str]:
    """The nodes on the new image, unchanged over ``seconds`` (the controller does nothing
    more with the switch closed)."""
    before = on_new(world.hypervisor_images())
    time.sleep(seconds)
    after = on_new(world.hypervisor_images())
    assert after == before
    return after


def test_a_failed_gate_halts_after_the_first_batch(
    make_world: Callable[..., StoryWorld],
    make_bot: Callable[..., BotRunner],
    prom: PromServer,
) -> None:
    t0 = time.monotonic()
    prom.vector(QUERY, ({"job": "tf"}, 0.01))
    world = story(make_world, batch_interval="3s")
    watch = Watch()
    bad = lambda _j: prom.vector(QUERY, ({"job": "tf"}, 0.93))  # noqa: E731
    make_bot(world, on_pass=after_first_batch(watch, bad))
    op = merge_with_gates(world, prom, gates_yaml())
    done = wait_for(world, finished_op(OperationKind.UPGRADE), what="the halt", timeout=120)
    assert done.op_id == op and done.status is OperationStatus.FAILED
    phase = done.phase(STEP)
    assert phase.state is PhaseState.HALTED
    assert phase.halt_reason.startswith("pool shared: gate error-rate failed: ")
    assert "0.93" in phase.halt_reason, phase.halt_reason
    assert "0.93" in (done.failure or ""), done.failure
    failed = {n.gate: n for n in phase.batches.gates}
    assert failed["error-rate"].outcome == "fail" and "0.93" in failed["error-rate"].evidence
    assert failed["no-alerts"].outcome == "pass"
    assert 0 < phase.progress < 100
    # the switch is closed, and onFailure: halt touches nothing: the first batch's node is
    # updated, the others stay on the old image
    assert not shared_switch(world)
    updated = held_still(world)
    images = world.hypervisor_images()
    assert len(updated) == 1, images
    assert all(images[n] == [OLD_IMAGE] for n in set(images) - updated), images
    assert PhaseState.BETWEEN in states(watch, op)
    print(f"gate fails: {time.monotonic() - t0:.1f}s")


def test_an_inconclusive_gate_retries_then_halts(
    make_world: Callable[..., StoryWorld],
    make_bot: Callable[..., BotRunner],
    prom: PromServer,
) -> None:
    t0 = time.monotonic()
    prom.vector(QUERY, ({"job": "tf"}, 0.01))
    world = story(make_world, batch_interval="3s")
    watch = Watch()
    down = lambda _j: prom.error(QUERY, "unavailable", "overloaded", status=503)  # noqa: E731
    make_bot(world, on_pass=after_first_batch(watch, down))
    op = merge_with_gates(world, prom, gates_yaml(retries=1))
    done = wait_for(world, finished_op(OperationKind.UPGRADE), what="the halt", timeout=120)
    assert done.op_id == op and done.status is OperationStatus.FAILED
    phase = done.phase(STEP)
    assert phase.state is PhaseState.HALTED
    assert "gate inconclusive 2 times in a row (gateRetries 1): error-rate:" in phase.halt_reason
    # the retry waited with the switch closed, and said so
    waits = [
        j.phase(STEP).batches.waiting
        for _, j in watch.passes
        if j is not None and j.op_id == op and any(p.step == STEP for p in j.phases)
    ]
    assert any(w.startswith("gate inconclusive (1/1): error-rate:") for w in waits), waits
    assert not shared_switch(world)
    assert len(held_still(world)) == 1
    assert queries(prom) >= 3  # before the first batch, then twice at the boundary
    print(f"gate inconclusive: {time.monotonic() - t0:.1f}s")


def test_a_prometheus_that_recovers_within_the_retries_lets_it_go_on(
    make_world: Callable[..., StoryWorld],
    make_bot: Callable[..., BotRunner],
    prom: PromServer,
) -> None:
    t0 = time.monotonic()
    prom.vector(QUERY, ({"job": "tf"}, 0.01))
    world = story(make_world)
    watch = Watch()
    flaky: list[str] = []

    def outage(j: Journal) -> None:
        b = j.phase(STEP).batches
        if not flaky:  # past the first batch: Prometheus goes down
            flaky.append("down")
            prom.http(QUERY, 503, b"upstream unavailable\n")
        elif b.gate_attempts == 1 and len(flaky) == 1:  # one inconclusive judgement: back
            flaky.append("up")
            prom.vector(QUERY, ({"job": "tf"}, 0.02))

    make_bot(world, on_pass=after_first_batch(watch, outage))
    op = merge_with_gates(world, prom, gates_yaml(retries=1))
    done = wait_for(world, finished_op(OperationKind.UPGRADE), what="the upgrade", timeout=120)
    assert done.op_id == op and done.status is OperationStatus.SUCCEEDED, done.failure
    assert flaky == ["down", "up"]
    images = world.hypervisor_images()
    assert on_new(images) == set(images)
    print(f"gate recovers: {time.monotonic() - t0:.1f}s")


def test_a_kubernetes_gate_sees_a_crashlooping_pod_and_halts(
    make_world: Callable[..., StoryWorld],
    make_bot: Callable[..., BotRunner],
    prom: PromServer,
) -> None:
    t0 = time.monotonic()
    prom.vector(QUERY, ({"job": "tf"}, 0.01))
    world = story(make_world, batch_interval="3s")
    store = world.store()
    ns = "tensor-fusion-sys"
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "trainer-0", "namespace": ns, "labels": {"app": "trainer"}},
        "spec": {"containers": [{"name": "train", "image": "acme/trainer:1"}]},
    }
    crashing = {
        "phase": "Running",
        "containerStatuses": [
            {
                "name": "train",
                "ready": False,
                "restartCount": 4,
                "image": "acme/trainer:1",
                "imageID": "",
                "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 40s"}},
                "lastState": {},
            }
        ],
    }
    watch = Watch()

    def crash(_j: Journal) -> None:
        found = store.get("v1", "Pod", ns, "trainer-0")
        if found is None:
            made = store.create(pod)
            store.update_status({**made, "status": crashing})

    make_bot(world, on_pass=after_first_batch(watch, crash))
    kube = f"{{check: no-crashloop, selector: 'app=trainer', namespace: {ns}}}"
    op = merge_with_gates(world, prom, gates_yaml(kube=kube))
    done = wait_for(world, finished_op(OperationKind.UPGRADE), what="the halt", timeout=120)
    assert done.op_id == op and done.status is OperationStatus.FAILED
    phase = done.phase(STEP)
    assert phase.halt_reason.startswith("pool shared: gate apps-healthy failed: ")
    assert "trainer-0" in phase.halt_reason and "CrashLoopBackOff" in phase.halt_reason
    notes = {n.gate: n.outcome for n in phase.batches.gates}
    assert notes == {"error-rate": "pass", "no-alerts": "pass", "apps-healthy": "fail"}
    assert not shared_switch(world)
    assert len(held_still(world)) == 1
    assert re.search(r"halt|fail", done.failure or "")
    print(f"kube gate: {time.monotonic() - t0:.1f}s")


def test_a_failed_gate_rolls_back_without_the_gate_stopping_the_rollback(
    make_world: Callable[..., StoryWorld],
    make_bot: Callable[..., BotRunner],
    prom: PromServer,
) -> None:
    """Issue 28 item 1 (docs/decisions.md, "A rollback beats the gates"): the pool's gates are
    in Git before the upgrade (so the revert keeps them); the error-rate gate fails after the
    first batch and stays failed; with onFailure: rollback the rollback runs its pool phase
    without judging that gate and ends with every node back on the old image."""
    prom.vector(QUERY, ({"job": "tf"}, 0.01))
    world = story(make_world, batch_interval="3s", on_failure="rollback")
    h = world.human
    git("pull", "--quiet", "origin", "main", cwd=h)
    path = h / ROLLOUT
    text = f"prometheus:\n  url: {prom.url}\n  timeout: 2s\n" + path.read_text()
    path.write_text(text.replace("  shared:\n", "  shared:\n" + gates_yaml(), 1))
    git("commit", "--quiet", "-am", "gates for pool shared", cwd=h)
    git("push", "--quiet", "origin", "HEAD:main", cwd=h)
    watch = Watch()
    bad = lambda _j: prom.vector(QUERY, ({"job": "tf"}, 0.93))  # noqa: E731
    make_bot(world, on_pass=after_first_batch(watch, bad))
    proposal = world.propose()
    op = f"{CLUSTER}-{world.merge(proposal.number)[:12]}"
    back = wait_for(world, finished_op(OperationKind.ROLLBACK, after=op), what="the rollback",
                    timeout=240)  # fmt: skip
    assert back.status is OperationStatus.SUCCEEDED, back.failure
    reader = state_reader(world)
    reader.refresh()
    failed = reader.history(CLUSTER, op)
    assert failed is not None and failed.status is OperationStatus.FAILED
    assert failed.phase(STEP).halt_reason.startswith("pool shared: gate error-rate failed: ")
    assert back.reverts_op == op
    assert back.phase(STEP).state is PhaseState.DONE
    assert back.phase(STEP).batches.gates == ()  # nothing judged, though the metric is bad
    assert not shared_switch(world)
    images = world.hypervisor_images()
    assert images and all(got == [OLD_IMAGE] for got in images.values()), images


def _gates_in_git_before(world: StoryWorld, prom: PromServer) -> None:
    """The cluster's Prometheus and pool shared's gates committed to main before the upgrade
    (so the revert keeps them)."""
    h = world.human
    git("pull", "--quiet", "origin", "main", cwd=h)
    path = h / ROLLOUT
    text = f"prometheus:\n  url: {prom.url}\n  timeout: 2s\n" + path.read_text()
    path.write_text(text.replace("  shared:\n", "  shared:\n" + gates_yaml(), 1))
    git("commit", "--quiet", "-am", "gates for pool shared", cwd=h)
    git("push", "--quiet", "origin", "HEAD:main", cwd=h)


def _edit_main(world: StoryWorld, edit: Callable[[str], str], message: str) -> str:
    """A person commits an edit of rollout.yaml on top of main (the bot's revert included)."""
    h = world.human
    git("fetch", "--quiet", "origin", cwd=h)
    git("checkout", "--quiet", "main", cwd=h)
    git("reset", "--quiet", "--hard", "origin/main", cwd=h)
    path = h / ROLLOUT
    path.write_text(edit(path.read_text()))
    git("commit", "--quiet", "-am", message, cwd=h)
    git("push", "--quiet", "origin", "HEAD:main", cwd=h)
    return git("rev-parse", "HEAD", cwd=h).strip()


def test_a_pause_in_git_holds_the_automatic_rollback_at_the_next_batch_boundary(
    make_world: Callable[..., StoryWorld],
    make_bot: Callable[..., BotRunner],
    prom: PromServer,
) -> None:
    """Issue 28 item 3, rollback × pause (docs/decisions.md, "A failure is remediated first
    ... the pause then holds the rollback's pools"): the gate fails after the second batch
    (two nodes on the new image), onFailure: rollback starts the rollback; while its pool
    phase rolls the first node back, a person pushes ``paused: true`` for pool shared. The
    rollback's switch closes at the boundary, the phase is recorded paused and by what, the
    pause commit starts no operation; removing it lets the rollback finish on the old
    chart."""
    t0 = time.monotonic()
    prom.vector(QUERY, ({"job": "tf"}, 0.01))
    # Batches 6 s apart: the bot sees the pause before the controller's next batch.
    world = story(make_world, batch_interval="6s", on_failure="rollback")
    _gates_in_git_before(world, prom)
    watch = Watch()
    paused: list[str] = []

    def on_pass(result: object, journal: Journal | None) -> None:
        watch(result, journal)  # type: ignore[arg-type]
        if journal is None or not any(p.step == STEP for p in journal.phases):
            return
        phase = journal.phase(STEP)
        if journal.kind is OperationKind.UPGRADE and phase.progress >= 60:
            prom.vector(QUERY, ({"job": "tf"}, 0.93))  # after the second batch
        rolling_back = journal.kind is OperationKind.ROLLBACK
        if rolling_back and not paused and phase.state is PhaseState.ROLLING:
            # Pushed inside the pass that opened the rollback's switch: the next pass
            # (which fetches) finds it while the first batch back is in flight.
            pause = lambda t: t.replace("  shared:\n", "  shared:\n    paused: true\n", 1)  # noqa: E731
            paused.append(_edit_main(world, pause, "hold pool shared"))

    make_bot(world, on_pass=on_pass)
    proposal = world.propose()
    op = f"{CLUSTER}-{world.merge(proposal.number)[:12]}"

    def held(store: object) -> Journal | None:
        j = store.current(CLUSTER)  # type: ignore[attr-defined]
        if j is None or j.kind is not OperationKind.ROLLBACK or not paused:
            return None
        return j if j.phase(STEP).paused_by.startswith("paused in Git") else None

    j = wait_for(world, held, what="the rollback held by the pause", timeout=240)
    assert j.reverts_op == op and j.status is OperationStatus.RUNNING
    pause_sha = paused[0]
    phase = j.phase(STEP)
    assert phase.paused_by == f"paused in Git ({ROLLOUT} at {pause_sha[:12]}, pool shared)"
    assert phase.state in (PhaseState.PAUSED, PhaseState.PENDING), phase.state
    assert j.step(STEP).detail.startswith("paused: "), j.step(STEP).detail
    assert not shared_switch(world)
    # Held at the boundary: the batch in flight ends, nothing more moves; a node the failed
    # upgrade changed is still on the new image.
    time.sleep(7)  # longer than the batch interval
    still = held_still(world, 7.0)
    assert still, world.hypervisor_images()
    assert not shared_switch(world)
    # The pause commit started no operation of its own: seen, the rollback still current.
    reader = state_reader(world)
    reader.refresh()
    assert reader.seen(CLUSTER) == pause_sha
    current = reader.current(CLUSTER)
    assert current is not None and current.op_id == j.op_id and reader.queued(CLUSTER) is None

    _edit_main(world, lambda t: t.replace("    paused: true\n", "", 1), "release pool shared")
    back = wait_for(world, finished_op(OperationKind.ROLLBACK, after=op), what="the rollback",
                    timeout=180)  # fmt: skip
    assert back.op_id == j.op_id and back.status is OperationStatus.SUCCEEDED, back.failure
    assert back.phase(STEP).state is PhaseState.DONE and back.phase(STEP).paused_by == ""
    assert back.phase(STEP).batches.gates == ()  # the failing gate was never judged
    history = helm_history(world)
    assert history[-1]["chart"] == "tensor-fusion-1.8.0", history
    assert history[-1]["description"] == f"gitopsbot op={back.op_id} step=helm-upgrade"
    images = world.hypervisor_images()
    assert images and all(got == [OLD_IMAGE] for got in images.values()), images
    assert not shared_switch(world)
    log = world.state_log()
    assert "(paused in Git" in log and "(resumed)" in log
    print(f"rollback x pause: {time.monotonic() - t0:.1f}s")
