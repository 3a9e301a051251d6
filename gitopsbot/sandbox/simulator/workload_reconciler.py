"""The workload reconcilers: TensorFusionWorkload → worker pods, the owners of client-injected
app pods, and TensorFusionConnections (tensorfusionworkload_controller.go,
tensorfusionconnection_controller.go, facts §3.5–3.6; sessions.py).
"""

from __future__ import annotations

import secrets

from gitopsbot.sandbox.simulator import hashing, objects, sessions
from gitopsbot.sandbox.simulator.config import WorkloadSpec
from gitopsbot.sandbox.simulator.reconcile_core import OWNER_LABEL, TF, Obj, ReconcilerCore
from gitopsbot.sandbox.simulator.rollout import DOMAIN


class WorkloadReconciler(ReconcilerCore):
    """Workers, client app pods and their connections."""

    def _pool_for(self, pools: list[Obj], short: str) -> Obj | None:
        for pool in pools:
            if objects.short_pool_name(pool) == short:
                return pool
        return None

    def _reconcile_workloads(self, pools: list[Obj], code: str) -> None:
        for ws in self.config.workloads:
            pool = self._pool_for(pools, ws.pool)
            if pool is not None:
                self._ensure_workload(ws, pool)
        by_pool = {p["metadata"]["name"]: p for p in pools}
        for tfw in self.cache.list(TF, "TensorFusionWorkload"):
            pool = by_pool.get(objects.labels_of(tfw).get(f"{DOMAIN}/gpupool", ""))
            if pool is None or objects.deleting(tfw):
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
            if not objects.deleting(p)
        ]
        keep = []
        for pod in pods:
            if objects.labels_of(pod).get(f"{DOMAIN}/pod-template-hash") != stamped:
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
                    owners=[objects.owner_ref(tfw, controller=True)],
                )
            )
            if created is not None:
                keep.append(created)
        ready = sum(1 for p in keep if objects.pod_ready(p))
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
                if not objects.deleting(p)
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
            if objects.deleting(conn):
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
            if found is not None and objects.deleting(found):
                continue
            if found is None and not objects.deleting(pod):
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
            ready = [
                w["metadata"]["name"]
                for w in workers
                if objects.pod_ready(w) and not objects.deleting(w)
            ]
            status = sessions.connection_status(
                live, client_deleting=objects.deleting(pod), ready_workers=ready
            )
            self._set_status(live, status)
