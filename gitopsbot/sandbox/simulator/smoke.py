"""The sandbox's stand-in for the GPU canary's smoke call (issue 18,
``core.rollouts.canary_smoke``).

A Pod labelled ``gitopsbot.io/smoke=gpu-path`` (what the bot's GPU canary makes) is played
to its end at once, as if its container made one GPU call through a TensorFusion worker:

- Succeeded when (a) the node it is pinned to (``nodeName``, else the nodeSelector on
  ``kubernetes.io/hostname``) has exactly one hypervisor pod, Running, on the image the
  TensorFusionCluster's template names for the pool (the updated node), and (b) the worker
  it gets, made from the GPUPool's worker template as the webhook and connection controller
  do, runs the worker image the TensorFusionCluster names for the pool;
- Failed otherwise, the container's termination message saying which.

Broken on purpose (tests): ``SimConfig.broken_gpu_path_images`` (a hypervisor or worker
image whose GPU call fails), or the pod annotation ``sandbox.gitopsbot/break-gpu-path:
<why>``. Pure function + one write, called from ``ControllerSim.step``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gitopsbot.core.rollouts.canary_smoke import HOSTNAME, SMOKE_LABEL, SMOKE_VALUE
from gitopsbot.sandbox.simulator.rollout import DOMAIN

Obj = dict[str, Any]
BREAK_ANNOTATION = "sandbox.gitopsbot/break-gpu-path"
SELECTOR = {SMOKE_LABEL: SMOKE_VALUE}


def is_smoke(pod: Mapping[str, Any]) -> bool:
    labels = (pod.get("metadata") or {}).get("labels") or {}
    return bool(labels.get(SMOKE_LABEL) == SMOKE_VALUE)


def pending(pod: Mapping[str, Any]) -> bool:
    """Still to be played: not being deleted, not yet Succeeded or Failed."""
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        return False
    return (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")


def node_of(pod: Mapping[str, Any]) -> str:
    spec = pod.get("spec") or {}
    return str(spec.get("nodeName") or (spec.get("nodeSelector") or {}).get(HOSTNAME) or "")


def outcome(
    pod: Mapping[str, Any],
    *,
    tfcs: Sequence[Mapping[str, Any]],
    gpupools: Sequence[Mapping[str, Any]],
    hypervisors: Sequence[Mapping[str, Any]],
    broken_images: frozenset[str],
) -> tuple[bool, str]:
    """(the GPU call succeeded, the container's message)."""
    meta = pod.get("metadata") or {}
    labels = meta.get("labels") or {}
    gp_name = str(labels.get(f"{DOMAIN}/gpupool") or "")
    gp = next((p for p in gpupools if p["metadata"]["name"] == gp_name), None)
    if gp is None:
        return False, f"no worker: GPUPool {gp_name or '(no gpupool label)'} not found"
    config = ((gp.get("spec") or {}).get("componentConfig")) or {}
    want = _tfc_images(tfcs, gp)
    node = node_of(pod)
    if not node:
        return False, "not pinned to a node"
    on_node = [
        h
        for h in hypervisors
        if (h.get("spec") or {}).get("nodeName") == node
        and not (h.get("metadata") or {}).get("deletionTimestamp")
    ]
    if len(on_node) != 1:
        return False, f"node {node}: {len(on_node)} hypervisor pods, expected 1"
    hv = on_node[0]
    hv_image = str((((hv.get("spec") or {}).get("containers") or [{}])[0]).get("image") or "")
    hv_phase = (hv.get("status") or {}).get("phase")
    if hv_phase != "Running":
        return False, f"node {node}: hypervisor {hv['metadata']['name']} is {hv_phase}"
    if want.get("hypervisor") and hv_image != want["hypervisor"]:
        return False, (
            f"node {node} not updated: hypervisor runs {hv_image}, the pool's new image is "
            f"{want['hypervisor']}"
        )
    worker = str((config.get("worker") or {}).get("image") or "")
    if want.get("worker") and worker != want["worker"]:
        return False, f"worker runs {worker}, the pool's new worker image is {want['worker']}"
    why = ((meta.get("annotations") or {}).get(BREAK_ANNOTATION)) or ""
    broken = sorted({hv_image, worker} & broken_images)
    if why or broken:
        reason = why or f"broken GPU path for image {', '.join(broken)}"
        return False, f"GPU call failed on node {node} via worker {worker}: {reason}"
    return True, f"GPU call ok on node {node}: hypervisor {hv_image}, worker {worker}"


def status(pod: Mapping[str, Any], ok: bool, message: str, now_text: str) -> Obj:
    containers = (pod.get("spec") or {}).get("containers") or [{}]
    first = containers[0]
    terminated = {
        "exitCode": 0 if ok else 1,
        "reason": "Completed" if ok else "Error",
        "message": message,
        "startedAt": now_text,
        "finishedAt": now_text,
    }
    return {
        "phase": "Succeeded" if ok else "Failed",
        "conditions": [{"type": "PodScheduled", "status": "True"}],
        "startTime": now_text,
        "containerStatuses": [
            {
                "name": str(first.get("name") or ""),
                "image": str(first.get("image") or ""),
                "imageID": "",
                "ready": False,
                "restartCount": 0,
                "state": {"terminated": terminated},
            }
        ],
    }


def _tfc_images(tfcs: Sequence[Mapping[str, Any]], gp: Mapping[str, Any]) -> dict[str, str]:
    """The images the TensorFusionCluster names for the GPUPool ``gp`` (<tfc>-<pool>): the
    new version, whatever the GPUPool has taken so far."""
    owner = ((gp.get("metadata") or {}).get("labels") or {}).get(f"{DOMAIN}/managed-by")
    for tfc in tfcs:
        name = tfc["metadata"]["name"]
        if owner and owner != name:
            continue
        for pool in (tfc.get("spec") or {}).get("gpuPools") or []:
            if f"{name}-{pool.get('name')}" != gp["metadata"]["name"]:
                continue
            config = ((pool.get("specTemplate") or {}).get("componentConfig")) or {}
            return {
                c: str((config.get(c) or {}).get("image") or "") for c in ("hypervisor", "worker")
            }
    return {}
