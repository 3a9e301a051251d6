"""A pool's hypervisor rollout told node by node: the cluster changes as the controller would
(facts §3.4: a batch sets GPUNodes Pending, their pods are replaced), the bot observes it
(bot.node_reads) and advances the records (core.node_states), across a closed window and a
restart that reads the records back from their journal form."""

from __future__ import annotations

from gitopsbot.bot.node_reads import node_snapshots
from gitopsbot.core.records import node_states as ns
from gitopsbot.core.records.node_states import NodeRecord, NodeState
from gitopsbot.testing import FakeCluster
from tests.node_states.test_node_reads import NEW, OLD, gpunode, node, pod, spec
from tests.node_states.test_transitions import at


def states(records: tuple[NodeRecord, ...]) -> dict[str, tuple[str, int]]:
    return {r.name: (str(r.state), r.batch) for r in records}


def test_three_nodes_in_two_batches_across_a_window_and_a_restart() -> None:
    cluster = FakeCluster()
    for name in ("n1", "n2", "n3"):
        for obj in (gpunode(name), node(name, cordoned=name == "n3"), pod(name, OLD)):
            cluster.put(obj)

    def look(
        previous: tuple[NodeRecord, ...], batch: int, hold: str, minute: int
    ) -> tuple[NodeRecord, ...]:
        snaps = node_snapshots(cluster, spec(), "shared", NEW)
        return ns.advance(previous, snaps, batch=batch, gate_hold=hold, now=at(minute))

    r = look((), 0, "", 0)
    assert states(r) == {"n1": ("pending", 0), "n2": ("pending", 0), "n3": ("cordoned", 0)}
    # Batch 1 (the canary): the controller takes n1.
    cluster.put(gpunode("n1", phase="Pending"))
    cluster.put(pod("n1", NEW, phase="Pending", ready=False))
    r = look(r, 1, "", 1)
    assert states(r)["n1"] == ("in-batch", 1)
    cluster.put(gpunode("n1"))
    cluster.put(pod("n1", NEW))
    r = look(r, 1, "", 2)
    r = ns.verified(r, ns.names_in(r, NodeState.UPDATED), at(3))  # the canary check passed
    # The window closes before batch 2: n2 waits, held with the reason.
    r = look(r, 2, "window closed (opens 02:00 UTC)", 4)
    assert ns.summary(r) == "3 nodes: 1 verified, 1 held, 1 cordoned"
    # The bot restarts: the records come back from the journal.
    r = ns.from_data(ns.to_data(r))
    # The window opens again; batch 2 takes n2 and it comes back on the new image.
    cluster.put(gpunode("n2", phase="Pending"))
    cluster.delete("v1", "Pod", "tensor-fusion-sys", "hypervisor-n2")
    r = look(r, 2, "", 60)
    assert states(r)["n2"] == ("in-batch", 2)
    cluster.put(gpunode("n2"))
    cluster.put(pod("n2", NEW))
    r = look(r, 2, "", 61)
    assert states(r) == {"n1": ("verified", 1), "n2": ("updated", 2), "n3": ("cordoned", 0)}
    assert next(x for x in r if x.name == "n1").since == at(3)  # kept across the restart
    done = ns.counts(r)
    assert done[NodeState.VERIFIED] + done[NodeState.UPDATED] == 2  # the cordoned one is not
