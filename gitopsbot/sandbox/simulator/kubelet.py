"""The kubelet's part of the simulator: the status a pod reports at a given time.

Pure functions; ``ControllerSim`` decides which pods to run (its own, and on a real server
every pod, after binding it) and writes what these return.
"""

from __future__ import annotations

import hashlib
from datetime import datetime
from typing import Any

from gitopsbot.sandbox.simulator.rollout import format_time

Obj = dict[str, Any]


def _image_id(image: str) -> str:
    digest = hashlib.sha256(image.encode()).hexdigest()
    return f"{image.partition(':')[0]}@sha256:{digest}"


def pod_status(
    pod: Obj,
    now: datetime,
    *,
    due: datetime,
    ready: bool,
    unpullable: frozenset[str],
    node_ip: str = "10.0.0.1",
) -> Obj | None:
    """The status the kubelet reports at ``now`` for a pod that starts at ``due`` (Pending
    with ErrImagePull for an unpullable image), or None while it is still starting."""
    status = pod.get("status") or {}
    containers = (pod.get("spec") or {}).get("containers") or []
    meta = pod["metadata"]
    if any(c.get("image") in unpullable for c in containers):
        waiting = [
            {
                "name": c.get("name", ""),
                "image": c.get("image", ""),
                "imageID": "",
                "ready": False,
                "restartCount": 0,
                "state": {
                    "waiting": {
                        "reason": "ErrImagePull",
                        "message": f"failed to pull image {c.get('image')}",
                    }
                },
            }
            for c in containers
        ]
        conditions = status.get("conditions") or [{"type": "PodScheduled", "status": "True"}]
        return {"phase": "Pending", "conditions": conditions, "containerStatuses": waiting}
    if now < due:
        return None
    since = format_time(due).split(".")[0] + "Z"
    ident = hashlib.sha256(f"{meta.get('namespace')}/{meta['name']}/{since}".encode())
    running = [
        {
            "name": c.get("name", ""),
            "image": c.get("image", ""),
            "imageID": _image_id(str(c.get("image", ""))),
            "containerID": f"containerd://{ident.hexdigest()}",
            "ready": ready,
            "started": True,
            "restartCount": 0,
            "state": {"running": {"startedAt": since}},
        }
        for c in containers
    ]
    flag = "True" if ready else "False"
    return {
        "phase": "Running",
        "hostIP": node_ip,
        "podIP": node_ip,
        "startTime": status.get("startTime") or since,
        "conditions": [
            {"type": "PodScheduled", "status": "True"},
            {"type": "Initialized", "status": "True"},
            {"type": "ContainersReady", "status": flag},
            {"type": "Ready", "status": flag},
        ],
        "containerStatuses": running,
    }


def covers(have: Any, want: Any) -> bool:
    """True if ``have`` says everything ``want`` says. A real server adds to a pod status
    what it defaults (qosClass, podIPs, condition times as null), so an exact comparison
    would rewrite the status on every step."""
    if isinstance(want, dict):
        if not isinstance(have, dict):
            return False
        return all(v is None or covers(have.get(k), v) for k, v in want.items())
    if isinstance(want, list):
        if not isinstance(have, list) or len(have) != len(want):
            return False
        return all(covers(h, w) for h, w in zip(have, want, strict=True))
    return bool(have == want)


def kubelet_node(name: str) -> Obj:
    """The Node a real server's unbound pods are bound to: Ready, no GPUs, room for all."""
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "spec": {},
        "status": {
            "capacity": {"cpu": "64", "memory": "512Gi", "pods": "1000"},
            "allocatable": {"cpu": "64", "memory": "512Gi", "pods": "1000"},
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
        },
    }
