"""bot.gpu_canary.run_canary_smoke against the sandbox over real HTTP: the API emulator, the
controller simulator (with its GPU-path stand-in, simulator/smoke.py) and the bot's own
KubeCluster adapter. A pool of four nodes has rolled its canary batch (25 %, the next batch an
hour away): one node runs hypervisor hv:2, three still hv:1."""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML

from gitopsbot.adapters.kube import KubeCluster
from gitopsbot.bot.gpu_canary import run_canary_smoke
from gitopsbot.core.rollouts import canary_smoke as cs
from gitopsbot.core.rollouts.canary_smoke import CanaryResult, CanarySmoke, CanaryVerdict
from gitopsbot.sandbox.apiserver import ApiServer
from gitopsbot.sandbox.simulator import ControllerSim, SimConfig
from gitopsbot.sandbox.simulator.smoke import BREAK_ANNOTATION
from tests.canary_smoke.helpers import NS, smoke, spec

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "examples" / "charts" / "tensor-fusion-1.8.7"
TF = "tensor-fusion.ai/v1"
HV = "tensor-fusion.ai/component=hypervisor"
SMOKE = "gitopsbot.io/smoke=gpu-path"
OP = "op-20261204-0001"


def _tfc(hv: str, worker: str) -> dict[str, Any]:
    return {
        "apiVersion": TF,
        "kind": "TensorFusionCluster",
        "metadata": {"name": "tf"},
        "spec": {
            "gpuPools": [
                {
                    "name": "a",
                    "specTemplate": {
                        "componentConfig": {
                            "hypervisor": {
                                "image": hv,
                                "podTemplate": {
                                    "spec": {"containers": [{"name": "tensor-fusion-hypervisor"}]}
                                },
                            },
                            "worker": {"image": worker},
                            "client": {"image": "client:1"},
                        },
                        "nodeManagerConfig": {
                            "nodePoolRollingUpdatePolicy": {
                                "autoUpdateHypervisor": True,
                                "batchPercentage": 25,
                                "batchInterval": "1h",
                            }
                        },
                    },
                }
            ]
        },
    }


def _wait(cond: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.05)
    raise AssertionError("condition not reached in time")


def _hv_images(kube: KubeCluster) -> dict[str, str]:
    return {
        p["spec"]["nodeName"]: p["spec"]["containers"][0]["image"]
        for p in kube.list("v1", "Pod", NS, label_selector=HV)
        if (p.get("status") or {}).get("phase") == "Running"
    }


Sandbox = Callable[..., KubeCluster]


@pytest.fixture
def sandbox(tmp_path: Path) -> Iterator[Sandbox]:
    """Starts the sandbox with a SimConfig and brings pool ``a`` to its canary batch."""
    stack: list[Callable[[], None]] = []

    def start(**config: Any) -> KubeCluster:
        server = ApiServer(bookmark_interval=0.2)
        server.start()
        stack.append(server.stop)
        for path in sorted((CHART / "crds").glob("*.yaml")):
            server.store.create(YAML(typ="safe").load(path.read_text()))
        sim = ControllerSim(
            server.store, SimConfig(nodes_per_pool=4, operator_namespace=NS, **config)
        ).start()
        stack.append(sim.close)
        kube = KubeCluster.from_kubeconfig(server.write_kubeconfig(tmp_path / "kubeconfig"))
        stack.append(kube.close)
        kube.create(_tfc("hv:1", "worker:1"))
        _wait(lambda: len(_hv_images(kube)) == 4)
        tfc = kube.get(TF, "TensorFusionCluster", None, "tf")
        assert tfc is not None
        kube.patch_merge(
            TF,
            "TensorFusionCluster",
            None,
            "tf",
            {"spec": copy.deepcopy(_tfc("hv:2", "worker:2")["spec"])},
        )
        _wait(lambda: sorted(_hv_images(kube).values()) == ["hv:1", "hv:1", "hv:1", "hv:2"])
        # As after the canary's verification: every GPUNode Running again.
        _wait(
            lambda: all(
                (n.get("status") or {}).get("phase") == "Running" for n in kube.list(TF, "GPUNode")
            )
        )
        return kube

    yield start
    for stop in reversed(stack):
        stop()


def _run(
    kube: Any, s: CanarySmoke, *, op: str = OP, started: datetime | None = None
) -> CanaryResult:
    return run_canary_smoke(kube, spec(), s, "a", op, datetime.now(UTC), started)


def _until_done(kube: Any, s: CanarySmoke, op: str = OP) -> CanaryResult:
    started = datetime.now(UTC)
    for _ in range(200):
        result = _run(kube, s, op=op, started=started)
        if result.verdict is not CanaryVerdict.RUNNING:
            return result
        time.sleep(0.05)
    raise AssertionError("the smoke run never ended")


def _updated(kube: KubeCluster) -> str:
    return next(n for n, image in _hv_images(kube).items() if image == "hv:2")


def test_passes_on_the_updated_node_and_cleans_up(sandbox: Sandbox) -> None:
    kube = sandbox()
    result = _until_done(kube, smoke())
    assert result.verdict is CanaryVerdict.PASSED, result.message
    ev = result.evidence
    assert ev.node == _updated(kube)
    assert ev.phase == "Succeeded"
    assert ev.pod == cs.pod_name(OP, "a") and ev.namespace == NS
    assert ev.hypervisor_image == "hv:2" and ev.worker_image == "worker:2"
    assert f"GPU call ok on node {ev.node}: hypervisor hv:2, worker worker:2" == ev.exit_message
    assert kube.list("v1", "Pod", None, label_selector=SMOKE) == []


