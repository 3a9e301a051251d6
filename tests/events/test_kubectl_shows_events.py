"""The point of the Events: ``kubectl describe tensorfusioncluster X`` and
``kubectl get events`` tell the story, with the real kubectl, on the emulator and on the real
kube-apiserver. The happenings of an upgrade go through the recorder (``bot.event_recorder``)
and the adapter, as ``gitopsbot run`` posts them."""

from __future__ import annotations

import os
import subprocess
from datetime import UTC, datetime
from pathlib import Path

import pytest

from gitopsbot.adapters.kube_events import KubeEvents
from gitopsbot.bot.event_recorder import EventRecorder
from gitopsbot.core.notices.happenings import Happening, HappeningKind
from gitopsbot.core.records.journal import OperationKind
from tests import kube_pods
from tests.core.plan_builders import cluster, desired_values
from tests.events.conftest import INSTANCE, SERVERS, install_objects, names

OP = "op-20261203-0001"


def happenings() -> list[Happening]:
    def h(kind: HappeningKind, **kw: object) -> Happening:
        return Happening(kind, "lab", OP, OperationKind.UPGRADE, "a" * 40, **kw)  # type: ignore[arg-type]

    pool = {"step": "pool-shared-hypervisor", "pool": "shared", "component": "hypervisor"}
    return [
        h(HappeningKind.STARTED),
        h(HappeningKind.STEP_STARTED, step="helm-upgrade"),
        h(HappeningKind.STEP_SUCCEEDED, step="helm-upgrade", detail="revision 4"),
        h(HappeningKind.STEP_STARTED, **pool),
        h(HappeningKind.POOL_PROGRESS, progress=50, detail="rolling", **pool),
        h(HappeningKind.POOL_HALTED, progress=50, detail="stalled for 30m", **pool),
        h(HappeningKind.FAILED, detail="pool shared halted"),
    ]


def kubectl(binary: Path, kubeconfig: Path, *args: str) -> str:
    done = subprocess.run(
        [str(binary), "--kubeconfig", str(kubeconfig), *args],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.parametrize("which", SERVERS)
def test_kubectl_describe_and_get_events_tell_the_story(
    which: str, request: pytest.FixtureRequest, tmp_path: Path, binaries: dict[str, Path]
) -> None:
    tfc, pool = names()
    spec = cluster(values=desired_values(cluster={"name": tfc}))
    with kube_pods.open_server(which, request, tmp_path) as server:
        install_objects(server, tfc, pool)
        adapter = KubeEvents.from_kubeconfig(server.kubeconfig, instance=INSTANCE)
        recorder = EventRecorder(
            lambda _c, _sha: spec, lambda _spec: adapter, now=lambda: datetime.now(UTC)
        )
        try:
            for happening in happenings():
                recorder.happened(happening)
            assert recorder.flush(30)
        finally:
            recorder.close()
            adapter.close()
        binary = binaries["kubectl"]
        described = kubectl(binary, server.kubeconfig, "describe", "tensorfusioncluster", tfc)
        listed = kubectl(binary, server.kubeconfig, "get", "events", "-n", "default",
                         "--field-selector", f"involvedObject.name={tfc}")  # fmt: skip
        pool_described = kubectl(binary, server.kubeconfig, "describe", "gpupool", pool)
    if os.environ.get("GITOPSBOT_SHOW_EVENTS"):
        print(f"\n--- {which}: kubectl describe\n{described}\n--- get events\n{listed}")
        print(f"--- describe gpupool\n{pool_described}")
    events = described.split("Events:", 1)[1]
    reasons = [line.split()[1] for line in events.splitlines()[3:] if line.strip()]
    assert reasons == ["Started", "StepStarted", "StepSucceeded", "StepStarted",
                       "PoolProgress", "PoolHalted", "Failed"]  # fmt: skip
    assert "gitopsbot.io/gitopsbot" in events  # "From"
    assert "Warning  PoolHalted" in events and "stalled for 30m" in events
    rows = [line.split()[1:3] for line in listed.splitlines()[1:]]
    assert rows == [["Normal", "Started"], ["Normal", "StepStarted"],
                    ["Normal", "StepSucceeded"], ["Normal", "StepStarted"],
                    ["Normal", "PoolProgress"], ["Warning", "PoolHalted"],
                    ["Warning", "Failed"]]  # fmt: skip
    assert f"tensorfusioncluster/{tfc}" in listed
    pool_events = pool_described.split("Events:", 1)[1]
    assert [line.split()[1] for line in pool_events.splitlines()[3:] if line.strip()] == [
        "StepStarted", "PoolProgress", "PoolHalted"]  # fmt: skip
