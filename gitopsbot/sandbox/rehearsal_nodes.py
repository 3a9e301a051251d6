"""Node counts per pool read from a live cluster, for ``gitopsbot rehearse --kubeconfig``.

The controller's GPUPool ``<tfc>-<pool>`` labels each of its GPUNodes
``tensor-fusion.ai/pool-<gpupool>=true`` (bot/node_reads.py reads them the same way); nodes
being deleted are left out, as the controller leaves them out of its total.
"""

from __future__ import annotations

from typing import Any

from kubernetes import client

from gitopsbot import app
from gitopsbot.core import tf_objects as tf
from gitopsbot.core.model import ClusterSpec


def live_node_counts(
    kubeconfig: str, spec: ClusterSpec, context: str | None = None
) -> dict[str, int]:
    """GPUNodes per pool of ``spec``, through ``kubeconfig`` (its context ``context``, else
    the cluster's kubeContext)."""
    access = app.cluster_access(app.RunOptions(fleet_url="", kubeconfig=kubeconfig))
    try:
        conn = access.connect(
            kube_context=spec.release.kube_context if context is None else context,
            kubeconfig_secret=None,
            context_source="--context" if context is not None else app.kube_context_source(spec),
            cluster=spec.name,
        )
        api = client.CustomObjectsApi(conn.api_client())
        group, version = tf.TF.split("/")
        out: dict[str, int] = {}
        for pool in spec.rollout.pools:
            label = f"{tf.GROUP}/pool-{tf.gpupool_name(spec, pool.name)}=true"
            found: Any = api.list_cluster_custom_object(
                group, version, "gpunodes", label_selector=label
            )
            out[pool.name] = sum(
                1
                for n in found.get("items") or []
                if not (n.get("metadata") or {}).get("deletionTimestamp")
            )
        return out
    finally:
        access.close()
