"""Component template hashes, computed the way the real controller does (facts §3.3).

FNV-1a 64-bit, lowercase hex, over each part (strings raw, other values as JSON) in order. The
pool-level hypervisor hash and the per-node hash use different inputs, as in the real code, so
a pod's ``pod-template-hash`` label is never comparable with ``componentStatus.hypervisor``.
"""

from __future__ import annotations

import copy
import hashlib
import json
from typing import Any

FNV_OFFSET = 0xCBF29CE484222325
FNV_PRIME = 0x100000001B3
MASK = 0xFFFFFFFFFFFFFFFF
DEFAULT_PORT = 8000  # CRD default of componentConfig.hypervisor.portNumber
HYPERVISOR_CONTAINER = "tensor-fusion-hypervisor"
WORKER_CONTAINER = "tensorfusion-worker"


def object_hash(*parts: Any) -> str:
    h = FNV_OFFSET
    for part in parts:
        raw = (
            part
            if isinstance(part, str)
            else json.dumps(part, sort_keys=True, separators=(",", ":"))
        )
        for byte in raw.encode():
            h = ((h ^ byte) * FNV_PRIME) & MASK
    return format(h, "x")


def _component(spec: dict[str, Any], name: str) -> dict[str, Any]:
    comp = ((spec.get("componentConfig") or {}).get(name)) or {}
    return comp if isinstance(comp, dict) else {}


def hypervisor_port(spec: dict[str, Any]) -> int:
    return int(_component(spec, "hypervisor").get("portNumber") or DEFAULT_PORT)


def hypervisor_pod_spec(spec: dict[str, Any]) -> dict[str, Any]:
    """The rendered hypervisor PodSpec: template + image, port, probes (code-level defaults)."""
    comp = _component(spec, "hypervisor")
    template = copy.deepcopy(((comp.get("podTemplate") or {}).get("spec")) or {})
    containers = template.get("containers") or [{"name": HYPERVISOR_CONTAINER}]
    main = containers[0]
    main.setdefault("name", HYPERVISOR_CONTAINER)
    main["image"] = comp.get("image") or ""
    port = hypervisor_port(spec)
    env = list(main.get("env") or [])
    env.append({"name": "HYPERVISOR_PORT", "value": str(port)})
    main["env"] = env
    main["ports"] = [{"name": "http", "containerPort": port}]
    main["readinessProbe"] = {"httpGet": {"path": "/readyz", "port": port}}
    main["livenessProbe"] = {"httpGet": {"path": "/healthz", "port": port}}
    template["containers"] = containers
    template["hostNetwork"] = True
    template["hostPID"] = True
    template["priorityClassName"] = "system-node-critical"
    template["serviceAccountName"] = "tensor-fusion-hypervisor-sa"
    template["terminationGracePeriodSeconds"] = 5
    return template


def isolation_policy(spec: dict[str, Any]) -> dict[str, Any]:
    nmc = spec.get("nodeManagerConfig") or {}
    return {
        "defaultIsolationMode": nmc.get("defaultIsolationMode") or "soft",
        "isolationModeRules": nmc.get("isolationModeRules") or [],
    }


def pool_hypervisor_hash(
    spec: dict[str, Any], provider_revisions: dict[str, Any], *, controller_image: str = ""
) -> str:
    pod = hypervisor_pod_spec(spec)
    policy = object_hash(isolation_policy(spec))
    return object_hash(pod, provider_revisions, policy, *_code(controller_image))


def node_hypervisor_hash(spec: dict[str, Any], *, controller_image: str = "") -> str:
    mode = isolation_policy(spec)["defaultIsolationMode"]
    return object_hash(hypervisor_pod_spec(spec), "", mode, *_code(controller_image))


def worker_pod_spec(spec: dict[str, Any]) -> dict[str, Any]:
    comp = _component(spec, "worker")
    template = copy.deepcopy(((comp.get("podTemplate") or {}).get("spec")) or {})
    containers = template.get("containers") or [{"name": WORKER_CONTAINER}]
    main = containers[0]
    main.setdefault("name", WORKER_CONTAINER)
    main["image"] = comp.get("image") or ""
    env = list(main.get("env") or [])
    env.append({"name": "HYPERVISOR_PORT", "value": str(hypervisor_port(spec))})
    main["env"] = env
    template["containers"] = containers
    return template


def pool_worker_hash(spec: dict[str, Any], *, controller_image: str = "") -> str:
    return object_hash(worker_pod_spec(spec), *_code(controller_image))


def workload_hash(pool_worker: str, workload_spec: dict[str, Any]) -> str:
    return object_hash(pool_worker, workload_spec)


def pool_client_hash(spec: dict[str, Any], *, controller_image: str = "") -> str:
    comp = _component(spec, "client")
    baseline = {
        "initContainers": [{"name": "inject-lib", "image": comp.get("image") or ""}],
    }
    return object_hash(
        baseline,
        comp.get("operatorEndpoint") or "",
        comp.get("patchToPod") or {},
        comp.get("patchToContainer") or {},
        *_code(controller_image),
    )


def _code(controller_image: str) -> tuple[str, ...]:
    # Stands for the code-level defaults a controller version bakes into each PodSpec (F4).
    return (controller_image,) if controller_image else ()


def hypervisor_pod_name(node: str, prefix: str = "hypervisor-") -> str:
    """``hypervisor-<node>``; past 63 characters truncated with a sha256 suffix (F6).

    Controllers 2.0–2.13 used the prefix ``tf-hypervisor-`` instead.
    """
    name = f"{prefix}{node}"
    if len(name) <= 63:
        return name
    digest = hashlib.sha256(node.encode()).hexdigest()[:8]
    return f"{prefix}{node[:43].rstrip('-')}-{digest}"


def legacy_pod_prefix(controller_image: str) -> bool:
    """True for controller images 2.0.0–2.13.x, which named pods ``tf-hypervisor-<node>``."""
    tag = controller_image.rpartition(":")[2].lstrip("v")
    try:
        major, minor = (int(x) for x in tag.split(".")[:2])
    except ValueError:
        return False
    return major == 2 and minor < 14
