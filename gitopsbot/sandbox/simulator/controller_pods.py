"""The controller Deployment's Pods, as the ReplicaSet controller and the kubelet make them.

On the emulator the simulator rolls the controller Deployment out itself
(deployment_reconciler.py, ``_controller_readiness``) and keeps one Pod per replica of its
current ReplicaSet: named
``<replicaset>-<5 characters>``, the template's labels (``pod-template-hash`` included; the
chart's ``app.kubernetes.io/component=controller`` and ``tensor-fusion.ai/component=operator``,
never a pool, worker, client or hypervisor label), an ownerReference to the ReplicaSet, born
Running and Ready (containerStatuses ready, started, restartCount 0). Once the new ReplicaSet
is rolled out, the Pods of older ones are deleted. A ``cluster-agent`` container gets its log
annotation from agent.py when the Pod is made. An unpullable controller image makes no new
Pods (the Deployment never rolls out; the old Pods stay). Pure: ``plan`` says what to create
to make and delete; the simulator writes it.
"""

from __future__ import annotations

import copy
import secrets
from datetime import datetime
from typing import Any

from gitopsbot.sandbox.simulator import kubelet

Obj = dict[str, Any]
# The characters Kubernetes' rand.String uses for generated names (no vowels, no 0/1/3).
_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"


def _owned_by(obj: Obj, uids: set[str]) -> str | None:
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("uid") in uids:
            return str(ref["uid"])
    return None


def pod_name(replica_set: str) -> str:
    return f"{replica_set}-{''.join(secrets.choice(_ALPHABET) for _ in range(5))}"


def new_pod(replica_set: Obj, now: datetime, *, annotations: dict[str, str]) -> Obj:
    """A Running, Ready Pod of ``replica_set``'s template, made at ``now``."""
    meta = replica_set["metadata"]
    template = copy.deepcopy((replica_set.get("spec") or {}).get("template") or {})
    tmeta = template.get("metadata") or {}
    pod: Obj = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": pod_name(meta["name"]),
            "namespace": meta["namespace"],
            "labels": dict(tmeta.get("labels") or {}),
            "annotations": {**(tmeta.get("annotations") or {}), **annotations},
            "creationTimestamp": now.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "ReplicaSet",
                    "name": meta["name"],
                    "uid": meta["uid"],
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": template.get("spec") or {},
    }
    pod["status"] = kubelet.pod_status(pod, now, due=now, ready=True, unpullable=frozenset())
    return pod


def plan(
    replica_sets: list[Obj], current: str, replicas: int, pods: list[Obj], *, rolled_out: bool
) -> tuple[Obj | None, int, list[Obj]]:
    """(the current ReplicaSet, how many Pods to make for it, the Pods to delete): the
    current one's extras (newest first), and once ``rolled_out`` every Pod of the others.
    ``replica_sets`` are the Deployment's, ``pods`` those of its namespace."""
    by_uid = {str(rs["metadata"]["uid"]): rs for rs in replica_sets}
    rs = next((r for r in replica_sets if r["metadata"]["name"] == current), None)
    owned: dict[str, list[Obj]] = {}
    for pod in pods:
        if (pod.get("metadata") or {}).get("deletionTimestamp"):
            continue
        uid = _owned_by(pod, set(by_uid))
        if uid is not None:
            owned.setdefault(uid, []).append(pod)
    delete: list[Obj] = []
    missing = 0
    if rs is not None:
        mine = sorted(owned.pop(str(rs["metadata"]["uid"]), []), key=_age)
        missing = max(replicas - len(mine), 0)
        delete += mine[replicas:][::-1]
    if rolled_out:
        for others in owned.values():
            delete += others
    return rs, missing, delete


def _age(pod: Obj) -> tuple[str, str]:
    meta = pod["metadata"]
    return (str(meta.get("creationTimestamp") or ""), str(meta.get("name") or ""))
