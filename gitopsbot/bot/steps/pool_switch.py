"""Pool rollouts: the switches in the TensorFusionCluster's pool templates and what a pool's
rollout looks like from outside.

``await_pools`` lets a pool pass that decided to wait come back as soon as a GPUPool's
status moves (the controller's R14 progress), instead of at the decision's ``until``.

``set_switch`` is the only place the bot turns a rollout on (F1): it opens or closes one
``autoUpdate*`` switch of one pool. ``observe_pool`` reads the GPUPool's R14 progress, the
switch, the nodes and whether the pool's pods already run the template, for
``core.rollouts.rollout`` to decide the next phase action."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from gitopsbot.bot import workload_reads
from gitopsbot.bot.steps.cluster_reads import pool_images
from gitopsbot.bot.steps.outcome import WAIT_SLICE_SECONDS
from gitopsbot.bot.steps.verify import check_nodes
from gitopsbot.core.charts.postrender import go_duration
from gitopsbot.core.fleet.model import ClusterSpec, Component
from gitopsbot.core.rollouts import rollout
from gitopsbot.core.rollouts import tf_objects as tf
from gitopsbot.errors import KubeConflict, KubeError, PermanentError
from gitopsbot.ports.cluster import Cluster

log = logging.getLogger(__name__)

# A conflict means the TFC changed between read and write: read it again, a few times.
CONFLICT_ATTEMPTS = 5

SWITCH = {
    Component.HYPERVISOR: "autoUpdateHypervisor",
    Component.WORKER: "autoUpdateWorker",
    Component.CLIENT: "autoUpdateClient",
}


def observe_pool(
    cluster: Cluster, spec: ClusterSpec, pool: str, component: Component
) -> rollout.PoolObservation | None:
    tfc = cluster.get(tf.TF, "TensorFusionCluster", None, tf.tfc_name(spec))
    gpupool = cluster.get(tf.TF, "GPUPool", None, tf.gpupool_name(spec, pool))
    if tfc is None or gpupool is None:
        return None
    status = (gpupool.get("status") or {}).get("componentStatus") or {}
    progress = status.get(f"{component}UpdateProgress")
    nodes = cluster.list(
        tf.TF, "GPUNode", label_selector=f"{tf.GROUP}/pool-{tf.gpupool_name(spec, pool)}=true"
    )
    pending = tuple(
        n["metadata"]["name"]
        for n in nodes
        if (n.get("status") or {}).get("phase", "Pending") == "Pending"
    )
    policy = tf.rolling_policy(tfc, pool)
    image = pool_images(cluster, spec).get(pool, {}).get(str(component))
    template_hash = tf.status_hash(gpupool, component)
    current = image is None or not _stale(cluster, spec, pool, component, image, template_hash)
    return rollout.PoolObservation(
        progress=None if progress is None else int(progress),
        synced=bool(status.get(f"{component}ConfigSynced", False)),
        switch_open=bool(policy.get(SWITCH[component], False)),
        nodes=len(nodes),
        pending_nodes=pending,
        current=current,
        version=str((gpupool.get("metadata") or {}).get("resourceVersion") or ""),
        units=_units(cluster, spec, pool, component),
        out_of_service=_out_of_service(cluster, spec, pool, component, nodes),
        **_workload_fields(cluster, spec, pool, component, progress),
    )


def _workload_fields(
    cluster: Cluster, spec: ClusterSpec, pool: str, component: Component, progress: Any
) -> dict[str, Any]:
    """Worker and client phases of a pool with waitForWorkloads or maxTenantDisruption:
    the named workloads' sessions now, and the batch percentage the tenant share allows
    (issue 18, core.workload_wait)."""
    policy = next((p for p in spec.rollout.pools if p.name == pool), None)
    aware = policy.workloads if policy is not None else None
    if aware is None or component is Component.HYPERVISOR or policy is None:
        return {}
    out: dict[str, Any] = {}
    if aware.wait is not None:
        out["workload"] = workload_reads.workload_snapshot(cluster, spec, pool, aware.wait)
    if aware.max_tenant_share_percent is not None:
        sizing = workload_reads.batch_sizing(
            cluster,
            spec,
            pool,
            component,
            max_tenant_share_percent=aware.max_tenant_share_percent,
            requested_percentage=policy.batch_percentage,
            progress=int(progress or 0),
        )
        out["tenant_percentage"] = sizing.percentage
        out["tenant_reason"] = sizing.reason
    return out


def _out_of_service(
    cluster: Cluster,
    spec: ClusterSpec,
    pool: str,
    component: Component,
    gpunodes: Sequence[Mapping[str, Any]],
) -> tuple[str, ...]:
    """The pool's nodes out of service, for the availability budget (issue 18): the core
    Node NotReady, or cordoned (``spec.unschedulable``, a person's doing: the bot only reads
    Nodes, never cordons or uncordons). Read only when the pool has a budget and for the
    hypervisor phase, whose batches are nodes; a Node missing is out of service too."""
    policy = next((p for p in spec.rollout.pools if p.name == pool), None)
    if policy is None or policy.max_unavailable is None or component is not Component.HYPERVISOR:
        return ()
    names = {str(n["metadata"]["name"]) for n in gpunodes}
    found = {str(n["metadata"]["name"]): n for n in cluster.list("v1", "Node")}
    return tuple(sorted(name for name in names if tf.node_out_of_service(found.get(name))))


def _units(cluster: Cluster, spec: ClusterSpec, pool: str, component: Component) -> int | None:
    """What a worker or client batch counts, as the controller counts it (facts §3.5,
    §3.6): the pool's TensorFusionWorkloads, or its TensorFusion-enabled pods, in every
    namespace. None for the hypervisor: its batches count the nodes."""
    label = f"{tf.GROUP}/gpupool={tf.gpupool_name(spec, pool)}"
    if component is Component.WORKER:
        return len(cluster.list(tf.TF, "TensorFusionWorkload", label_selector=label))
    if component is Component.CLIENT:
        enabled = f"{tf.GROUP}/enabled=true,{label}"
        return len(cluster.list("v1", "Pod", label_selector=enabled))
    return None


def _stale(
    cluster: Cluster,
    spec: ClusterSpec,
    pool: str,
    component: Component,
    image: str,
    template_hash: str | None = None,
) -> list[str]:
    """The pool's pods of ``component`` not on ``image`` (observe_pool's ``current``)."""
    if component is Component.HYPERVISOR:
        return check_nodes(cluster, spec, pool, image, mode="images")
    gp_name = tf.gpupool_name(spec, pool)
    if component is Component.WORKER:
        workers = cluster.list("v1", "Pod", None, label_selector=tf.WORKER_SELECTOR)
        pods = tf.worker_pods(gp_name, cluster.list(tf.TF, "TensorFusionWorkload"), workers)
        return tf.check_pods(component, pool, pods, image, mode="images")
    enabled = cluster.list("v1", "Pod", None, label_selector=tf.CLIENT_SELECTOR)
    pods = tf.client_pods(gp_name, enabled)
    return tf.check_pods(component, pool, pods, image, mode="images", template_hash=template_hash)


def set_switch(
    cluster: Cluster,
    spec: ClusterSpec,
    pool: str,
    component: Component,
    *,
    open_: bool,
    batch_percentage: int | None = None,
    batch_interval_seconds: int | None = None,
) -> None:
    """Open or close one switch in the TFC's pool template (F1: the only place the bot
    turns a rollout on), with the batch percentage and interval to pin (None: left as they
    are; the interval is pinned while an availability budget holds, core.admission).

    A merge patch replaces the whole gpuPools list, so it carries the resourceVersion read: a
    concurrent writer (the controller updating the TFC) makes it fail with KubeConflict, and
    the switch is read and written again, up to ``CONFLICT_ATTEMPTS`` times, before the
    conflict reaches the pass (which retries later).

    Afterwards the bot gives up its field ownership of the TFC (``Cluster.release_fields``):
    the merge patch made "gitopsbot" the manager of ``.spec.gpuPools``, and a person's
    break-glass ``helm upgrade`` with helm 4 (server-side apply, no ``--force-conflicts``)
    would then fail with a conflict with "gitopsbot" (docs/helm.md, "Break-glass")."""
    name = tf.tfc_name(spec)
    for attempt in range(1, CONFLICT_ATTEMPTS + 1):
        try:
            pins = _Pins(batch_percentage, batch_interval_seconds)
            _write_switch(cluster, name, pool, component, open_, pins)
            break
        except KubeConflict as e:
            if attempt == CONFLICT_ATTEMPTS:
                raise
            log.warning(
                "%s: TensorFusionCluster %s changed while switching %s/%s (attempt %d): %s",
                spec.name,
                name,
                pool,
                component,
                attempt,
                e,
            )
    for _ in range(CONFLICT_ATTEMPTS):
        try:
            cluster.release_fields(tf.TF, "TensorFusionCluster", None, name)
            return
        except KubeConflict:
            continue  # the controller wrote the TFC meanwhile: read it again
        except KubeError as e:
            # Not fatal: the switch is set; the next switch change releases the fields.
            log.warning("%s: could not release the bot's fields of %s: %s", spec.name, name, e)
            return
    log.warning("%s: could not release the bot's fields of %s: it keeps changing", spec.name, name)


class _Pins(NamedTuple):
    batch_percentage: int | None
    batch_interval_seconds: int | None


def _write_switch(
    cluster: Cluster,
    name: str,
    pool: str,
    component: Component,
    open_: bool,
    pins: _Pins,
) -> None:
    tfc = cluster.get(tf.TF, "TensorFusionCluster", None, name)
    if tfc is None:
        raise PermanentError(f"TensorFusionCluster {name} not found")
    pools = [dict(p) for p in (tfc.get("spec") or {}).get("gpuPools") or []]
    for entry in pools:
        if entry.get("name") != pool:
            continue
        template = dict(entry.get("specTemplate") or {})
        manager = dict(template.get("nodeManagerConfig") or {})
        policy = dict(manager.get("nodePoolRollingUpdatePolicy") or {})
        policy[SWITCH[component]] = open_
        if pins.batch_percentage is not None:
            policy["batchPercentage"] = pins.batch_percentage
        if pins.batch_interval_seconds is not None:
            policy["batchInterval"] = go_duration(pins.batch_interval_seconds)
        manager["nodePoolRollingUpdatePolicy"] = policy
        template["nodeManagerConfig"] = manager
        entry["specTemplate"] = template
        break
    else:
        raise PermanentError(f"pool {pool} is not in TensorFusionCluster {name}")
    version = (tfc.get("metadata") or {}).get("resourceVersion")
    patch: dict[str, Any] = {"spec": {"gpuPools": pools}}
    if version:
        patch["metadata"] = {"resourceVersion": version}
    cluster.patch_merge(tf.TF, "TensorFusionCluster", None, name, patch)


def await_pools(
    cluster: Cluster,
    spec: ClusterSpec,
    pools: Sequence[str],
    timeout: float,
    *,
    wait_slice: float = WAIT_SLICE_SECONDS,
    seen: Mapping[str, str] | None = None,
) -> bool:
    """Wait up to ``timeout`` (at most ``wait_slice``) seconds for one of the pools' GPUPools
    to change; True as soon as one did. ``seen`` maps a pool to the GPUPool resourceVersion
    the pass decided on (``PoolObservation.version``): the wait compares with it, so a batch
    the controller finished between that observation and this call returns at once rather
    than a slice later. A pool without one is read here first."""
    budget = max(0.0, min(timeout, wait_slice))
    if not pools or budget <= 0:
        return False
    since: dict[str, str] = {}
    for pool in pools:
        name = tf.gpupool_name(spec, pool)
        version = (seen or {}).get(pool, "")
        if not version:
            found = cluster.get(tf.TF, "GPUPool", None, name)
            version = str(((found or {}).get("metadata") or {}).get("resourceVersion") or "")
        since[name] = version
    return cluster.wait_for_change(tf.TF, "GPUPool", None, since=since, timeout=budget)
