"""The simulated TensorFusion controller: level-triggered reconciles against a Store.

Each ``step()`` looks at everything, as controller-runtime reconcilers eventually do, and writes
only what differs: TensorFusionCluster → GPUPools (spec overwritten from specTemplate, R11),
GPUPool → Nodes and GPUNodes (the simulated machines), GPUNode → hypervisor pod and phase,
TensorFusionWorkload → worker pods, owners of client-injected app pods → the pods, the batched
component rollouts per pool (rollout.py), phases and the controller Deployment's readiness
and Pods (controller_pods.py; the console agent of their cluster-agent container: agent.py).
It also plays the kubelet for the pods it creates (Pending → Running/Ready after a delay).

``start()`` runs steps on a thread, woken by Store events and by the next due time; tests
may instead call ``step()``/``settle()`` with a ``ManualClock``.

The store is a ``StorePort``: the emulator's Store, or a real API server through
adapters/kube_store.py (``SimConfig.real_server``: then the real Deployment controller owns
Deployment status and the simulator binds and runs every pod, as scheduler and kubelet).

Longer than our modules usually are: one reconcile whose parts share the watch-fed cache,
the write guard and the wake-up list; the pure parts live beside it (rollout.py, hashing.py,
kubelet.py).
"""

from __future__ import annotations

import copy
import dataclasses
import json
import logging
import secrets
import threading
from collections.abc import Callable
from datetime import datetime, timedelta
from types import TracebackType
from typing import Any, Protocol

from gitopsbot.sandbox.apiserver.errors import ApiError
from gitopsbot.sandbox.apiserver.kubelet import template_hash
from gitopsbot.sandbox.simulator import agent, controller_pods, hashing, kubelet, sessions, smoke
from gitopsbot.sandbox.simulator.clock import Clock, SystemClock
from gitopsbot.sandbox.simulator.config import SimConfig, WorkloadSpec
from gitopsbot.sandbox.simulator.informer import Informer
from gitopsbot.sandbox.simulator.rollout import (
    DOMAIN,
    Component,
    Decision,
    Inventory,
    Policy,
    decide,
    format_time,
    parse_time,
)
from gitopsbot.sandbox.simulator.store_port import PodBinding, StorePort

log = logging.getLogger(__name__)

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


def _meta(obj: Obj) -> Obj:
    meta: Obj = obj.setdefault("metadata", {})
    return meta


def _labels(obj: Obj) -> dict[str, str]:
    return dict((obj.get("metadata") or {}).get("labels") or {})


def _annotations(obj: Obj) -> dict[str, str]:
    return dict((obj.get("metadata") or {}).get("annotations") or {})


def _rv(obj: Obj | None) -> str:
    return str(((obj or {}).get("metadata") or {}).get("resourceVersion") or "")


def _deleting(obj: Obj) -> bool:
    return bool((obj.get("metadata") or {}).get("deletionTimestamp"))


def _age_key(obj: Obj) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return (str(meta.get("creationTimestamp") or ""), str(meta.get("name") or ""))


def _owner(obj: Obj, *, controller: bool) -> Obj:
    meta = obj["metadata"]
    ref: Obj = {
        "apiVersion": obj["apiVersion"],
        "kind": obj["kind"],
        "name": meta["name"],
        "uid": meta["uid"],
    }
    if controller:
        ref["controller"] = True
        ref["blockOwnerDeletion"] = True
    return ref


def _pod_ready(pod: Obj) -> bool:
    status = pod.get("status") or {}
    if status.get("phase") != "Running":
        return False
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in status.get("conditions") or []
    )


class WorkloadStatusOwner(Protocol):
    """The emulator's kubelet: told to leave a Deployment's status to the simulator."""

    def exclude(self, kind: str, namespace: str, name: str) -> None: ...


