"""The GPU canary (issue 18): after a pool's canary batch, a smoke Pod defined in the fleet
repository (``clusters/<name>/canary-smoke.yaml``) makes a real GPU call through a worker on a
node the batch updated; its result gates the rest of the pool.

Pure decisions only: which pools it applies to, the Pod's deterministic name (found again
after a restart), which node to pin it to, the manifest, and the judgement of the Pod's
status. ``bot.gpu_canary`` does the reads and writes.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gitopsbot.core.fleet.canary_spec import DEFAULT_TIMEOUT as DEFAULT_TIMEOUT
from gitopsbot.core.fleet.canary_spec import FILE as FILE
from gitopsbot.core.fleet.canary_spec import CanarySmoke as CanarySmoke
from gitopsbot.core.fleet.canary_spec import PoolShape as PoolShape
from gitopsbot.core.records.canary_record import CanaryEvidence as CanaryEvidence
from gitopsbot.core.records.canary_record import CanaryResult as CanaryResult
from gitopsbot.core.records.canary_record import CanaryVerdict as CanaryVerdict
from gitopsbot.core.records.canary_record import _fields as _fields

GROUP = "tensor-fusion.ai"
# The marker the bot puts on the Pod: the sandbox's simulator recognises it, and a person
# finds the bot's smoke pods with ``kubectl get pod -l gitopsbot.io/smoke=gpu-path``.
SMOKE_LABEL = "gitopsbot.io/smoke"
SMOKE_VALUE = "gpu-path"
OPERATION_ANNOTATION = "gitopsbot.io/operation"
POOL_LABEL = "gitopsbot.io/pool"
HOSTNAME = "kubernetes.io/hostname"
_NAME_PREFIX = "gitopsbot-gpu-canary"


@dataclass(frozen=True, slots=True)
class NodeView:
    """One GPU node of the pool as read: its name, whether the GPUNode is Running, and its
    hypervisor pods (name, phase, images)."""

    name: str
    running: bool
    hypervisors: tuple[tuple[str, str, tuple[str, ...]], ...] = field(default_factory=tuple)


def pod_name(op_id: str, pool: str) -> str:
    """Deterministic per (operation, pool), a valid DNS-1123 name of at most 63 characters:
    a restarted bot finds the pod it made instead of making a second one."""
    digest = hashlib.sha256(f"{op_id}\0{pool}".encode()).hexdigest()[:10]
    slug = re.sub(r"[^a-z0-9-]+", "-", pool.lower()).strip("-")[:30].strip("-")
    return f"{_NAME_PREFIX}-{slug}-{digest}" if slug else f"{_NAME_PREFIX}-{digest}"


def updated_nodes(nodes: Sequence[NodeView], image: str) -> list[tuple[str, str]]:
    """(node, hypervisor pod) of the nodes whose only hypervisor pod runs ``image`` and is
    Running on a Running GPUNode: the nodes the canary batch updated. Sorted by name."""
    out: list[tuple[str, str]] = []
    for node in sorted(nodes, key=lambda n: n.name):
        if not node.running or len(node.hypervisors) != 1:
            continue  # two pods: a replacement in flight, not yet a settled update
        name, phase, images = node.hypervisors[0]
        if phase == "Running" and image and image in images:
            out.append((node.name, name))
    return out


def pick_node(nodes: Sequence[NodeView], image: str) -> str | None:
    """The node to pin the smoke pod to: the first updated node by name (stable across a
    restart, so a re-created pod lands where the first one would have)."""
    found = updated_nodes(nodes, image)
    return found[0][0] if found else None


def smoke_pod(
    smoke: CanarySmoke,
    *,
    name: str,
    namespace: str,
    gpupool: str,
    node: str,
    op_id: str,
    pool: str,
) -> dict[str, Any]:
    """The manifest to create: the fleet repository's Pod, renamed, TensorFusion-enabled for
    ``gpupool`` (so the webhook gives it a worker, facts §3.6/§4.1), marked as the bot's smoke
    pod and pinned to ``node`` with a nodeSelector on the hostname label (the scheduler, or
    TensorFusion's, still places it; it can only place it there)."""
    manifest: dict[str, Any] = dict(_copy(smoke.manifest))
    meta = dict(manifest.get("metadata") or {})
    labels = {str(k): str(v) for k, v in (meta.get("labels") or {}).items()}
    labels.update(
        {
            f"{GROUP}/enabled": "true",
            f"{GROUP}/gpupool": gpupool,
            SMOKE_LABEL: SMOKE_VALUE,
            POOL_LABEL: _label_value(pool),
        }
    )
    annotations = {str(k): str(v) for k, v in (meta.get("annotations") or {}).items()}
    annotations.update({f"{GROUP}/gpupool": gpupool, OPERATION_ANNOTATION: op_id})
    meta.update(
        {"name": name, "namespace": namespace, "labels": labels, "annotations": annotations}
    )
    meta.pop("generateName", None)
    spec = dict(manifest.get("spec") or {})
    selector = {str(k): str(v) for k, v in (spec.get("nodeSelector") or {}).items()}
    selector[HOSTNAME] = node
    spec["nodeSelector"] = selector
    spec.pop("nodeName", None)
    # A smoke call runs once: a restart would hide the failure the gate is for.
    spec["restartPolicy"] = "Never"
    manifest.update({"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec})
    manifest.pop("status", None)
    return manifest


def node_of(pod: Mapping[str, Any]) -> str:
    spec = pod.get("spec") or {}
    return str(spec.get("nodeName") or (spec.get("nodeSelector") or {}).get(HOSTNAME) or "")


def exit_message(pod: Mapping[str, Any]) -> str:
    """The first container's termination message (or reason, or waiting reason); the pod's
    status message when no container says anything."""
    status = pod.get("status") or {}
    for cs in status.get("containerStatuses") or []:
        state = cs.get("state") or {}
        done = state.get("terminated") or {}
        text = done.get("message") or done.get("reason")
        if not text and done:
            text = f"exit code {done.get('exitCode')}"
        waiting = state.get("waiting") or {}
        text = text or waiting.get("message") or waiting.get("reason")
        if text:
            return str(text).strip()
    return str(status.get("message") or status.get("reason") or "").strip()


def judge(pod: Mapping[str, Any] | None, *, waited: float, timeout: int) -> CanaryVerdict:
    """Succeeded: passed; Failed, or not done within ``timeout`` seconds: failed; else
    running. A missing pod (not yet made, or already cleaned up) is running: the caller
    makes it."""
    if pod is None:
        return CanaryVerdict.RUNNING if waited < timeout else CanaryVerdict.FAILED
    phase = (pod.get("status") or {}).get("phase") or "Pending"
    if phase == "Succeeded":
        return CanaryVerdict.PASSED
    if phase == "Failed" or waited >= timeout:
        return CanaryVerdict.FAILED
    return CanaryVerdict.RUNNING


def verdict_message(verdict: CanaryVerdict, evidence: CanaryEvidence, waited: float) -> str:
    where = f"on node {evidence.node}" if evidence.node else "(no node)"
    said = f": {evidence.exit_message}" if evidence.exit_message else ""
    if verdict is CanaryVerdict.PASSED:
        return f"GPU canary smoke pod {evidence.pod} succeeded {where}{said}"
    if verdict is CanaryVerdict.FAILED:
        phase = evidence.phase or "absent"
        if phase not in ("Failed", "Succeeded"):
            return (
                f"GPU canary smoke pod {evidence.pod} timed out after {int(waited)}s "
                f"{where} ({phase}){said}"
            )
        return f"GPU canary smoke pod {evidence.pod} failed {where}{said}"
    return f"GPU canary smoke pod {evidence.pod} {evidence.phase or 'starting'} {where}"


def _label_value(text: str) -> str:
    value = re.sub(r"[^A-Za-z0-9._-]+", "-", text)[:63].strip("-._")
    return value or "pool"


def _copy(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _copy(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_copy(v) for v in value]
    return value
