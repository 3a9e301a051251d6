"""Leave a shared real API server as a sandbox found it (``clean_world``).

The sandbox's names are fixed (release namespace, TensorFusionCluster, CRDs, Nodes), and a
real control plane outlives one sandbox, so what one world made would meet the next. The
emulator needs none of this: it is thrown away with its world.
"""

from __future__ import annotations

import logging
import time

from gitopsbot.sandbox.apiserver.errors import ApiError
from gitopsbot.sandbox.simulator.controller import POOL_LABEL
from gitopsbot.sandbox.simulator.rollout import DOMAIN
from gitopsbot.sandbox.simulator.store_port import StorePort

log = logging.getLogger(__name__)

CRD = ("apiextensions.k8s.io/v1", "CustomResourceDefinition")


def clean_world(
    store: StorePort,
    namespaces: tuple[str, ...],
    *,
    kubelet_node: str,
    timeout: float = 120.0,
) -> None:
    """Delete ``namespaces``, the TensorFusion CRDs (and so every TensorFusion object) and
    the simulated Nodes, and wait until they are gone. Pods in the namespaces are deleted
    with grace period 0 meanwhile: without a kubelet, a graceful deletion never ends, and the
    namespace with it."""
    deadline = time.monotonic() + timeout
    for ns in namespaces:
        _delete(store, "v1", "Namespace", None, ns)
    for crd in _tf_crds(store):
        _delete(store, *CRD, None, crd)
    for node in _nodes(store, kubelet_node):
        _delete(store, "v1", "Node", None, node)
    while True:
        left = []
        for ns in namespaces:
            if store.get("v1", "Namespace", None, ns) is not None:
                left.append(f"namespace {ns}")
                for pod in store.list("v1", "Pod", ns):
                    _delete(store, "v1", "Pod", ns, pod["metadata"]["name"])
        left += [f"CRD {name}" for name in _tf_crds(store)]
        left += [f"Node {node}" for node in _nodes(store, kubelet_node)]
        if not left:
            return
        if time.monotonic() > deadline:
            log.warning("sandbox cleanup: still there after %.0fs: %s", timeout, left)
            return
        time.sleep(0.3)


def _tf_crds(store: StorePort) -> list[str]:
    return [
        c["metadata"]["name"]
        for c in store.list(*CRD)
        if str(c["metadata"]["name"]).endswith(f".{DOMAIN}")
    ]


def _nodes(store: StorePort, kubelet_node: str) -> list[str]:
    """The simulator's Nodes: the GPU machines (labelled with their pool) and its kubelet's."""
    names = []
    for node in store.list("v1", "Node"):
        meta = node["metadata"]
        if POOL_LABEL in (meta.get("labels") or {}) or meta["name"] == kubelet_node:
            names.append(str(meta["name"]))
    return names


def _delete(store: StorePort, api_version: str, kind: str, ns: str | None, name: str) -> None:
    try:
        store.delete(api_version, kind, ns, name)
    except ApiError as e:  # gone already, or going
        log.debug("sandbox cleanup: %s", e)
