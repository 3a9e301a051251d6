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

One reconciler a module, as the real controller has one a kind, all sharing the watch-fed
cache, the write guard and the wake-up list (reconcile_core.py): cluster_reconciler.py
(TensorFusionCluster), pool_reconciler.py (GPUPool rollouts and phase), node_reconciler.py
(Nodes, GPUNodes, hypervisor pods), workload_reconciler.py (workers, client pods,
connections), deployment_reconciler.py (the controller Deployment) and pod_lifecycle.py (the
kubelet's and scheduler's part). ``ControllerSim`` is all of them and runs them in one
``step()``, in the order below. The pure parts live beside them (rollout.py, hashing.py,
kubelet.py).
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from datetime import datetime
from typing import Self

from gitopsbot.sandbox.service import Service
from gitopsbot.sandbox.simulator import hashing, objects
from gitopsbot.sandbox.simulator.clock import Clock, SystemClock
from gitopsbot.sandbox.simulator.cluster_reconciler import ClusterReconciler
from gitopsbot.sandbox.simulator.config import SimConfig, WorkloadSpec
from gitopsbot.sandbox.simulator.deployment_reconciler import DeploymentReconciler
from gitopsbot.sandbox.simulator.informer import Informer
from gitopsbot.sandbox.simulator.node_reconciler import NodeReconciler
from gitopsbot.sandbox.simulator.pod_lifecycle import PodLifecycle
from gitopsbot.sandbox.simulator.pool_reconciler import PoolReconciler
from gitopsbot.sandbox.simulator.reconcile_core import (
    CONTROLLER_SELECTOR,
    POOL_LABEL,
    TF,
    WATCHED,
    WorkloadStatusOwner,
)
from gitopsbot.sandbox.simulator.store_port import StorePort
from gitopsbot.sandbox.simulator.workload_reconciler import WorkloadReconciler

log = logging.getLogger(__name__)

__all__ = ["CONTROLLER_SELECTOR", "POOL_LABEL", "WATCHED", "ControllerSim", "WorkloadStatusOwner"]


class ControllerSim(
    ClusterReconciler,
    PoolReconciler,
    NodeReconciler,
    WorkloadReconciler,
    DeploymentReconciler,
    PodLifecycle,
    Service,
):
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

    def start(self) -> Self:
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

    def set_console_tokens(self, tokens: frozenset[str] | None) -> None:
        """The enroll tokens the console accepts from now on (``SimConfig.console_tokens``;
        None: any non-empty one). Controller pods made later log by it; running ones keep
        their log, as a connected agent stays connected."""
        with self._lock:
            self.config = dataclasses.replace(self.config, console_tokens=tokens)
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
        pools = [p for p in self.cache.list(TF, "GPUPool") if not objects.deleting(p)]
        for pool in pools:
            self._ensure_machines(pool)
        self._reconcile_gpunodes(pools, namespace, code)
        self._reconcile_workloads(pools, code)
        self._reconcile_clients(pools, code)
        self._reconcile_connections()
        for pool in self.cache.list(TF, "GPUPool"):
            if not objects.deleting(pool):
                self._reconcile_pool(pool, namespace, now, code)
        pools = self.cache.list(TF, "GPUPool")
        for tfc in tfcs:
            self._cluster_status(tfc, pools, updating=tfc["metadata"]["name"] in changed_pools)