def test_waits_on_the_pod_watch_when_asked(sandbox: Sandbox) -> None:
    kube = sandbox()
    started = datetime.now(UTC)
    s = smoke()
    result = run_canary_smoke(kube, spec(), s, "a", OP, datetime.now(UTC), started, wait_slice=5.0)
    # The simulator plays the pod at once: the watch sees it, the next look is soon.
    assert result.verdict is CanaryVerdict.RUNNING and result.retry_after < 1.0
    result = _until_done(kube, s)
    assert result.verdict is CanaryVerdict.PASSED


def test_fails_on_a_node_not_updated(sandbox: Sandbox) -> None:
    kube = sandbox()
    old = sorted(n for n, image in _hv_images(kube).items() if image == "hv:1")[0]
    pod = cs.smoke_pod(
        smoke(), name="by-hand", namespace=NS, gpupool="tf-a", node=old, op_id=OP, pool="a"
    )
    kube.create(pod)

    def ended() -> bool:
        got = kube.get("v1", "Pod", NS, "by-hand") or {}
        return (got.get("status") or {}).get("phase") == "Failed"

    _wait(ended)
    got = kube.get("v1", "Pod", NS, "by-hand")
    assert got is not None
    assert cs.exit_message(got) == (
        f"node {old} not updated: hypervisor runs hv:1, the pool's new image is hv:2"
    )


def test_fails_when_the_gpu_path_is_broken_on_purpose(sandbox: Sandbox) -> None:
    kube = sandbox(broken_gpu_path_images=frozenset({"hv:2"}))
    result = _until_done(kube, smoke())
    assert result.verdict is CanaryVerdict.FAILED
    assert "broken GPU path for image hv:2" in result.message
    assert result.evidence.phase == "Failed" and result.evidence.node == _updated(kube)
    assert kube.list("v1", "Pod", None, label_selector=SMOKE) == []
    # The pod annotation breaks it too, with the test's own reason.
    broken = smoke(annotations={BREAK_ANNOTATION: "cuInit returned 999"})
    # Another operation: the first pod's name may still be taken while it is deleted.
    result = _until_done(kube, broken, op="op-20261204-0002")
    assert result.verdict is CanaryVerdict.FAILED
    assert result.evidence.exit_message.endswith("cuInit returned 999")


class _Counting:
    """The cluster as a restarted bot sees it: counts creates; ``stale_gets`` Pod reads
    return None first (a read from before the earlier run's create)."""

    def __init__(self, kube: KubeCluster, stale_gets: int = 0) -> None:
        self.kube = kube
        self.creates = 0
        self.conflicts = 0
        self.stale_gets = stale_gets

    def __getattr__(self, name: str) -> Any:
        return getattr(self.kube, name)

    def get(self, api_version: str, kind: str, namespace: str | None, name: str) -> Any:
        if kind == "Pod" and self.stale_gets > 0:
            self.stale_gets -= 1
            return None
        return self.kube.get(api_version, kind, namespace, name)

    def create(self, obj: Any) -> Any:
        self.creates += 1
        try:
            return self.kube.create(obj)
        except Exception:
            self.conflicts += 1
            raise


def test_not_created_twice_after_a_restart(sandbox: Sandbox) -> None:
    kube = sandbox()
    s = smoke()
    started = datetime.now(UTC)
    first = _Counting(kube)
    result = _run(first, s, started=started)
    assert result.verdict is CanaryVerdict.RUNNING and first.creates == 1
    # The bot restarts: a new run finds the pod by its name (even from a stale read, where
    # the create answers 409 AlreadyExists) and never makes a second one.
    again = _Counting(kube, stale_gets=1)
    result = _run(again, s, started=started)
    assert again.creates == 1 and again.conflicts == 1
    assert len(kube.list("v1", "Pod", None, label_selector=SMOKE)) <= 1
    later = _Counting(kube)
    for _ in range(200):
        if result.verdict is not CanaryVerdict.RUNNING:
            break
        time.sleep(0.05)
        result = _run(later, s, started=started)
    assert result.verdict is CanaryVerdict.PASSED, result.message
    assert later.creates == 0
    assert kube.list("v1", "Pod", None, label_selector=SMOKE) == []


def test_no_updated_node_fails_closed(sandbox: Sandbox) -> None:
    kube = sandbox()
    # A pool whose hypervisor image no node runs (the TFC names hv:3 before any batch).
    s = smoke()
    other = spec()
    tfc = kube.get(TF, "TensorFusionCluster", None, "tf")
    assert tfc is not None
    pools = copy.deepcopy(tfc["spec"]["gpuPools"])
    pools[0]["specTemplate"]["componentConfig"]["hypervisor"]["image"] = "hv:3"
    pools[0]["specTemplate"]["nodeManagerConfig"]["nodePoolRollingUpdatePolicy"][
        "autoUpdateHypervisor"
    ] = False
    kube.patch_merge(TF, "TensorFusionCluster", None, "tf", {"spec": {"gpuPools": pools}})
    now = datetime.now(UTC)
    result = run_canary_smoke(kube, other, s, "a", "op-x", now, None)
    assert result.verdict is CanaryVerdict.RUNNING  # waits for a node up to the timeout
    assert "no node of pool a runs hypervisor hv:3" in result.message
    long_ago = now - timedelta(seconds=s.timeout_seconds)
    result = run_canary_smoke(kube, other, s, "a", "op-x", now, long_ago)
    assert result.verdict is CanaryVerdict.FAILED
    assert "no node of pool a runs hypervisor hv:3" in result.message
    assert kube.list("v1", "Pod", None, label_selector=SMOKE) == []
