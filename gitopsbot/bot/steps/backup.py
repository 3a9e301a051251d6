"""R6 backup: before anything changes, the Helm values and the TensorFusion resources go to
the state branch (secrets masked), and the rollback point is recorded: the Helm revision, the
chart version, the values' and CRD bundle's digests, and the images of every pool."""

from __future__ import annotations

from typing import Any

from gitopsbot.bot.steps.cluster_reads import crd_digest, pool_images
from gitopsbot.bot.steps.outcome import StepOutcome
from gitopsbot.core.fleet import secrets as secrets_mod
from gitopsbot.core.fleet.model import ClusterSpec
from gitopsbot.core.records import journal as journal_mod
from gitopsbot.core.records.journal import Journal, RollbackPoint, StepState
from gitopsbot.core.rollouts import tf_objects as tf
from gitopsbot.ports.cluster import Cluster
from gitopsbot.ports.helm import Helm

# R6: the TensorFusion resources backed up before an upgrade.
BACKUP_KINDS = (
    "TensorFusionCluster",
    "GPUPool",
    "GPUNode",
    "GPU",
    "WorkloadProfile",
    "TensorFusionWorkload",
    "TensorFusionConnection",
)


def backup(cluster: Cluster, helm: Helm, journal: Journal, spec: ClusterSpec) -> StepOutcome:
    rel = spec.release
    status = helm.status(rel.release_name, rel.namespace)
    values = helm.get_values(rel.release_name, rel.namespace) if status else {}
    masked = secrets_mod.mask(values, spec.credentials.secret_paths)
    state: list[dict[str, Any]] = []
    for kind in BACKUP_KINDS:
        state.extend(tf.strip(o) for o in cluster.list(tf.TF, kind))
    masked_state = [secrets_mod.mask(o, spec.credentials.secret_paths) for o in state]
    base = f"clusters/{spec.name}/backups/{journal.op_id}"
    files = {
        f"{base}/values.yaml": journal_mod.dump_yaml(masked).encode(),
        f"{base}/tf-state.yaml": journal_mod.dump_yaml(
            {"apiVersion": "v1", "kind": "List", "items": masked_state}
        ).encode(),
    }
    point = RollbackPoint(
        helm_revision=status.revision if status else 0,
        chart_version=status.chart_version if status else "",
        values_digest=tf.digest(masked),
        crd_bundle_digest=crd_digest(cluster),
        images=pool_images(cluster, spec),
    )
    detail = (
        f"helm revision {point.helm_revision} (chart {point.chart_version}), "
        f"{len(state)} TensorFusion objects"
        if status
        else "nothing deployed yet"
    )
    return StepOutcome(StepState.SUCCEEDED, detail, rollback_point=point, files=files)
