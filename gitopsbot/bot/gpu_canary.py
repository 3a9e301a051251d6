"""Run the GPU canary's smoke Pod for one pool after its canary batch (issue 18).

``run_canary_smoke`` is one look, called again until it returns passed or failed (as the
executor's steps are): it makes the Pod once, pinned to a node the canary batch updated,
under a name derived from the operation and the pool, so a restarted bot finds the pod it
made instead of making another (a 409 on create is that pod too); it judges the pod, and
removes it once judged. Pure decisions are in ``core.rollouts.canary_smoke``.

Restart caveat, by design: the pod is deleted once judged, so a bot killed between that
delete and journalling the result runs the smoke call once more (never two pods at once).
"""

from __future__ import annotations

from datetime import datetime

from gitopsbot.bot.steps.cluster_reads import pool_images
from gitopsbot.bot.steps.outcome import wait_budget
from gitopsbot.core.fleet.model import ClusterSpec, Component
from gitopsbot.core.rollouts import canary_smoke as cs
from gitopsbot.core.rollouts import tf_objects as tf
from gitopsbot.core.rollouts.canary_smoke import (
    CanaryEvidence,
    CanaryResult,
    CanarySmoke,
    CanaryVerdict,
    NodeView,
)
from gitopsbot.errors import KubeConflict
from gitopsbot.ports.cluster import Cluster

# How soon to look again while the pod runs; the caller may wait on the Pod watch instead.
RETRY_SECONDS = 2.0
# After the watch saw the pod change: look again almost at once.
CHANGED_RETRY_SECONDS = 0.2


def run_canary_smoke(
    cluster: Cluster,
    spec: ClusterSpec,
    smoke: CanarySmoke,
    pool: str,
    op_id: str,
    now: datetime,
    started_at: datetime | None,
    *,
    wait_slice: float = 0.0,
) -> CanaryResult:
    """One look at the smoke run of ``pool`` (rollout.yaml's name) for operation ``op_id``.

    Whichever component's canary batch ran, the pod is pinned to a node on the pool's
    current hypervisor image.
    ``started_at``: when the caller's step began (the timeout counts from it; None: now).
    ``wait_slice``: while the pod runs, follow its watch up to this many seconds before
    returning (0: return at once), as ``steps.verify`` does for the smoke test.
    Returns PASSED or FAILED with evidence (the pod is then gone), or RUNNING with
    ``retry_after`` (also while no node of the pool shows the update yet: FAILED once the
    timeout passes without one)."""
    name = cs.pod_name(op_id, pool)
    meta = smoke.manifest.get("metadata") or {}
    namespace = str(meta.get("namespace") or spec.release.namespace)
    waited = max(0.0, (now - (started_at or now)).total_seconds())
    gpupool = tf.gpupool_name(spec, pool)
    images = pool_images(cluster, spec).get(pool, {})
    hv_image = images.get(str(Component.HYPERVISOR), "")
    worker_image = images.get(str(Component.WORKER), "")
    evidence = CanaryEvidence(
        pod=name, namespace=namespace, hypervisor_image=hv_image, worker_image=worker_image
    )

    pod = cluster.get("v1", "Pod", namespace, name)
    if pod is None:
        node = cs.pick_node(_nodes(cluster, spec, gpupool), hv_image)
        if node is None:
            # A node just updated may not show Running yet: wait for one up to the timeout,
            # then fail closed (without an updated node the new GPU path is unproven).
            what = (
                f"GPU canary: no node of pool {pool} runs hypervisor "
                f"{hv_image or '(unknown)'} Running after the canary batch"
            )
            if waited < smoke.timeout_seconds:
                return CanaryResult(CanaryVerdict.RUNNING, what, evidence, RETRY_SECONDS)
            return CanaryResult(CanaryVerdict.FAILED, what, evidence)
        if waited >= smoke.timeout_seconds:
            return _done(CanaryVerdict.FAILED, evidence, waited)  # too late to start one
        manifest = cs.smoke_pod(
            smoke, name=name, namespace=namespace, gpupool=gpupool, node=node,
            op_id=op_id, pool=pool,
        )  # fmt: skip
        try:
            pod = cluster.create(manifest)
        except KubeConflict:
            # Made by an earlier run of this step (a restart between create and journal).
            pod = cluster.get("v1", "Pod", namespace, name) or manifest

    phase = str((pod.get("status") or {}).get("phase") or "Pending")
    evidence = CanaryEvidence(
        pod=name,
        namespace=namespace,
        node=cs.node_of(pod),
        phase=phase,
        hypervisor_image=hv_image,
        worker_image=worker_image,
        exit_message=cs.exit_message(pod),
    )
    verdict = cs.judge(pod, waited=waited, timeout=smoke.timeout_seconds)
    if verdict is CanaryVerdict.RUNNING:
        retry = RETRY_SECONDS
        budget = wait_budget(wait_slice, smoke.timeout_seconds, waited)
        if budget > 0:
            rv = str(pod["metadata"].get("resourceVersion") or "")
            changed = cluster.wait_for_change(
                "v1", "Pod", namespace, since={name: rv}, timeout=budget
            )
            retry = CHANGED_RETRY_SECONDS if changed else 0.0
        return CanaryResult(verdict, cs.verdict_message(verdict, evidence, waited), evidence, retry)
    # Judged: removed so a later operation starts fresh; the evidence is in the result.
    cluster.delete("v1", "Pod", namespace, name)
    return _done(verdict, evidence, waited)


def _done(verdict: CanaryVerdict, evidence: CanaryEvidence, waited: float) -> CanaryResult:
    return CanaryResult(verdict, cs.verdict_message(verdict, evidence, waited), evidence)


def _nodes(cluster: Cluster, spec: ClusterSpec, gpupool: str) -> list[NodeView]:
    """The pool's GPU nodes with their hypervisor pods (as ``steps.verify.check_nodes``
    finds them: GPUNodes by pool label, hypervisor pods by component label and nodeName)."""
    gpunodes = cluster.list(tf.TF, "GPUNode", label_selector=f"{tf.GROUP}/pool-{gpupool}=true")
    pods = cluster.list("v1", "Pod", None, label_selector=f"{tf.GROUP}/component=hypervisor")
    out: list[NodeView] = []
    for node in gpunodes:
        n = str(node["metadata"]["name"])
        mine = [
            p
            for p in pods
            if (p.get("spec") or {}).get("nodeName") == n
            and not p["metadata"].get("deletionTimestamp")
        ]
        out.append(
            NodeView(
                name=n,
                running=(node.get("status") or {}).get("phase") == "Running",
                hypervisors=tuple(
                    (
                        str(p["metadata"]["name"]),
                        str((p.get("status") or {}).get("phase") or ""),
                        tuple(
                            str(c.get("image") or "")
                            for c in (p.get("spec") or {}).get("containers") or []
                        ),
                    )
                    for p in mine
                ),
            )
        )
    return out
