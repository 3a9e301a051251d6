"""Reads of the cluster that several steps share: the CRD bundle's digest (backup, CRDs) and
the images the TensorFusionCluster's pool templates name (backup, pools, verification)."""

from __future__ import annotations

from collections.abc import Mapping

from gitopsbot.core.fleet.model import ClusterSpec, Component
from gitopsbot.core.rollouts import tf_objects as tf
from gitopsbot.ports.cluster import Cluster

CRD_API = "apiextensions.k8s.io/v1"


def crd_digest(cluster: Cluster) -> str:
    crds = [
        (c["metadata"]["name"], c.get("spec", {}))
        for c in cluster.list(CRD_API, "CustomResourceDefinition")
        if c.get("spec", {}).get("group") == tf.GROUP
    ]
    return tf.digest(sorted(crds, key=lambda x: x[0])) if crds else ""


def pool_images(cluster: Cluster, spec: ClusterSpec) -> dict[str, dict[str, str]]:
    tfc = cluster.get(tf.TF, "TensorFusionCluster", None, tf.tfc_name(spec))
    out: dict[str, dict[str, str]] = {}
    for pool in ((tfc or {}).get("spec") or {}).get("gpuPools") or []:
        config = ((pool.get("specTemplate") or {}).get("componentConfig")) or {}
        images = {
            str(c): str(config[str(c)]["image"])
            for c in Component
            if isinstance(config.get(str(c)), Mapping) and config[str(c)].get("image")
        }
        if images:
            out[str(pool.get("name"))] = images
    return out
