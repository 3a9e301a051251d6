"""A tiny stand-in for the workload controllers: marks Deployments, StatefulSets and
DaemonSets rolled out and ready (after an optional delay), gives each Deployment a ReplicaSet
for its current template, as ``helm --wait`` (legacy) and ``kubectl rollout status`` expect,
and completes Jobs at once (helm waits for hook Jobs). No Pods are made. The controller
simulator takes over chosen workloads with ``exclude(kind, namespace, name)``.
"""

from __future__ import annotations

import copy
import hashlib
import json
import threading
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from gitopsbot.sandbox.apiserver.errors import ApiError
from gitopsbot.sandbox.apiserver.store import now_rfc3339

if TYPE_CHECKING:
    from gitopsbot.sandbox.apiserver.store import Store

Obj = dict[str, Any]
MANAGER = "kube-controller-manager"
WORKLOADS = {"Deployment", "StatefulSet", "DaemonSet"}


def template_hash(template: Obj) -> str:
    digest = hashlib.sha256(json.dumps(template, sort_keys=True).encode()).hexdigest()
    return digest[:10]


def template_revision(obj: Obj) -> str:
    """``<name>-<hash of the pod template>``: the ReplicaSet a Deployment's current template
    makes, a StatefulSet's revision."""
    template = (obj.get("spec") or {}).get("template") or {}
    return f"{obj['metadata']['name']}-{template_hash(template)}"


def owned_replica_sets(dep: Obj, replica_sets: Iterable[Obj]) -> list[Obj]:
    """Those of ``replica_sets`` that Deployment ``dep`` owns."""
    uid = dep["metadata"]["uid"]
    return [
        rs
        for rs in replica_sets
        if any(r.get("uid") == uid for r in rs["metadata"].get("ownerReferences") or [])
    ]


