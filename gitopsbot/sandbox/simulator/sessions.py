"""GPU sessions in the sandbox: the TensorFusionConnection of each remote client pod.

As the real pod controller does (NexusGPU/tensor-fusion ``internal/controller/
pod_controller.go``), the simulator creates one TensorFusionConnection per remote client pod,
in the pod's namespace, named after the pod, labelled ``tensor-fusion.ai/workload=<workload>``
(the pod's ``tensor-fusion.ai/selected-workload`` annotation), with ``spec.workloadName``,
``spec.clientPod`` and an ownerReference to the pod: it goes with the pod. As the connection
controller does, its ``status.phase`` is ``Running`` while a ready worker pod of the workload
serves it (``status.workerName``), ``Pending`` while none is ready, and ``Failed`` once the
client pod is being deleted or its worker went away.

A test ends a session on purpose with ``end_session``: it annotates the connection
(``sandbox.gitopsbot/session-ended``) and the simulator then keeps it ``Failed`` (no worker)
until the client pod goes. Deleting the connection instead does not end the session: the
pod controller recreates it for the pod, as the real one does.
"""

from __future__ import annotations

from typing import Any

from gitopsbot.sandbox.simulator.rollout import DOMAIN
from gitopsbot.sandbox.simulator.store_port import StorePort

Obj = dict[str, Any]
TF = f"{DOMAIN}/v1"
KIND = "TensorFusionConnection"
WORKLOAD_LABEL = f"{DOMAIN}/workload"
SELECTED_WORKLOAD = f"{DOMAIN}/selected-workload"
ENDED = "sandbox.gitopsbot/session-ended"
RUNNING, PENDING, FAILED = "Running", "Pending", "Failed"


def is_remote_client(pod: Obj) -> bool:
    """A client-injected app pod using a remote worker: component ``client`` with the
    workload the webhook selected."""
    meta = pod.get("metadata") or {}
    return (meta.get("labels") or {}).get(f"{DOMAIN}/component") == "client" and bool(
        (meta.get("annotations") or {}).get(SELECTED_WORKLOAD)
    )


def workload_of(pod: Obj) -> str:
    """The workload the webhook selected for a remote client ``pod``."""
    return str(pod["metadata"]["annotations"][SELECTED_WORKLOAD])


def connection_for(pod: Obj, *, idle: bool = False) -> Obj:
    """The TensorFusionConnection the pod controller creates for a remote client ``pod``
    (which must carry its uid: it owns the connection); ``idle``: its session is ended from
    the start (the app opens none)."""
    meta = pod["metadata"]
    workload = workload_of(pod)
    return {
        "apiVersion": TF,
        "kind": KIND,
        "metadata": {
            "name": meta["name"],
            "namespace": meta["namespace"],
            "labels": {WORKLOAD_LABEL: workload},
            **({"annotations": {ENDED: "true"}} if idle else {}),
            "ownerReferences": [
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "name": meta["name"],
                    "uid": meta["uid"],
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": {"workloadName": workload, "clientPod": meta["name"]},
    }


def connection_status(connection: Obj, *, client_deleting: bool, ready_workers: list[str]) -> Obj:
    """The connection's status now: keep its worker while that one is ready, else take the
    first ready one (``ready_workers``, names); Failed when the session ended (on purpose, its
    client pod being deleted, or its worker lost with none to take over)."""
    status = connection.get("status") or {}
    ended = ((connection.get("metadata") or {}).get("annotations") or {}).get(ENDED)
    current = str(status.get("workerName") or "")
    if client_deleting or (ended and str(ended).lower() != "false"):
        return {"phase": FAILED, "workerName": "", "connectionURL": ""}
    if current in ready_workers:
        worker = current
    elif ready_workers:
        worker = ready_workers[0]
    else:
        phase = FAILED if status.get("phase") == RUNNING else PENDING
        return {"phase": phase, "workerName": "", "connectionURL": ""}
    namespace = (connection.get("metadata") or {}).get("namespace") or ""
    return {
        "phase": RUNNING,
        "workerName": worker,
        "connectionURL": f"native+{worker}.{namespace}+8000",
    }


def end_session(store: StorePort, namespace: str, name: str) -> Obj:
    """End the GPU session of connection ``namespace/name`` on purpose: the simulator sets
    it Failed at its next step (see the module doc)."""
    patch: Obj = {"metadata": {"annotations": {ENDED: "true"}}}
    return store.patch_merge(TF, KIND, namespace, name, patch, manager="sandbox-test")


__all__ = [
    "connection_for",
    "connection_status",
    "end_session",
    "is_remote_client",
    "workload_of",
]
