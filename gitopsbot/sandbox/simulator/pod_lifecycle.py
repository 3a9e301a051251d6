"""The kubelet's and the scheduler's part: simulated pods become Running/Ready after their
delay, the GPU canary's smoke pods run to an end, and on a real server unscheduled pods are
bound and others' pods confirmed deleted.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from gitopsbot.sandbox.apiserver.errors import ApiError
from gitopsbot.sandbox.simulator import kubelet, objects, smoke
from gitopsbot.sandbox.simulator.reconcile_core import (
    CONTROLLER_SELECTOR,
    MANAGER,
    SIMULATED,
    TF,
    Obj,
    ReconcilerCore,
    log,
)
from gitopsbot.sandbox.simulator.rollout import DOMAIN, format_time
from gitopsbot.sandbox.simulator.store_port import PodBinding


class PodLifecycle(ReconcilerCore):
    """Plays the kubelet (and on a real server the scheduler) for the pods."""

    _started: dict[str, datetime]
    _confirmed: set[str]

    def _kubelet(self, now: datetime) -> None:
        real = self.config.real_server
        for pod in self.cache.list("v1", "Pod", labels=None if real else {SIMULATED: "true"}):
            meta = pod["metadata"]
            if objects.deleting(pod):
                # No kubelet confirms a graceful deletion on a real server: this one does.
                if real and meta.get("uid") not in self._confirmed:
                    self._confirmed.add(str(meta.get("uid")))
                    self._delete(pod)
                continue
            if smoke.is_smoke(pod):
                continue  # played by _smoke_pods: pinned to its GPU node, runs to an end
            if real and not (pod.get("spec") or {}).get("nodeName"):
                self._bind(pod, now)  # as the scheduler: workers, clients, others' pods
                continue
            due = None if SIMULATED in objects.labels_of(pod) else self._foreign_due(pod, now)
            status = self._pod_status(pod, now, due)
            if status is not None and not kubelet.covers(pod.get("status"), status):
                self._set_status(pod, status)

    def _smoke_pods(self, now: datetime) -> None:
        """The GPU canary's smoke pods run to Succeeded or Failed (simulator/smoke.py)."""
        pods = [p for p in self.cache.list("v1", "Pod", labels=smoke.SELECTOR) if smoke.pending(p)]
        if not pods:
            return
        hypervisors = self.cache.list("v1", "Pod", labels={f"{DOMAIN}/component": "hypervisor"})
        for pod in pods:
            node = smoke.node_of(pod)
            if self.config.real_server and not (pod.get("spec") or {}).get("nodeName") and node:
                # As the scheduler, honouring its nodeSelector (not the kubelet Node).
                if isinstance(self.store, PodBinding):
                    try:
                        meta = pod["metadata"]
                        self.store.bind(meta["namespace"], meta["name"], node, manager=MANAGER)
                        self._wrote = True
                    except ApiError as e:
                        log.debug("controller simulator: bind %s: %s", pod["metadata"]["name"], e)
                        self._wake.append(now + timedelta(seconds=0.05))
                continue  # played once the binding is seen
            ok, message = smoke.outcome(
                pod,
                tfcs=self.cache.list(TF, "TensorFusionCluster"),
                gpupools=self.cache.list(TF, "GPUPool"),
                hypervisors=hypervisors,
                broken_images=self.config.broken_gpu_path_images,
            )
            self._set_status(pod, smoke.status(pod, ok, message, format_time(now)))

    def _bind(self, pod: Obj, now: datetime) -> None:
        """Bind an unscheduled pod to the kubelet Node (made when first needed)."""
        meta = pod["metadata"]
        node = self.config.kubelet_node
        if self.cache.get("v1", "Node", None, node) is None:
            self._create(kubelet.kubelet_node(node))
        if not isinstance(self.store, PodBinding):
            return
        try:
            self.store.bind(meta["namespace"], meta["name"], node, manager=MANAGER)
            self._wrote = True
        except ApiError as e:  # gone, or bound by someone else: look again
            log.debug("controller simulator: bind %s: %s", meta["name"], e)
            self._wake.append(now + timedelta(seconds=0.05))

    def _foreign_due(self, pod: Obj, now: datetime) -> datetime:
        """When a pod the simulator did not make (a ReplicaSet's, a chart's) runs, on a real
        server: the controller's after ``controller_ready_delay`` from when it was first seen
        bound, others at once."""
        uid = str(pod["metadata"].get("uid"))
        if uid not in self._started:
            controller = all(
                objects.labels_of(pod).get(k) == v for k, v in CONTROLLER_SELECTOR.items()
            )
            delay = self.config.controller_ready_delay if controller else 0.0
            self._started[uid] = now + timedelta(seconds=delay)
        return self._started[uid]
