"""What the bot observes of each GPU node of a pool for the hypervisor rollout
(``core.records.node_states.NodeSnapshot``): the pool's GPUNodes, the Kubernetes Nodes and the
hypervisor pods, read through the cluster port (facts §2.4, §3.4).

Three lists per look, whatever the pool's size: the pool's GPUNodes by label, the Nodes,
and the hypervisor pods of the operator namespace by their component label.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gitopsbot.core.fleet.model import ClusterSpec
from gitopsbot.core.records.node_states import NodeSnapshot
from gitopsbot.core.rollouts import tf_objects as tf
from gitopsbot.ports.cluster import Cluster


def pool_node_counts(cluster: Cluster, spec: ClusterSpec) -> dict[str, int]:
    """GPU nodes per pool of ``spec`` as ``node_snapshots`` counts them (those being deleted
    left out): what ``rehearse --kubeconfig`` builds its sandbox from."""
    out: dict[str, int] = {}
    for pool in spec.rollout.pools:
        label = f"{tf.GROUP}/pool-{tf.gpupool_name(spec, pool.name)}=true"
        out[pool.name] = sum(
            1
            for n in cluster.list(tf.TF, "GPUNode", label_selector=label)
            if not (n.get("metadata") or {}).get("deletionTimestamp")
        )
    return out


def node_snapshots(
    cluster: Cluster, spec: ClusterSpec, pool: str, image: str
) -> tuple[NodeSnapshot, ...]:
    """Each GPU node of ``pool`` (GPUNodes labelled ``tensor-fusion.ai/pool-<gpupool>=true``,
    those being deleted left out as the controller leaves them out of its total), by name.
    ``image``: the hypervisor image Git names for the pool ("" when unknown: no node counts
    as updated, for nothing says it is)."""
    label = f"{tf.GROUP}/pool-{tf.gpupool_name(spec, pool)}=true"
    gpunodes = [
        n
        for n in cluster.list(tf.TF, "GPUNode", label_selector=label)
        if not (n.get("metadata") or {}).get("deletionTimestamp")
    ]
    if not gpunodes:
        return ()
    nodes = {n["metadata"]["name"]: n for n in cluster.list("v1", "Node")}
    pods: dict[str, list[Mapping[str, Any]]] = {}
    for pod in cluster.list(
        "v1", "Pod", spec.release.namespace, label_selector=f"{tf.GROUP}/component=hypervisor"
    ):
        pods.setdefault(str((pod.get("spec") or {}).get("nodeName") or ""), []).append(pod)
    out = []
    for gpunode in gpunodes:
        name = str(gpunode["metadata"]["name"])  # a GPUNode is named after its Node
        out.append(_snapshot(name, gpunode, nodes.get(name), _hypervisor(name, pods), image))
    return tuple(sorted(out, key=lambda s: s.name))


def _hypervisor(node: str, pods: Mapping[str, list[Mapping[str, Any]]]) -> Mapping[str, Any] | None:
    """The node's hypervisor pod: ``hypervisor-<node>`` (the controller's name, facts §3.4)
    before a leftover ``tf-hypervisor-<node>`` of 2.0-2.13, which the rollout never replaces."""
    found = sorted(
        pods.get(node, ()),
        key=lambda p: (str(p["metadata"]["name"]).startswith("tf-"), p["metadata"]["name"]),
    )
    return found[0] if found else None


def _snapshot(
    name: str,
    gpunode: Mapping[str, Any],
    node: Mapping[str, Any] | None,
    pod: Mapping[str, Any] | None,
    image: str,
) -> NodeSnapshot:
    node_ready = node is not None and _condition(node, "Ready")
    cordoned = node is not None and bool((node.get("spec") or {}).get("unschedulable"))
    pod_ok = (
        pod is not None
        and not (pod.get("metadata") or {}).get("deletionTimestamp")
        and (pod.get("status") or {}).get("phase") == "Running"
        and _condition(pod, "Ready")
    )
    # PerformBatchUpdate sets the GPUNode Pending; its controller then replaces the pod.
    pending = (gpunode.get("status") or {}).get("phase") == "Pending"
    return NodeSnapshot(
        name=name,
        updated=bool(image) and pod is not None and _main_image(pod) == image,
        ready=node_ready and pod_ok,
        cordoned=cordoned,
        in_progress=pending or not pod_ok,
    )


def _main_image(pod: Mapping[str, Any]) -> str:
    """The hypervisor's image is on ``containers[0]``; init containers carry it too, and the
    middleware image, so they prove nothing (facts §3.4)."""
    containers = (pod.get("spec") or {}).get("containers") or []
    return str(containers[0].get("image") or "") if containers else ""


def _condition(obj: Mapping[str, Any], kind: str) -> bool:
    for c in (obj.get("status") or {}).get("conditions") or ():
        if c.get("type") == kind:
            return str(c.get("status")) == "True"
    return False