def new_replica_set(dep: Obj, *, revision: int) -> Obj:
    """The ReplicaSet Deployment ``dep``'s current template makes, as the deployment
    controller makes it (template and selector labelled with the template's hash), its
    replicas all ready at once."""
    meta = dep["metadata"]
    spec = dep.get("spec") or {}
    template = copy.deepcopy(spec.get("template") or {})
    h = template_hash(template)
    template.setdefault("metadata", {}).setdefault("labels", {})["pod-template-hash"] = h
    selector = copy.deepcopy(spec.get("selector") or {})
    selector.setdefault("matchLabels", {})["pod-template-hash"] = h
    replicas = int(spec.get("replicas", 1))
    return {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {
            "name": f"{meta['name']}-{h}",
            "namespace": meta["namespace"],
            "labels": dict(template["metadata"]["labels"]),
            "annotations": {"deployment.kubernetes.io/revision": str(revision)},
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "Deployment",
                    "name": meta["name"],
                    "uid": meta["uid"],
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": {"replicas": replicas, "selector": selector, "template": template},
        "status": {
            "replicas": replicas,
            "readyReplicas": replicas,
            "availableReplicas": replicas,
            "fullyLabeledReplicas": replicas,
            "observedGeneration": 1,
        },
    }


class Kubelet:
    """Subscribes to the store; ``enabled`` and ``delay`` may change at runtime."""

    def __init__(self, store: Store, *, delay: float = 0.0, enabled: bool = True) -> None:
        self.store = store
        self.delay = delay
        self.enabled = enabled
        self._excluded: set[tuple[str, str, str]] = set()
        self._timers: set[threading.Timer] = set()
        self._lock = threading.Lock()
        self._unsubscribe = store.subscribe(self._on_event)

    def exclude(self, kind: str, namespace: str, name: str) -> None:
        """Leave this workload's status to someone else (e.g. the controller simulator)."""
        with self._lock:
            self._excluded.add((kind, namespace, name))

    def include(self, kind: str, namespace: str, name: str) -> None:
        with self._lock:
            self._excluded.discard((kind, namespace, name))

    def close(self) -> None:
        self._unsubscribe()
        with self._lock:
            timers, self._timers = self._timers, set()
        for t in timers:
            t.cancel()

    def _on_event(self, etype: str, obj: Obj) -> None:
        if not self.enabled or etype == "DELETED":
            return
        if obj.get("apiVersion") == "batch/v1" and obj.get("kind") == "Job":
            self._job(obj)
            return
        if obj.get("apiVersion") != "apps/v1":
            return
        kind = obj.get("kind", "")
        meta = obj["metadata"]
        if kind not in WORKLOADS or meta.get("deletionTimestamp"):
            return
        with self._lock:
            if (kind, meta.get("namespace", ""), meta["name"]) in self._excluded:
                return
        if (obj.get("status") or {}).get("observedGeneration") == meta.get("generation"):
            return
        key = (kind, meta["namespace"], meta["name"])
        if self.delay <= 0:
            self._reconcile(key)
            return
        timer = threading.Timer(self.delay, self._reconcile_later, args=(key,))
        timer.daemon = True
        with self._lock:
            self._timers.add(timer)
        timer.start()

    def _job(self, job: Obj) -> None:
        # Jobs (helm hooks among them) run to completion at once: helm waits for hook Jobs.
        meta = job["metadata"]
        if (job.get("status") or {}).get("completionTime") or meta.get("deletionTimestamp"):
            return
        with self._lock:
            if ("Job", meta.get("namespace", ""), meta["name"]) in self._excluded:
                return
        now = now_rfc3339()
        completions = int((job.get("spec") or {}).get("completions") or 1)
        job["status"] = {
            "startTime": now,
            "completionTime": now,
            "succeeded": completions,
            "ready": 0,
            "active": 0,
            "conditions": [
                {
                    "type": "SuccessCriteriaMet",
                    "status": "True",
                    "lastProbeTime": now,
                    "lastTransitionTime": now,
                },
                {
                    "type": "Complete",
                    "status": "True",
                    "lastProbeTime": now,
                    "lastTransitionTime": now,
                },
            ],
        }
        try:
            self.store.update_status(job, manager=MANAGER)
        except ApiError:
            pass  # changed or deleted meanwhile

    def _reconcile_later(self, key: tuple[str, str, str]) -> None:
        with self._lock:
            self._timers = {t for t in self._timers if t.is_alive()}
        self._reconcile(key)

    def _reconcile(self, key: tuple[str, str, str]) -> None:
        kind, ns, name = key
        obj = self.store.get("apps/v1", kind, ns, name)
        if obj is None or obj["metadata"].get("deletionTimestamp") or self.store.closed:
            return
        try:
            if kind == "Deployment":
                self._replica_set(obj)
            obj["status"] = self._status(kind, obj)
            self.store.update_status(obj, manager=MANAGER)
        except ApiError:
            pass  # changed meanwhile: the next event reconciles again

    def _status(self, kind: str, obj: Obj) -> Obj:
        spec = obj.get("spec") or {}
        gen = obj["metadata"].get("generation", 1)
        if kind == "DaemonSet":
            n = len(self.store.list("v1", "Node"))
            return {
                "currentNumberScheduled": n,
                "desiredNumberScheduled": n,
                "numberAvailable": n,
                "numberMisscheduled": 0,
                "numberReady": n,
                "updatedNumberScheduled": n,
                "observedGeneration": gen,
            }
        replicas = int(spec.get("replicas", 1))
        status: Obj = {
            "observedGeneration": gen,
            "replicas": replicas,
            "updatedReplicas": replicas,
            "readyReplicas": replicas,
            "availableReplicas": replicas,
        }
        if kind == "StatefulSet":
            rev = template_revision(obj)
            status.update(currentReplicas=replicas, currentRevision=rev, updateRevision=rev)
            return status
        now = now_rfc3339()
        status["conditions"] = [
            {
                "type": "Available",
                "status": "True",
                "reason": "MinimumReplicasAvailable",
                "message": "Deployment has minimum availability.",
                "lastUpdateTime": now,
                "lastTransitionTime": now,
            },
            {
                "type": "Progressing",
                "status": "True",
                "reason": "NewReplicaSetAvailable",
                "message": f'ReplicaSet "{obj["metadata"]["name"]}" has successfully progressed.',
                "lastUpdateTime": now,
                "lastTransitionTime": now,
            },
        ]
        return status

    def _replica_set(self, dep: Obj) -> None:
        meta = dep["metadata"]
        replicas = int((dep.get("spec") or {}).get("replicas", 1))
        name = template_revision(dep)
        listed = self.store.list("apps/v1", "ReplicaSet", meta["namespace"])
        owned = owned_replica_sets(dep, listed)
        current = next((rs for rs in owned if rs["metadata"]["name"] == name), None)
        revisions = {
            rs["metadata"]["name"]: int(
                (rs["metadata"].get("annotations") or {}).get("deployment.kubernetes.io/revision")
                or 0
            )
            for rs in owned
        }
        others = [r for n, r in revisions.items() if current is None or n != name]
        revision = max(1 + max(others, default=0), revisions.get(name, 0))
        for rs in owned:
            want = replicas if rs["metadata"]["name"] == name else 0
            if rs["spec"].get("replicas") != want:
                rs["spec"]["replicas"] = want
                rs = self.store.update(rs, manager=MANAGER)
            if rs["metadata"]["name"] == name:
                annotations = rs["metadata"].setdefault("annotations", {})
                annotations["deployment.kubernetes.io/revision"] = str(revision)
                rs = self.store.update(rs, manager=MANAGER)
            status = {
                "replicas": want,
                "readyReplicas": want,
                "availableReplicas": want,
                "fullyLabeledReplicas": want,
                "observedGeneration": rs["metadata"].get("generation", 1),
            }
            if rs.get("status") != status:
                rs["status"] = status
                self.store.update_status(rs, manager=MANAGER)
        if any(rs["metadata"]["name"] == name for rs in owned):
            return
        self.store.create(new_replica_set(dep, revision=revision), manager=MANAGER)
