"""Benchmark: the controller simulator rolls a 500-node pool in about the arithmetic minimum.

A pool of 500 GPU nodes, batchPercentage 10, batchInterval 1 s, on the real clock: the
hypervisor image changes and the simulator (its own thread, woken by Store events) replaces
the hypervisors batch by batch. With hypervisors ready at once, the minimum is
(ceil(100 / 10) - 1) x 1 s = 9 s: ten batches, nine waits. Prints the measured time, that
minimum and their ratio (1.0 is perfect; the excess is reconcile work for 500 nodes).

    python benchmarks/simulator_bench.py [--nodes 500] [--percentage 10] [--interval 1]
"""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML

from gitopsbot.sandbox.apiserver.store import Store
from gitopsbot.sandbox.simulator import ControllerSim, SimConfig

ROOT = Path(__file__).resolve().parents[1]
CRDS = ROOT / "examples" / "charts" / "tensor-fusion-1.8.7" / "crds"
TF = "tensor-fusion.ai/v1"


def tfc(percentage: int, interval: float) -> dict[str, Any]:
    template = {
        "componentConfig": {
            "hypervisor": {"image": "hv:1"},
            "worker": {"image": "worker:1"},
            "client": {"image": "client:1"},
        },
        "nodeManagerConfig": {
            "nodePoolRollingUpdatePolicy": {
                "autoUpdateHypervisor": True,
                "batchPercentage": percentage,
                "batchInterval": f"{int(interval * 1000)}ms",
            }
        },
    }
    return {
        "apiVersion": TF,
        "kind": "TensorFusionCluster",
        "metadata": {"name": "bench"},
        "spec": {"gpuPools": [{"name": "big", "specTemplate": template}]},
    }


def wait(cond: Any, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise SystemExit("timed out")
        time.sleep(0.01)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", type=int, default=500)
    parser.add_argument("--percentage", type=int, default=10)
    parser.add_argument("--interval", type=float, default=1.0)
    args = parser.parse_args()

    store = Store()
    for path in sorted(CRDS.glob("*.yaml")):
        store.create(YAML(typ="safe").load(path.read_text()))
    sim = ControllerSim(store, SimConfig(nodes_per_pool=args.nodes))

    def comp() -> dict[str, Any]:
        pool = store.get(TF, "GPUPool", None, "bench-big") or {}
        return dict((pool.get("status") or {}).get("componentStatus") or {})

    with sim:
        t0 = time.perf_counter()
        store.create(tfc(args.percentage, args.interval))
        wait(lambda: comp().get("hypervisorConfigSynced"), 300)
        install = time.perf_counter() - t0

        steps_before = sim.steps
        old_hash = comp()["hypervisor"]
        tfc_now = store.get(TF, "TensorFusionCluster", None, "bench")
        assert tfc_now is not None
        tfc_now["spec"]["gpuPools"][0]["specTemplate"]["componentConfig"]["hypervisor"]["image"] = (
            "hv:2"
        )
        t0 = time.perf_counter()
        store.update(tfc_now)
        wait(lambda: comp()["hypervisor"] != old_hash and comp().get("hypervisorConfigSynced"), 600)
        rolled = time.perf_counter() - t0
        steps = sim.steps - steps_before

    pods = store.list(
        "v1", "Pod", None, label_selector={"tensor-fusion.ai/component": "hypervisor"}
    )
    images = {p["spec"]["containers"][0]["image"] for p in pods}
    assert len(pods) == args.nodes and images == {"hv:2"}, (len(pods), images)
    minimum = (math.ceil(100 / args.percentage) - 1) * args.interval
    print(f"nodes {args.nodes}, batchPercentage {args.percentage}, batchInterval {args.interval}s")
    print(f"initial install (first sight, {args.nodes} nodes): {install:.2f} s")
    print(f"rollout: {rolled:.2f} s in {steps} reconcile steps")
    print(f"arithmetic minimum: {minimum:.2f} s")
    print(f"ratio rollout / minimum: {rolled / minimum:.3f}")


if __name__ == "__main__":
    main()
