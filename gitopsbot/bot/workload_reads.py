"""Reads for workload awareness (#18): what a pool's worker and client batches would disrupt,
read through the cluster port and judged by ``core.rollouts.workload_wait``.

``workload_snapshot`` is what ``decide_wait`` needs before a batch: the active GPU sessions
and opt-out pods of the workloads a ``waitForWorkloads`` selector names. ``tenant_units`` is
what a batch counts, as the controller counts it (facts §3.5, §3.6), each unit with its
tenant (``workload_wait.tenant_of``: from the unit's own ownerReference and labels, never
reading an owner: the bot's RBAC grants no ``get`` on ReplicaSets or Deployments) and
nodes, for ``size_by_tenants``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from gitopsbot.core.fleet.model import ClusterSpec, Component
from gitopsbot.core.rollouts import tf_objects as tf
from gitopsbot.core.rollouts import workload_wait as ww
from gitopsbot.ports.cluster import Cluster

CONNECTION = "TensorFusionConnection"
WORKLOAD = "TensorFusionWorkload"


def _selector(*parts: str) -> str:
    return ",".join(p.strip() for p in parts if p.strip())


def workload_snapshot(
    cluster: Cluster, spec: ClusterSpec, pool: str, wait: ww.WorkloadWait
) -> ww.WorkloadSnapshot:
    """The pool's TensorFusion app pods the selector names (``enabled=true``, the pool's
    ``gpupool`` label), the pool's TensorFusionWorkloads it names directly, and the
    TensorFusionConnections of the namespace (all namespaces when None), judged."""
    pool_label = f"{tf.GROUP}/gpupool={tf.gpupool_name(spec, pool)}"
    pods = cluster.list(
        "v1",
        "Pod",
        wait.namespace,
        label_selector=_selector(wait.selector, tf.CLIENT_SELECTOR, pool_label),
    )
    # An empty selector names the pool's pods: their workloads come from the pods.
    workloads: list[dict[str, Any]] = []
    if wait.selector.strip():
        workloads = cluster.list(
            tf.TF, WORKLOAD, wait.namespace, label_selector=_selector(wait.selector, pool_label)
        )
    connections: list[dict[str, Any]] = []
    if wait.until == "no-active-session":
        connections = cluster.list(tf.TF, CONNECTION, wait.namespace)
    return ww.snapshot_of(wait, pods=pods, workloads=workloads, connections=connections)


def tenant_units(
    cluster: Cluster,
    spec: ClusterSpec,
    pool: str,
    component: Component,
    *,
    is_outdated: Callable[[Mapping[str, Any]], bool] | None = None,
) -> tuple[ww.Unit, ...]:
    """What a worker or client batch of ``pool`` counts, as the controller counts it:

    - worker: the pool's TensorFusionWorkloads (label ``tensor-fusion.ai/gpupool``, any
      namespace, not being deleted); nodes: their worker pods' (``tensor-fusion.ai/workload``
      label). Outdated: every workload while the pool's ``workerConfigSynced`` is not true,
      since a changed pool worker hash changes every per-workload hash (facts §3.3) and the
      bot cannot recompute that hash (Go's JSON of the workload spec);
    - client: the pool's ``tensor-fusion.ai/enabled=true`` pods; nodes: the pod's own and
      its connections' worker pods'. Outdated: the controller's own test, the pod's
      ``pod-template-hash`` label against the GPUPool's ``componentStatus.client``.

    ``is_outdated`` replaces the outdated test (it gets the workload or pod). Not for the
    hypervisor (its batches count nodes, one tenant each): ()."""
    if component is Component.HYPERVISOR:
        return ()
    gp_name = tf.gpupool_name(spec, pool)
    gpupool = cluster.get(tf.TF, "GPUPool", None, gp_name) or {}
    worker_pods = cluster.list("v1", "Pod", None, label_selector=tf.WORKER_SELECTOR)
    pool_label = f"{tf.GROUP}/gpupool={gp_name}"
    if component is Component.WORKER:
        status = (gpupool.get("status") or {}).get("componentStatus") or {}
        synced = bool(status.get("workerConfigSynced"))
        workloads = [
            w
            for w in cluster.list(tf.TF, WORKLOAD, None, label_selector=pool_label)
            if not (w.get("metadata") or {}).get("deletionTimestamp")
        ]
        return tuple(
            ww.Unit(
                name=ww.ref(w),
                tenant=ww.tenant_of(w),
                outdated=is_outdated(w) if is_outdated is not None else not synced,
                created=ww.created_at(w),
                nodes=ww.worker_nodes(w, worker_pods),
            )
            for w in workloads
        )
    template_hash = tf.status_hash(gpupool, Component.CLIENT)
    pods = cluster.list("v1", "Pod", None, label_selector=_selector(tf.CLIENT_SELECTOR, pool_label))
    links = ww.client_links(pods, cluster.list(tf.TF, CONNECTION, None), worker_pods)

    def outdated(pod: Mapping[str, Any]) -> bool:
        if is_outdated is not None:
            return is_outdated(pod)
        return (
            template_hash is None
            or ww.labels(pod).get(f"{tf.GROUP}/pod-template-hash") != template_hash
        )

    return tuple(
        ww.Unit(
            name=ww.ref(p),
            tenant=ww.tenant_of(p),
            outdated=outdated(p),
            created=ww.created_at(p),
            nodes=links[ww.ref(p)].nodes,
        )
        for p in pods
    )


def batch_sizing(
    cluster: Cluster,
    spec: ClusterSpec,
    pool: str,
    component: Component,
    *,
    max_tenant_share_percent: int,
    requested_percentage: int,
    progress: int = 0,
    scope: ww.SizingScope = "next",
) -> ww.TenantSizing:
    """``size_by_tenants`` over ``tenant_units``: the batchPercentage to pin when opening
    ``component``'s switch, its reason and the next batch's tenants and nodes (evidence).
    ``progress`` is the pool's ``<component>UpdateProgress`` (0 before a campaign)."""
    units = tenant_units(cluster, spec, pool, component)
    return ww.size_by_tenants(
        units, max_tenant_share_percent, requested_percentage, progress=progress, scope=scope
    )


__all__ = ["batch_sizing", "tenant_units", "workload_snapshot"]
