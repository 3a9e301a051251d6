"""Rollout gates in the sandbox (issue 18, docs/rollout-gates.md): real helm 4, git over HTTP,
the API emulator and controller simulator, the local GitHub, and a Prometheus-compatible
server on loopback (sandbox/prometheus.py) named by the cluster's ``prometheus:`` block.

One pool of three nodes rolls in three batches (34%); its gates are judged before each batch
with the switch closed:

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

from gitopsbot.core.journal import Journal, OperationKind, OperationStatus, PhaseState
from gitopsbot.sandbox.prometheus import PromServer
from gitopsbot.sandbox.story import BotRunner, StoryWorld, finished_op, git, wait_for
from gitopsbot.sandbox.story_fleet import CLUSTER
from tests.e2e.conftest import (  # noqa: F401  (fixtures: the e2e world and bot)
    NEW_IMAGE,
    OLD_IMAGE,
    Watch,
    _needs_git,
    _uses_binaries,
    make_bot,
    make_world,
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
        "batch_percentage": 34,  # three batches of one node
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