class ControllerSim:
    """Plays the TensorFusion controller against ``store`` (see the module docstring)."""

    def __init__(
        self,
        store: StorePort,
        config: SimConfig | None = None,
        *,
        clock: Clock | None = None,
        kubelet: WorkloadStatusOwner | None = None,
    ) -> None:
        self.store = store
        self.kubelet = kubelet
        self.config = config or SimConfig()
        self.clock: Clock = clock or SystemClock()
        self._wrote = False
        self._wake: list[datetime] = []
        self._next_wake: datetime | None = None
        self._had_ready: set[str] = set()
        self._deploy_seen: dict[tuple[str, str, int], datetime] = {}
        self._running_image: dict[tuple[str, str], str] = {}
        self._started: dict[str, datetime] = {}  # uid → when a foreign pod runs (real server)
        self._confirmed: set[str] = set()  # uids of pods whose deletion was confirmed
        self._accounts: set[str] = set()  # namespaces holding the hypervisor ServiceAccount
        self._lock = threading.RLock()
        self._kick = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._pod_prefix = "hypervisor-"
        self.cache = Informer(store, WATCHED, on_change=self._kick.set)
        self.steps = 0

    # ------------------------------------------------------------------ running

    def start(self) -> ControllerSim:
        if self._thread is not None:
            return self
        self._stopping.clear()
        self._thread = threading.Thread(target=self._run, name="controller-sim", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        self._kick.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None

    def close(self) -> None:
        """Stop, and stop following the Store's events."""
        self.stop()
        self.cache.close()

    def __enter__(self) -> ControllerSim:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def _run(self) -> None:
        while not self._stopping.is_set():
            self._kick.clear()
            try:
                changed = self.step()
            except Exception:  # a bug in one step must not kill the sandbox
                log.exception("controller simulator step failed")
                changed = False
            if changed:
                continue
            timeout = 2.0  # a safety net only: events and due times wake it sooner
            if self._next_wake is not None:
                ahead = (self._next_wake - self.clock.now()).total_seconds()
                timeout = max(0.0, min(timeout, ahead))
            self._kick.wait(timeout)

    def set_workloads(self, workloads: tuple[WorkloadSpec, ...]) -> None:
        """Play these workloads from now on (``SimConfig.workloads``), e.g. a test's workload
        added to a running sandbox; the next step makes them."""
        with self._lock:
            self.config = dataclasses.replace(self.config, workloads=workloads)
        self._kick.set()

    def settle(self, max_steps: int = 100) -> int:
        """Step until a step changes nothing; returns the number of steps that changed."""
        for n in range(max_steps):
            if not self.step():
                return n
        raise RuntimeError(f"controller simulator did not settle in {max_steps} steps")

    @property
    def next_wake(self) -> datetime | None:
        """The earliest time something is due (a pod ready, a batch interval over)."""
        return self._next_wake

    # ------------------------------------------------------------------ one reconcile

    def step(self) -> bool:
        """One reconcile of everything; True if it changed anything in the store."""
        with self._lock:
            self._wrote = False
            self._wake = []
            now = self.clock.now()
            controller_ready, controller_image, controller_ns = self._controllers(now)
            if not self.config.require_controller or controller_ready:
                namespace = self.config.operator_namespace or controller_ns
                image = controller_image if self.config.hash_covers_controller_image else ""
                legacy = self.config.legacy_hypervisor_names and hashing.legacy_pod_prefix(
                    controller_image
                )
                self._pod_prefix = "tf-hypervisor-" if legacy else "hypervisor-"
                self._reconcile(now, namespace, image)
            self._kubelet(now)
            self._smoke_pods(now)
            self._next_wake = min(self._wake) if self._wake else None
            self.steps += 1
            return self._wrote

    def _reconcile(self, now: datetime, namespace: str, code: str) -> None:
        self._ensure_namespace(namespace)
        changed_pools: set[str] = set()
        tfcs = self.cache.list(TF, "TensorFusionCluster")
        for tfc in tfcs:
            if self._reconcile_cluster(tfc):
                changed_pools.add(tfc["metadata"]["name"])
        pools = [p for p in self.cache.list(TF, "GPUPool") if not _deleting(p)]
        for pool in pools:
            self._ensure_machines(pool)
        self._reconcile_gpunodes(pools, namespace, code)
        self._reconcile_workloads(pools, code)
        self._reconcile_clients(pools, code)
        self._reconcile_connections()
        for pool in self.cache.list(TF, "GPUPool"):
            if not _deleting(pool):
                self._reconcile_pool(pool, namespace, now, code)
        pools = self.cache.list(TF, "GPUPool")
        for tfc in tfcs:
            self._cluster_status(tfc, pools, updating=tfc["metadata"]["name"] in changed_pools)

    # ------------------------------------------------------------------ writes

    def _guard(self, what: str, fn: Callable[[], Obj | None], before: Obj | None) -> Obj | None:
        try:
            after = fn()
        except ApiError as e:
            # Someone else wrote first, or the object went away: look again shortly.
            log.debug("controller simulator: %s: %s", what, e)
            self._wake.append(self.clock.now() + timedelta(seconds=0.05))
            return None
        if after is None or _rv(after) != _rv(before):
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
        if last is not None and _deleting(last):
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

    # ------------------------------------------------------------------ controller Deployment

    def _controllers(self, now: datetime) -> tuple[bool, str, str]:
        """(a controller replica is ready, the running controller image, its namespace)."""
        ready_any = False
        image = ""
        namespace = DEFAULT_OPERATOR_NAMESPACE
        for dep in self.cache.list("apps/v1", "Deployment", labels=CONTROLLER_SELECTOR):
            meta = dep["metadata"]
            key = (meta.get("namespace", ""), meta["name"])
            namespace = key[0] or namespace
            if self.config.real_server:
                if _rolled_out(dep):  # by the real Deployment controller
                    self._running_image[key] = _container_image(dep)
            elif self.config.manage_controller_deployment:
                self._controller_readiness(dep, now)
                dep = self.cache.get("apps/v1", "Deployment", key[0], key[1]) or dep
            status = dep.get("status") or {}
            if int(status.get("readyReplicas") or 0) > 0:
                ready_any = True
                image = self._running_image.get(key) or _container_image(dep)
        return ready_any, image, namespace

    def _controller_readiness(self, dep: Obj, now: datetime) -> None:
        meta = dep["metadata"]
        gen = int(meta.get("generation") or 1)
        key = (meta.get("namespace", ""), meta["name"])
        if self.kubelet is not None:
            self.kubelet.exclude("Deployment", key[0], key[1])
        replicas = int((dep.get("spec") or {}).get("replicas", 1))
        old = dep.get("status") or {}
        if _rolled_out(dep):
            # Rolled out (by us, or by the emulator's kubelet before we took over).
            self._running_image[key] = _container_image(dep)
            self._controller_pods(dep, now)
            return
        seen = self._deploy_seen.setdefault((*key, gen), now)
        due = seen + timedelta(seconds=self.config.controller_ready_delay)
        pullable = _container_image(dep) not in self.config.unpullable_images
        done = pullable and now >= due
        if done:
            self._running_image[key] = _container_image(dep)
            self._replica_set(dep)
            self._controller_pods(dep, now)
            ready = updated = replicas
        else:
            if pullable:
                self._wake.append(due)
            # The old ReplicaSet's pods stay ready until the new ones are (RollingUpdate).
            ready = min(int(old.get("readyReplicas") or 0), replicas)
            updated = 0
        core = {
            "observedGeneration": gen,
            "replicas": max(replicas, ready),
            "updatedReplicas": updated,
            "readyReplicas": ready,
            "availableReplicas": ready,
        }
        if replicas - ready > 0:
            core["unavailableReplicas"] = replicas - ready
        core = {k: v for k, v in core.items() if v or k == "observedGeneration"}
        old_core = {k: v for k, v in old.items() if k != "conditions"}
        if old_core == core and old.get("conditions"):
            return
        stamp = format_time(now).split(".")[0] + "Z"
        available = ready >= replicas or (ready > 0 and replicas > 0)
        conditions = [
            {
                "type": "Available",
                "status": "True" if available else "False",
                "reason": "MinimumReplicasAvailable" if available else "MinimumReplicasUnavailable",
                "message": "Deployment has minimum availability."
                if available
                else "Deployment does not have minimum availability.",
                "lastUpdateTime": stamp,
                "lastTransitionTime": stamp,
            },
            {
                "type": "Progressing",
                "status": "True",
                "reason": "NewReplicaSetAvailable" if done else "ReplicaSetUpdated",
                "message": f'ReplicaSet "{meta["name"]}" '
                + ("has successfully progressed." if done else "is progressing."),
                "lastUpdateTime": stamp,
                "lastTransitionTime": stamp,
            },
        ]
        self._set_status(dep, {**core, "conditions": conditions})

    def _controller_pods(self, dep: Obj, now: datetime) -> None:
        """One Running Pod per replica of the rolled-out ReplicaSet, the older ones' Pods
        deleted (controller_pods.py); a cluster-agent container's log from agent.py."""
        meta = dep["metadata"]
        spec = dep.get("spec") or {}
        template = spec.get("template") or {}
        owned = [
            rs
            for rs in self.cache.list("apps/v1", "ReplicaSet", meta["namespace"])
            if any(r.get("uid") == meta["uid"] for r in rs["metadata"].get("ownerReferences") or [])
        ]
        rs, missing, delete = controller_pods.plan(
            owned,
            f"{meta['name']}-{template_hash(template)}",
            int(spec.get("replicas", 1)),
            self.cache.list("v1", "Pod", meta["namespace"]),
            rolled_out=True,
        )
        for pod in delete:
            self._delete(pod)
        if rs is None:
            return
        container = agent.agent_container(template.get("spec") or {})
        for _ in range(missing):
            annotations: dict[str, str] = {}
            if container is not None:
                annotations[agent.ANNOTATION] = agent.agent_log(
                    container,
                    meta["namespace"],
                    read_secret=self._read_secret,
                    console_tokens=self.config.console_tokens,
                    now=now,
                )
            self._create(controller_pods.new_pod(rs, now, annotations=annotations))

    def _read_secret(self, namespace: str, name: str) -> Obj | None:
        try:
            return self.store.get("v1", "Secret", namespace, name)
        except ApiError as e:
            log.debug("controller simulator: Secret %s/%s: %s", namespace, name, e.reason)
            return None

    def set_console_tokens(self, tokens: frozenset[str] | None) -> None:
        """The enroll tokens the console accepts from now on (``SimConfig.console_tokens``;
        None: any non-empty one). Controller pods made later log by it; running ones keep
        their log, as a connected agent stays connected."""
        with self._lock:
            self.config = dataclasses.replace(self.config, console_tokens=tokens)
        self._kick.set()

    def _replica_set(self, dep: Obj) -> None:
        """The new ReplicaSet, ready; older ones scaled to 0 (helm 3's legacy --wait needs it)."""
        meta = dep["metadata"]
        spec = dep.get("spec") or {}
        template = copy.deepcopy(spec.get("template") or {})
        h = template_hash(template)
        template.setdefault("metadata", {}).setdefault("labels", {})["pod-template-hash"] = h
        selector = copy.deepcopy(spec.get("selector") or {})
        selector.setdefault("matchLabels", {})["pod-template-hash"] = h
        replicas = int(spec.get("replicas", 1))
        name = f"{meta['name']}-{h}"
        owned = [
            rs
            for rs in self.cache.list("apps/v1", "ReplicaSet", meta["namespace"])
            if any(r.get("uid") == meta["uid"] for r in rs["metadata"].get("ownerReferences") or [])
        ]
        revisions = [
            int(_annotations(rs).get("deployment.kubernetes.io/revision", "0") or 0) for rs in owned
        ]
        for rs in owned:
            if rs["metadata"]["name"] != name and (rs.get("spec") or {}).get("replicas"):
                new = copy.deepcopy(rs)
                new["spec"]["replicas"] = 0
                self._update(new)
                self._set_status(new, {"replicas": 0, "observedGeneration": 1})
        if any(rs["metadata"]["name"] == name for rs in owned):
            return
        self._create(
            {
                "apiVersion": "apps/v1",
                "kind": "ReplicaSet",
                "metadata": {
                    "name": name,
                    "namespace": meta["namespace"],
                    "labels": dict(template["metadata"]["labels"]),
                    "annotations": {
                        "deployment.kubernetes.io/revision": str(1 + max(revisions, default=0))
                    },
                    "ownerReferences": [_owner(dep, controller=True)],
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
        )

    # ------------------------------------------------------------------ TFC → GPUPools

    def _reconcile_cluster(self, tfc: Obj) -> bool:
        """Derive the GPUPools; True if any was created, replaced or deleted."""
        if _deleting(tfc):
            return False
        name = tfc["metadata"]["name"]
        wanted: dict[str, Obj] = {}
        for entry in (tfc.get("spec") or {}).get("gpuPools") or []:
            wanted[f"{name}-{entry['name']}"] = entry
        owned = {
            p["metadata"]["name"]: p
            for p in self.cache.list(TF, "GPUPool", labels={f"{DOMAIN}/managed-by": name})
        }
        changed = False
        for pool_name, entry in wanted.items():
            template = entry.get("specTemplate") or {}
            current = owned.get(pool_name)
            if current is None:
                labels = {**_labels(tfc), f"{DOMAIN}/managed-by": name}
                pool = {
                    "apiVersion": TF,
                    "kind": "GPUPool",
                    "metadata": {
                        "name": pool_name,
                        "labels": labels,
                        "annotations": {
                            f"{DOMAIN}/is-default-pool": str(bool(entry.get("isDefault"))).lower()
                        },
                        "ownerReferences": [_owner(tfc, controller=True)],
                    },
                    "spec": copy.deepcopy(template),
                    "status": {"phase": "Pending"},
                }
                changed |= self._create(pool) is not None
            elif current.get("spec") != template:
                # R11: a GPUPool's spec is the template's; direct edits are reverted.
                new = copy.deepcopy(current)
                new["spec"] = copy.deepcopy(template)
                changed |= self._update(new) is not None
        for pool_name, pool in owned.items():
            if pool_name not in wanted and not _deleting(pool):
                self._delete(pool)
                changed = True
        return changed

    def _cluster_status(self, tfc: Obj, pools: list[Obj], *, updating: bool) -> None:
        if _deleting(tfc):
            return
        name = tfc["metadata"]["name"]
        mine = [p for p in pools if _labels(p).get(f"{DOMAIN}/managed-by") == name]
        ready = sorted(p["metadata"]["name"] for p in mine if _phase(p) == "Running")
        not_ready = sorted(p["metadata"]["name"] for p in mine if _phase(p) != "Running")
        expected = len((tfc.get("spec") or {}).get("gpuPools") or [])
        running = not updating and len(mine) == expected and not not_ready
        old = tfc.get("status") or {}
        status = dict(old)
        status.update(
            {
                "phase": "Running" if running else "Updating",
                "totalPools": len(mine),
                "totalNodes": sum(
                    int((p.get("status") or {}).get("totalNodes") or 0) for p in mine
                ),
                "totalGPUs": sum(int((p.get("status") or {}).get("totalGPUs") or 0) for p in mine),
                "readyGPUPools": ready,
                "notReadyGPUPools": not_ready,
            }
        )
        self._set_status(tfc, status)

    # ------------------------------------------------------------------ machines

    def _ensure_machines(self, pool: Obj) -> None:
        """The simulated Nodes of a pool and their GPUNodes (labels as node_controller.go)."""
        pool_name = pool["metadata"]["name"]
        short = _short_pool_name(pool)
        count = self.config.nodes_for(short)
        nodes = {
            n["metadata"]["name"]: n
            for n in self.cache.list("v1", "Node", labels={POOL_LABEL: pool_name})
        }
        for index in range(count):
            node_name = self.config.node_name_template.format(pool=pool_name, index=index)
            if node_name not in nodes:
                created = self._create(_node(node_name, pool_name, self.config.gpus_per_node))
                if created is not None:
                    nodes[node_name] = created
        for node_name in sorted(nodes):
            if self.cache.get(TF, "GPUNode", None, node_name) is None:
                self._create(
                    {
                        "apiVersion": TF,
                        "kind": "GPUNode",
                        "metadata": {
                            "name": node_name,
                            "labels": {
                                f"{DOMAIN}/managed-by": pool_name,
                                f"{DOMAIN}/pool-{pool_name}": "true",
                                f"{DOMAIN}/hardware-vendor": "NVIDIA",
                            },
                            "ownerReferences": [_owner(pool, controller=True)],
                        },
                        "spec": {"manageMode": "AutoSelect"},
                        "status": {
                            "phase": "Pending",
                            "totalGPUs": self.config.gpus_per_node,
                            "managedGPUs": self.config.gpus_per_node,
                        },
                    }
                )

    # ------------------------------------------------------------------ GPUNode → hypervisor pod

    def _reconcile_gpunodes(self, pools: list[Obj], namespace: str, code: str) -> None:
        by_pool = {p["metadata"]["name"]: p for p in pools}
        pods = {
            p["metadata"]["name"]: p
            for p in self.cache.list(
                "v1", "Pod", namespace, labels={f"{DOMAIN}/component": "hypervisor"}
            )
        }
        wants: dict[str, str] = {}
        for gpunode in self.cache.list(TF, "GPUNode"):
            if _deleting(gpunode):
                continue
            pool = by_pool.get(_labels(gpunode).get(f"{DOMAIN}/managed-by", ""))
            if pool is None:
                continue
            node_name = gpunode["metadata"]["name"]
            spec = pool.get("spec") or {}
            pool_name = pool["metadata"]["name"]
            if pool_name not in wants:  # one hash per pool, not per node
                wants[pool_name] = hashing.node_hypervisor_hash(spec, controller_image=code)
            want = wants[pool_name]
            pod = pods.get(hashing.hypervisor_pod_name(node_name, self._pod_prefix))
            phase = _phase(gpunode)
            if pod is not None and not _deleting(pod) and phase != "Running":
                stopped = (pod.get("status") or {}).get("phase") in ("Failed", "Succeeded")
                if stopped or _labels(pod).get(f"{DOMAIN}/pod-template-hash") != want:
                    self._delete(pod)
                    pod = None
            if pod is None:
                node = self.cache.get("v1", "Node", None, node_name)
                if node is not None:
                    pod = self._create(self._hypervisor_pod(pool, gpunode, node, namespace, want))
            ready = pod is not None and _pod_ready(pod)
            if ready:
                self._had_ready.add(node_name)
            status = dict(gpunode.get("status") or {})
            status["phase"] = "Running" if ready else "Pending"
            if pod is not None:
                image = (pod["spec"]["containers"] or [{}])[0].get("image", "")
                state = "Running" if ready else "Pending"
                status["hypervisorStatus"] = {
                    "hypervisorState": state,
                    "hypervisorVersion": image.rpartition(":")[2],
                }
            self._set_status(gpunode, status)

    def _hypervisor_pod(self, pool: Obj, gpunode: Obj, node: Obj, namespace: str, want: str) -> Obj:
        pool_name = pool["metadata"]["name"]
        spec = pool.get("spec") or {}
        node_name = gpunode["metadata"]["name"]
        pod_spec = hashing.hypervisor_pod_spec(spec)
        self._ensure_account(namespace, str(pod_spec.get("serviceAccountName") or "default"))
        mode = hashing.isolation_policy(spec)["defaultIsolationMode"]
        main = pod_spec["containers"][0]
        main["args"] = [f"--isolation-mode={mode}", "--isolation-policy=static"]
        pod_spec["nodeName"] = node_name
        pod_spec["dnsPolicy"] = "ClusterFirstWithHostNet"
        pod_spec["tolerations"] = [{"key": f"{DOMAIN}/used-by", "operator": "Exists"}]
        template_meta = (
            ((spec.get("componentConfig") or {}).get("hypervisor") or {}).get("podTemplate") or {}
        ).get("metadata") or {}
        labels = {
            **(template_meta.get("labels") or {}),
            f"{DOMAIN}/pool-{pool_name}": "true",
            f"{DOMAIN}/pod-template-hash": want,
            f"{DOMAIN}/component": "hypervisor",
        }
        never = node_name in self.config.broken_nodes and node_name in self._had_ready
        return self._sim_pod(
            name=hashing.hypervisor_pod_name(node_name, self._pod_prefix),
            namespace=namespace,
            labels=labels,
            annotations=dict(template_meta.get("annotations") or {}),
            spec=pod_spec,
            delay=self.config.hypervisor_ready_delay,
            owners=[_owner(gpunode, controller=True), _owner(node, controller=False)],
            never_ready=never,
        )

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
        ann = _annotations(pod)
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

    # ------------------------------------------------------------------ the kubelet's part

    def _kubelet(self, now: datetime) -> None:
        real = self.config.real_server
        for pod in self.cache.list("v1", "Pod", labels=None if real else {SIMULATED: "true"}):
            meta = pod["metadata"]
            if _deleting(pod):
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
            due = None if SIMULATED in _labels(pod) else self._foreign_due(pod, now)
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
            controller = all(_labels(pod).get(k) == v for k, v in CONTROLLER_SELECTOR.items())
            delay = self.config.controller_ready_delay if controller else 0.0
            self._started[uid] = now + timedelta(seconds=delay)
        return self._started[uid]

    # ------------------------------------------------------------------ workloads and clients

    def _pool_for(self, pools: list[Obj], short: str) -> Obj | None:
        for pool in pools:
            if _short_pool_name(pool) == short:
                return pool
        return None

    def _reconcile_workloads(self, pools: list[Obj], code: str) -> None:
        for ws in self.config.workloads:
            pool = self._pool_for(pools, ws.pool)
            if pool is not None:
                self._ensure_workload(ws, pool)
        by_pool = {p["metadata"]["name"]: p for p in pools}
        for tfw in self.cache.list(TF, "TensorFusionWorkload"):
            pool = by_pool.get(_labels(tfw).get(f"{DOMAIN}/gpupool", ""))
            if pool is None or _deleting(tfw):
                continue
            self._reconcile_workload(tfw, pool, code)

    def _ensure_workload(self, ws: WorkloadSpec, pool: Obj) -> None:
        self._ensure_namespace(ws.namespace)
        if self.cache.get(TF, "TensorFusionWorkload", ws.namespace, ws.name) is not None:
            return
        pool_name = pool["metadata"]["name"]
        self._create(
            {
                "apiVersion": TF,
                "kind": "TensorFusionWorkload",
                "metadata": {
                    "name": ws.name,
                    "namespace": ws.namespace,
                    "labels": {f"{DOMAIN}/gpupool": pool_name},
                },
                "spec": {"poolName": pool_name, "replicas": ws.replicas, "gpuCount": 1},
            }
        )

    def _reconcile_workload(self, tfw: Obj, pool: Obj, code: str) -> None:
        meta = tfw["metadata"]
        name, namespace = meta["name"], meta["namespace"]
        status = dict(tfw.get("status") or {})
        stamped = str(status.get("podTemplateHash") or "")
        if not stamped:
            # Cleared by the worker rollout (or new): re-stamp from the current pool spec.
            pool_worker = hashing.pool_worker_hash(pool.get("spec") or {}, controller_image=code)
            stamped = hashing.workload_hash(pool_worker, tfw.get("spec") or {})
        pods = [
            p
            for p in self.cache.list("v1", "Pod", namespace, labels={f"{DOMAIN}/workload": name})
            if not _deleting(p)
        ]
        keep = []
        for pod in pods:
            if _labels(pod).get(f"{DOMAIN}/pod-template-hash") != stamped:
                self._delete(pod)
            else:
                keep.append(pod)
        replicas = int((tfw.get("spec") or {}).get("replicas") or 0)
        spec = pool.get("spec") or {}
        for _ in range(replicas - len(keep)):
            pod_spec = hashing.worker_pod_spec(spec)
            created = self._create(
                self._sim_pod(
                    name=f"{name}-{stamped[:5]}-{secrets.token_hex(3)}",
                    namespace=namespace,
                    labels={
                        f"{DOMAIN}/component": "worker",
                        f"{DOMAIN}/workload": name,
                        f"{DOMAIN}/pod-template-hash": stamped,
                    },
                    annotations={},
                    spec=pod_spec,
                    delay=self.config.worker_ready_delay,
                    owners=[_owner(tfw, controller=True)],
                )
            )
            if created is not None:
                keep.append(created)
        ready = sum(1 for p in keep if _pod_ready(p))
        status.update(
            {
                "podTemplateHash": stamped,
                "workerCount": len(keep),
                "readyWorkers": ready,
                "phase": "Running" if ready >= replicas else "Pending",
            }
        )
        self._set_status(tfw, status)

    def _reconcile_clients(self, pools: list[Obj], code: str) -> None:
        """The owners (a Deployment, say) of client-injected app pods: recreate what is gone.

        New pods get the pool's current client hash, as the webhook stamps it (facts §3.6).
        """
        for ws in self.config.workloads:
            if ws.clients <= 0:
                continue
            pool = self._pool_for(pools, ws.pool)
            if pool is None:
                continue
            self._ensure_namespace(ws.namespace)
            owner = f"{ws.name}-app"
            pods = [
                p
                for p in self.cache.list("v1", "Pod", ws.namespace, labels={OWNER_LABEL: owner})
                if not _deleting(p)
            ]
            spec = pool.get("spec") or {}
            client = hashing.pool_client_hash(spec, controller_image=code)
            image = ((spec.get("componentConfig") or {}).get("client") or {}).get("image") or ""
            for _ in range(ws.clients - len(pods)):
                self._create(
                    self._sim_pod(
                        name=f"{owner}-{secrets.token_hex(3)}",
                        namespace=ws.namespace,
                        labels={
                            OWNER_LABEL: owner,
                            f"{DOMAIN}/enabled": "true",
                            f"{DOMAIN}/gpupool": pool["metadata"]["name"],
                            f"{DOMAIN}/component": "client",
                            f"{DOMAIN}/pod-template-hash": client,
                        },
                        annotations={
                            f"{DOMAIN}/gpupool": pool["metadata"]["name"],
                            sessions.SELECTED_WORKLOAD: ws.name,
                        },
                        spec={
                            "initContainers": [{"name": "inject-lib", "image": image}],
                            "containers": [{"name": "app", "image": "sandbox/app:1"}],
                        },
                        delay=self.config.client_ready_delay,
                        owners=[],
                    )
                )

    def _reconcile_connections(self) -> None:
        """One TensorFusionConnection per remote client pod, its phase following the pod and
        the workload's ready workers; one whose pod is gone is deleted (simulator/sessions.py).
        """
        clients = {
            (p["metadata"]["namespace"], p["metadata"]["name"]): p
            for p in self.cache.list("v1", "Pod", labels={f"{DOMAIN}/component": "client"})
            if sessions.is_remote_client(p)
        }
        connections = {
            (c["metadata"]["namespace"], c["metadata"]["name"]): c
            for c in self.cache.list(TF, sessions.KIND)
        }
        for key, conn in connections.items():
            if _deleting(conn):
                continue
            owned = any(
                r.get("kind") == "Pod" for r in conn["metadata"].get("ownerReferences") or []
            )
            client = str((conn.get("spec") or {}).get("clientPod") or "")
            if owned and (key[0], client) not in clients:
                self._delete(conn)  # the garbage collector's part, should it lag
        idle_workloads = {(w.namespace, w.name) for w in self.config.workloads if not w.sessions}
        for key, pod in clients.items():
            found = connections.get(key)
            if found is not None and _deleting(found):
                continue
            if found is None and not _deleting(pod):
                idle = (key[0], sessions.workload_of(pod)) in idle_workloads
                found = self._create(sessions.connection_for(pod, idle=idle))
            live = found
            if live is None:
                continue
            workload = str(live["spec"]["workloadName"])
            workers = self.cache.list(
                "v1",
                "Pod",
                key[0],
                labels={f"{DOMAIN}/component": "worker", sessions.WORKLOAD_LABEL: workload},
            )
            ready = [w["metadata"]["name"] for w in workers if _pod_ready(w) and not _deleting(w)]
            status = sessions.connection_status(
                live, client_deleting=_deleting(pod), ready_workers=ready
            )
            self._set_status(live, status)

    # ------------------------------------------------------------------ GPUPool: rollouts, phase

    def _reconcile_pool(self, pool: Obj, namespace: str, now: datetime, code: str) -> None:
        pool_name = pool["metadata"]["name"]
        spec = pool.get("spec") or {}
        status = copy.deepcopy(pool.get("status") or {})
        comp_status: Obj = dict(status.get("componentStatus") or {})
        annotations = _annotations(pool)
        ann_changes: dict[str, str | None] = {}
        patch_status = False
        min_requeue = timedelta(seconds=self.config.min_batch_requeue)
        if spec.get("componentConfig"):
            for component in Component:
                new_hash, inventory, apply = self._component(component, pool, namespace, code)
                current_ann = {
                    k: v for k, v in {**annotations, **ann_changes}.items() if v is not None
                }
                decision = decide(
                    component,
                    status=comp_status,
                    annotations=current_ann,
                    new_hash=new_hash,
                    policy=Policy.of(spec, component),
                    inventory=inventory,
                    now=now,
                    min_requeue=min_requeue,
                )
                log.debug("pool %s %s: %s", pool_name, component, decision.note)
                if decision.wake_at is not None:
                    self._wake.append(decision.wake_at)
                ann_changes.update(decision.annotations)
                if decision.status is not None:
                    _apply_component_status(comp_status, component, decision)
                    patch_status = True
                if decision.update:
                    apply(decision.update)
        if ann_changes:
            merged = {**annotations, **ann_changes}
            merged = {k: v for k, v in merged.items() if v is not None}
            if merged != annotations:
                fresh = self.cache.get(TF, "GPUPool", None, pool_name)
                if fresh is not None:
                    patch: Obj = {"metadata": {"annotations": ann_changes}}
                    self._guard(
                        f"annotate GPUPool {pool_name}",
                        lambda: self.store.patch_merge(
                            TF, "GPUPool", None, pool_name, patch, manager=MANAGER
                        ),
                        fresh,
                    )
        # Phase: Running when every GPUNode of the pool is (facts §3.9).
        gpunodes = self.cache.list(TF, "GPUNode", labels={f"{DOMAIN}/managed-by": pool_name})
        ready = sum(1 for n in gpunodes if _phase(n) == "Running")
        if gpunodes:
            phase = "Running" if ready == len(gpunodes) else "Updating"
        else:
            phase = "Running" if _min_resources_zero(spec) else "Updating"
        if patch_status:
            status["componentStatus"] = comp_status
        status.update(
            {
                "phase": phase,
                "totalNodes": len(gpunodes),
                "readyNodes": ready,
                "notReadyNodes": len(gpunodes) - ready,
                "totalGPUs": sum(
                    int((n.get("status") or {}).get("totalGPUs") or 0) for n in gpunodes
                ),
            }
        )
        fresh = self.cache.get(TF, "GPUPool", None, pool_name)
        if fresh is not None:
            self._set_status(fresh, status)

    def _component(
        self, component: Component, pool: Obj, namespace: str, code: str
    ) -> tuple[str, Inventory, Callable[[tuple[str, ...]], None]]:
        pool_name = pool["metadata"]["name"]
        spec = pool.get("spec") or {}
        if component is Component.HYPERVISOR:
            revisions = _json_annotation(
                _annotations(pool).get(f"{DOMAIN}/provider-config-revisions")
            )
            new_hash = hashing.pool_hypervisor_hash(spec, revisions, controller_image=code)
            node_hash = hashing.node_hypervisor_hash(spec, controller_image=code)
            nodes = [
                n
                for n in self.cache.list(
                    TF, "GPUNode", labels={f"{DOMAIN}/pool-{pool_name}": "true"}
                )
                if not _deleting(n)
            ]
            pods = {
                p["metadata"]["name"]: p
                for p in self.cache.list(
                    "v1", "Pod", namespace, labels={f"{DOMAIN}/component": "hypervisor"}
                )
            }
            recheck = any(_phase(n) in ("", "Pending") for n in nodes)
            outdated = []
            for n in sorted(nodes, key=_age_key):
                pod = pods.get(hashing.hypervisor_pod_name(n["metadata"]["name"], self._pod_prefix))
                if pod is None or _labels(pod).get(f"{DOMAIN}/pod-template-hash") != node_hash:
                    outdated.append(n["metadata"]["name"])
            inventory = Inventory(len(nodes), len(nodes) - len(outdated), recheck, tuple(outdated))

            def select_nodes(names: tuple[str, ...]) -> None:
                for name in names:
                    node = self.cache.get(TF, "GPUNode", None, name)
                    if node is not None:
                        self._set_status(node, {**(node.get("status") or {}), "phase": "Pending"})

            return new_hash, inventory, select_nodes

        if component is Component.WORKER:
            pool_worker = hashing.pool_worker_hash(spec, controller_image=code)
            tfws = [
                w
                for w in self.cache.list(
                    TF, "TensorFusionWorkload", labels={f"{DOMAIN}/gpupool": pool_name}
                )
                if not _deleting(w)
            ]
            recheck = any(not (w.get("status") or {}).get("podTemplateHash") for w in tfws)
            outdated = [
                f"{w['metadata']['namespace']}/{w['metadata']['name']}"
                for w in sorted(tfws, key=_age_key)
                if (w.get("status") or {}).get("podTemplateHash")
                != hashing.workload_hash(pool_worker, w.get("spec") or {})
            ]
            inventory = Inventory(len(tfws), len(tfws) - len(outdated), recheck, tuple(outdated))

            def clear_hashes(names: tuple[str, ...]) -> None:
                for ref in names:
                    ns, _, name = ref.partition("/")
                    tfw = self.cache.get(TF, "TensorFusionWorkload", ns, name)
                    if tfw is not None:
                        status = {**(tfw.get("status") or {})}
                        status.pop("podTemplateHash", None)
                        self._set_status(tfw, status)

            return pool_worker, inventory, clear_hashes

        new_hash = hashing.pool_client_hash(spec, controller_image=code)
        clients = self.cache.list(
            "v1",
            "Pod",
            None,
            labels={f"{DOMAIN}/enabled": "true", f"{DOMAIN}/gpupool": pool_name},
        )
        recheck = any(_deleting(p) for p in clients)
        outdated = [
            f"{p['metadata']['namespace']}/{p['metadata']['name']}"
            for p in sorted(clients, key=_age_key)
            if _labels(p).get(f"{DOMAIN}/pod-template-hash") != new_hash
        ]
        inventory = Inventory(len(clients), len(clients) - len(outdated), recheck, tuple(outdated))

        def delete_pods(names: tuple[str, ...]) -> None:
            for ref in names:
                ns, _, name = ref.partition("/")
                pod = self.cache.get("v1", "Pod", ns, name)
                if pod is not None:
                    self._delete(pod)

        return new_hash, inventory, delete_pods


# ---------------------------------------------------------------------- small pure helpers


def _phase(obj: Obj) -> str:
    return str((obj.get("status") or {}).get("phase") or "")


def _rolled_out(dep: Obj) -> bool:
    gen = int(dep["metadata"].get("generation") or 1)
    replicas = int((dep.get("spec") or {}).get("replicas", 1))
    status = dep.get("status") or {}
    return (
        int(status.get("observedGeneration") or 0) == gen
        and int(status.get("updatedReplicas") or 0) == replicas
        and int(status.get("readyReplicas") or 0) == replicas
    )


def _container_image(dep: Obj) -> str:
    containers = (((dep.get("spec") or {}).get("template") or {}).get("spec") or {}).get(
        "containers"
    ) or []
    return str(containers[0].get("image", "")) if containers else ""


def _short_pool_name(pool: Obj) -> str:
    """The TFC's name for a pool: GPUPool ``<cluster>-<pool>`` minus the cluster prefix."""
    name = str(pool["metadata"]["name"])
    cluster = _labels(pool).get(f"{DOMAIN}/managed-by", "")
    prefix = f"{cluster}-"
    return name[len(prefix) :] if cluster and name.startswith(prefix) else name


def _min_resources_zero(spec: Obj) -> bool:
    mins = (spec.get("capacityConfig") or {}).get("minResources") or {}
    return all(str(mins.get(k, "0")) in ("0", "") for k in ("tflops", "vram"))


def _json_annotation(text: str | None) -> Obj:
    if not text:
        return {}
    try:
        value = json.loads(text)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _apply_component_status(comp_status: Obj, component: Component, decision: Decision) -> None:
    values = decision.status or {}
    comp_status[component.value] = values["hash"]
    for key, field in (("progress", component.progress_field), ("synced", component.synced_field)):
        if key in values:
            comp_status[field] = values[key]
        else:
            comp_status.pop(field, None)  # omitempty: 0 and false are absent


def _node(name: str, pool: str, gpus: int) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/hostname": name,
                "nvidia.com/gpu.present": "true",
                POOL_LABEL: pool,
            },
        },
        "spec": {},
        "status": {
            "capacity": {"nvidia.com/gpu": str(gpus), "cpu": "64", "memory": "512Gi"},
            "allocatable": {"nvidia.com/gpu": str(gpus), "cpu": "64", "memory": "512Gi"},
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
            "nodeInfo": {"kubeletVersion": "v1.33.0"},
        },
    }
