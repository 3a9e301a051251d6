"""GPU sessions in the simulator (simulator/sessions.py): one TensorFusionConnection per remote
client pod, named after it, labelled with its workload, owned by it; Running while a ready
worker of the workload serves it, Pending before; gone with its pod when the client rollout
deletes the pod; ended on purpose by a test (``end_session``); recreated when deleted alone.
The example charts ship the TensorFusionConnection CRD."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from gitopsbot.sandbox.simulator import SimConfig, WorkloadSpec
from gitopsbot.sandbox.simulator.sessions import end_session
from tests.sandbox.test_sim import CHART, POOL, TF, Cluster, rendered_tfc  # noqa: F401

D = "tensor-fusion.ai"
CLIENTS = {f"{D}/enabled": "true", f"{D}/gpupool": POOL}
Obj = dict[str, Any]


def _clients(c: Cluster) -> dict[str, Obj]:
    return {
        p["metadata"]["name"]: p
        for p in c.store.list("v1", "Pod", "ml", label_selector=CLIENTS)
        if not p["metadata"].get("deletionTimestamp")
    }


def _connections(c: Cluster) -> dict[str, Obj]:
    return {x["metadata"]["name"]: x for x in c.store.list(TF, "TensorFusionConnection", "ml")}


@pytest.fixture
def world(rendered_tfc: Obj) -> Callable[..., Cluster]:  # noqa: F811
    """A pool of one node, workload ml/trainer: one worker, three remote client pods."""

    def make(**config: Any) -> Cluster:
        workloads = (WorkloadSpec("trainer", "shared", namespace="ml", replicas=1, clients=3),)
        return Cluster(
            rendered_tfc,
            SimConfig(nodes_per_pool=1, workloads=workloads, **config),
            policy={"autoUpdateClient": True},
        )

    return make


def test_every_example_chart_ships_the_connection_crd() -> None:
    for chart in sorted(CHART.parent.glob("tensor-fusion-*")):
        assert (chart / "crds" / "tensor-fusion.ai_tensorfusionconnections.yaml").is_file()


def test_one_running_connection_per_remote_client(world: Callable[..., Cluster]) -> None:
    c = world(worker_ready_delay=5.0)
    c.sim.settle()
    clients = _clients(c)
    assert len(clients) == 3
    for pod in clients.values():
        assert pod["metadata"]["annotations"][f"{D}/selected-workload"] == "trainer"
    # No ready worker yet: Pending, no worker.
    conns = _connections(c)
    assert set(conns) == set(clients)
    assert {x["status"]["phase"] for x in conns.values()} == {"Pending"}
    c.run(lambda: all(x["status"]["phase"] == "Running" for x in _connections(c).values()))
    (worker,) = c.store.list("v1", "Pod", "ml", label_selector={f"{D}/component": "worker"})
    for name, conn in _connections(c).items():
        assert conn["metadata"]["labels"] == {f"{D}/workload": "trainer"}
        assert conn["spec"] == {"workloadName": "trainer", "clientPod": name}
        (owner,) = conn["metadata"]["ownerReferences"]
        assert (owner["kind"], owner["name"]) == ("Pod", name)
        assert owner["uid"] == clients[name]["metadata"]["uid"]
        assert conn["status"]["workerName"] == worker["metadata"]["name"]


def test_the_client_rollout_takes_the_connection_with_its_pod(
    world: Callable[..., Cluster],
) -> None:
    c = world()
    c.run(lambda: bool(c.comp().get("clientConfigSynced")))
    c.sim.settle()
    old = set(_clients(c))
    assert set(_connections(c)) == old

    def new_client(tfc: Obj) -> None:
        Cluster.template(tfc)["componentConfig"]["client"]["image"] = "client:new"

    c.edit_tfc(new_client)
    c.sim.settle()
    # One batch (20% of 3 → 1 pod) went; its connection with it, the new pod has its own.
    assert len(old - set(_clients(c))) == 1
    assert set(_connections(c)) == set(_clients(c))
    c.run(lambda: bool(c.comp().get("clientConfigSynced")))
    c.sim.settle()
    assert not set(_clients(c)) & old
    assert set(_connections(c)) == set(_clients(c))
    assert {x["status"]["phase"] for x in _connections(c).values()} == {"Running"}


def test_a_test_ends_a_session_and_a_deleted_connection_comes_back(
    world: Callable[..., Cluster],
) -> None:
    c = world()
    c.sim.settle()
    first, second, _ = sorted(_connections(c))
    end_session(c.store, "ml", first)
    for _ in range(3):
        c.sim.settle()
        ended = _connections(c)[first]["status"]
        assert (ended["phase"], ended["workerName"]) == ("Failed", "")
    c.store.delete(TF, "TensorFusionConnection", "ml", second)
    c.sim.settle()
    again = _connections(c)[second]
    assert again["status"]["phase"] == "Running"  # the pod controller made it again
