"""What every reconciler of the controller simulator shares: the watch-fed cache, the write
guard, the wake-up list, the simulated pods' making (small readers of objects: objects.py).

``ReconcilerCore`` holds the state the reconcilers (cluster_reconciler.py, pool_reconciler.py,
node_reconciler.py, workload_reconciler.py, deployment_reconciler.py, pod_lifecycle.py) share;
``ControllerSim`` (controller.py) is all of them at once and runs them in one step.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any, Protocol

from gitopsbot.sandbox.apiserver.errors import ApiError
from gitopsbot.sandbox.simulator import kubelet, objects, sessions
from gitopsbot.sandbox.simulator.clock import Clock
from gitopsbot.sandbox.simulator.config import SimConfig
from gitopsbot.sandbox.simulator.informer import Informer
from gitopsbot.sandbox.simulator.rollout import DOMAIN, format_time, parse_time
from gitopsbot.sandbox.simulator.store_port import StorePort

# One logger for the whole simulator controller, whichever reconciler writes.
log = logging.getLogger("gitopsbot.sandbox.simulator.controller")

Obj = dict[str, Any]
TF = f"{DOMAIN}/v1"
MANAGER = "tensor-fusion-controller"
SIM = "sandbox.gitopsbot"
SIMULATED = f"{SIM}/simulated"  # label on every pod the simulator plays kubelet for
READY_AT = f"{SIM}/ready-at"  # annotation: when the pod becomes Running and Ready
NEVER_READY = f"{SIM}/never-ready"
POOL_LABEL = f"{SIM}/pool"  # on simulated Nodes: the GPUPool they belong to
OWNER_LABEL = f"{SIM}/owner"  # on client app pods: the simulated owner that recreates them
DEFAULT_OPERATOR_NAMESPACE = "tensor-fusion-sys"
WATCHED = (
    ("apps/v1", "Deployment"),
    ("apps/v1", "ReplicaSet"),
    (TF, "TensorFusionCluster"),
    (TF, "GPUPool"),
    (TF, "GPUNode"),
    (TF, "TensorFusionWorkload"),
    (TF, sessions.KIND),
    ("v1", "Node"),
    ("v1", "Pod"),
    ("v1", "Namespace"),
)
CONTROLLER_SELECTOR = {
    "app.kubernetes.io/component": "controller",
    "app.kubernetes.io/name": "tensor-fusion",
}


class WorkloadStatusOwner(Protocol):
    """The emulator's kubelet: told to leave a Deployment's status to the simulator."""

    def exclude(self, kind: str, namespace: str, name: str) -> None: ...


class ReconcilerCore:
    """The state and the write path every reconciler of ``ControllerSim`` uses."""

    store: StorePort
    config: SimConfig
    clock: Clock
    cache: Informer
    _wrote: bool
    _wake: list[datetime]
    _accounts: set[str]
    _pod_prefix: str

    # ------------------------------------------------------------------ writes

    def _guard(self, what: str, fn: Callable[[], Obj | None], before: Obj | None) -> Obj | None:
        try:
            after = fn()
        except ApiError as e:
            # Someone else wrote first, or the object went away: look again shortly.
            log.debug("controller simulator: %s: %s", what, e)
            self._wake.append(self.clock.now() + timedelta(seconds=0.05))
            return None
        if after is None or objects.resource_version(after) != objects.resource_version(before):
            self._wrote = True
        if after is not None:
            self.cache.apply(after)
        return after

    def _create(self, obj: Obj) -> Obj | None:
        return self._guard(
            f"create {obj['kind']} {obj['metadata'].get('name')}",
            lambda: self.store.create(obj, manager=MANAGER),
            None,
        )

    def _set_status(self, obj: Obj, status: Obj) -> Obj | None:
        if obj.get("status") == status:
            return obj
        new = copy.deepcopy(obj)
        new["status"] = status
        # Conditional, as a controller writes from its cache (a real server refuses an
        # unconditional update of a custom resource); a conflict is retried from the cache.
        return self._guard(
            f"status of {obj['kind']} {obj['metadata']['name']}",
            lambda: self.store.update_status(new, manager=MANAGER),
            obj,
        )

    def _update(self, obj: Obj) -> Obj | None:
        return self._guard(
            f"update {obj['kind']} {obj['metadata']['name']}",
            lambda: self.store.update(obj, manager=MANAGER),
            None,
        )

    def _delete(self, obj: Obj) -> None:
        meta = obj["metadata"]
        try:
            last = self.store.delete(
                obj["apiVersion"], obj["kind"], meta.get("namespace"), meta["name"]
            )
        except ApiError as e:
            log.debug("controller simulator: delete %s %s: %s", obj["kind"], meta["name"], e)
            self._wake.append(self.clock.now() + timedelta(seconds=0.05))
            return
        self._wrote = True
        if last is not None and objects.deleting(last):
            self.cache.apply(last)  # finalizers hold it
        else:
            self.cache.forget(obj)

    def _ensure_namespace(self, name: str) -> None:
        if self.cache.get("v1", "Namespace", None, name) is None:
            self._create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})

    def _ensure_account(self, namespace: str, name: str) -> None:
        """The ServiceAccount hypervisor pods name: a real server refuses pods whose account
        does not exist (ServiceAccount admission); the emulator does not check."""
        if not self.config.real_server or namespace in self._accounts:
            return
        account = {"apiVersion": "v1", "kind": "ServiceAccount",
                   "metadata": {"name": name, "namespace": namespace}}  # fmt: skip
        try:
            self.store.create(account, manager=MANAGER)
        except ApiError as e:
            if e.reason != "AlreadyExists":
                log.debug("controller simulator: ServiceAccount %s: %s", name, e)
                return
        self._accounts.add(namespace)

    def _sim_pod(
        self,
        *,
        name: str,
        namespace: str,
        labels: dict[str, str],
        annotations: dict[str, str],
        spec: Obj,
        delay: float,
        owners: list[Obj],
        never_ready: bool = False,
    ) -> Obj:
        now = self.clock.now()
        ann = {**annotations, READY_AT: format_time(now + timedelta(seconds=delay))}
        if never_ready:
            ann[NEVER_READY] = "true"
        meta: Obj = {
            "name": name,
            "namespace": namespace,
            "labels": {**labels, SIMULATED: "true"},
            "annotations": ann,
        }
        if owners:
            meta["ownerReferences"] = owners
        pod: Obj = {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}
        # Born in the state the kubelet would give it now: saves a write per pod when
        # hypervisors are ready at once (500-node rollouts).
        pod["status"] = self._pod_status(pod, now) or {
            "phase": "Pending",
            "conditions": [{"type": "PodScheduled", "status": "True"}],
        }
        return pod

    def _pod_status(self, pod: Obj, now: datetime, due: datetime | None = None) -> Obj | None:
        """The status the kubelet reports at ``now``, or None while the pod is starting."""
        ann = objects.annotations_of(pod)
        if due is None:
            due = parse_time(ann[READY_AT]) if READY_AT in ann else now
        status = kubelet.pod_status(
            pod,
            now,
            due=due,
            ready=ann.get(NEVER_READY) != "true",
            unpullable=self.config.unpullable_images,
        )
        if status is None:
            self._wake.append(due)
        return status
