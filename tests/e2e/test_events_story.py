"""Kubernetes Events in the sandbox story (issue #12 part 7): the bot as ``gitopsbot run``
wires it posts an Event for each happening of an upgrade, and the real kubectl shows the
whole operation in order on the TensorFusionCluster (``kubectl get events``,
``kubectl describe``) and the pool's part on its GPUPool; a halted upgrade shows Warnings."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gitopsbot.core.records.journal import OperationKind, StepState
from gitopsbot.sandbox.story import StoryWorld
from gitopsbot.sandbox.story_bot import BotRunner
from gitopsbot.sandbox.story_waits import finished_op, wait_for
from tests.e2e.test_halt import BROKEN, _break, _halted_upgrade

pytestmark = pytest.mark.slow

TFC = "tensor-fusion"  # the story's chart renders the TensorFusionCluster under this name


def kubectl(world: StoryWorld, binary: Path, *args: str) -> str:
    done = subprocess.run(
        [str(binary), "--kubeconfig", str(world.kubeconfig), *args],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    if os.environ.get("GITOPSBOT_SHOW_EVENTS"):
        print(f"\n$ kubectl {' '.join(args)}\n{done.stdout}")
    return done.stdout


def rows(listed: str) -> list[tuple[str, str, str, str]]:
    """(type, reason, object, message) of ``kubectl get events`` lines."""
    out = []
    for line in listed.splitlines()[1:]:
        parts = line.split(None, 4)
        out.append((parts[1], parts[2], parts[3], parts[4] if len(parts) > 4 else ""))
    return out


def test_kubectl_tells_an_upgrade_in_order(
    make_world: Callable[..., StoryWorld],
    make_bot: Callable[..., BotRunner],
    binaries: dict[str, Path],
    story_backend: dict[str, Any],
) -> None:
    """On the emulator and on the real control plane (``story_backend``)."""
    world = make_world(window_lead_seconds=None, **story_backend)
    bot = make_bot(world)
    world.merge(world.propose().number)
    journal = wait_for(world, finished_op(OperationKind.UPGRADE), what="the upgrade", timeout=180)
    assert bot.events.flush(30)
    binary = binaries["kubectl"]
    tfc = world.store().get("tensor-fusion.ai/v1", "TensorFusionCluster", None, TFC)
    assert tfc is not None
    # By uid: on the real server ``default`` keeps the Events of earlier stories' clusters.
    selector = f"involvedObject.name={TFC},involvedObject.uid={tfc['metadata']['uid']}"
    listed = kubectl(world, binary, "get", "events", "-n", "default",
                     "--field-selector", selector)  # fmt: skip
    told = rows(listed)
    assert {o for _, _, o, _ in told} == {f"tensorfusioncluster/{TFC}"}
    reasons = [r for _, r, _, _ in told]
    assert reasons[0] == "Started" and reasons[-1] == "Succeeded", reasons
    # Every step that ran: started, then succeeded, in the journal's order.
    ran = [s.name for s in journal.steps if s.state is StepState.SUCCEEDED]
    said = [(r, m.split(": step ")[1].split(" ")[0]) for _, r, _, m in told
            if r in ("StepStarted", "StepSucceeded")]  # fmt: skip
    expected = [(k, name) for name in ran for k in ("StepStarted", "StepSucceeded")]
    assert said == expected, said
    assert all(t == "Normal" for t, _, _, _ in told)
    assert "PoolProgress" in reasons
    described = kubectl(world, binary, "describe", "tensorfusioncluster", TFC)
    events = described.split("Events:", 1)[1]
    assert "gitopsbot.io/gitopsbot" in events and "Succeeded" in events
    pool = kubectl(world, binary, "describe", "gpupool", f"{TFC}-shared")
    pool_events = pool.split("Events:", 1)[1]
    assert "PoolProgress" in pool_events and "pool shared hypervisor at 100 %" in pool_events


def test_a_halted_upgrade_shows_warnings_on_the_pool_and_the_cluster(
    make_world: Callable[..., StoryWorld],
    make_bot: Callable[..., BotRunner],
    binaries: dict[str, Path],
) -> None:
    world = make_world(window_lead_seconds=None, stall_timeout="4s", on_failure="halt")
    _break(world, BROKEN)
    bot = make_bot(world)
    _, op_id = _halted_upgrade(world)
    assert bot.events.flush(30)
    binary = binaries["kubectl"]
    told = rows(kubectl(world, binary, "get", "events", "-n", "default",
                        "--field-selector", "type=Warning"))  # fmt: skip
    warnings: dict[tuple[str, str], str] = {(r, o): m for _, r, o, m in told if op_id in m}
    assert ("PoolHalted", f"gpupool/{TFC}-shared") in warnings, told
    assert ("PoolHalted", f"tensorfusioncluster/{TFC}") in warnings
    assert ("Failed", f"tensorfusioncluster/{TFC}") in warnings
    assert BROKEN in warnings[("Failed", f"tensorfusioncluster/{TFC}")]
