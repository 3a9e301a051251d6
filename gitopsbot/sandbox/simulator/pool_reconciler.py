"""The GPUPool reconciler: the batched component rollouts per pool and the pool's phase
(gpupool_controller.go and component/, facts §3.2; the decisions are rollout.py's).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from datetime import datetime, timedelta

from gitopsbot.sandbox.simulator import hashing, objects
from gitopsbot.sandbox.simulator.reconcile_core import MANAGER, TF, Obj, ReconcilerCore, log
from gitopsbot.sandbox.simulator.rollout import (
    DOMAIN,
    Component,
    Decision,
    Inventory,
    Policy,
    decide,
)


class PoolReconciler(ReconcilerCore):
    """GPUPool → the hypervisor, worker and client rollouts (rollout.py), and phase."""

    def _reconcile_pool(self, pool: Obj, namespace: str, now: datetime, code: str) -> None:
        pool_name = pool["metadata"]["name"]
        spec = pool.get("spec") or {}
        status = copy.deepcopy(pool.get("status") or {})
        comp_status: Obj = dict(status.get("componentStatus") or {})
        annotations = objects.annotations_of(pool)
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
        ready = sum(1 for n in gpunodes if objects.phase(n) == "Running")
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
                objects.annotations_of(pool).get(f"{DOMAIN}/provider-config-revisions")
            )
            new_hash = hashing.pool_hypervisor_hash(spec, revisions, controller_image=code)
            node_hash = hashing.node_hypervisor_hash(spec, controller_image=code)
            nodes = [
                n
                for n in self.cache.list(
                    TF, "GPUNode", labels={f"{DOMAIN}/pool-{pool_name}": "true"}
                )
                if not objects.deleting(n)
            ]
            pods = {
                p["metadata"]["name"]: p
                for p in self.cache.list(
                    "v1", "Pod", namespace, labels={f"{DOMAIN}/component": "hypervisor"}
                )
            }
            recheck = any(objects.phase(n) in ("", "Pending") for n in nodes)
            outdated = []
            for n in sorted(nodes, key=objects.age_key):
                pod = pods.get(hashing.hypervisor_pod_name(n["metadata"]["name"], self._pod_prefix))
                if (
                    pod is None
                    or objects.labels_of(pod).get(f"{DOMAIN}/pod-template-hash") != node_hash
                ):
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
                if not objects.deleting(w)
            ]
            recheck = any(not (w.get("status") or {}).get("podTemplateHash") for w in tfws)
            outdated = [
                f"{w['metadata']['namespace']}/{w['metadata']['name']}"
                for w in sorted(tfws, key=objects.age_key)
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
        recheck = any(objects.deleting(p) for p in clients)
        outdated = [
            f"{p['metadata']['namespace']}/{p['metadata']['name']}"
            for p in sorted(clients, key=objects.age_key)
            if objects.labels_of(p).get(f"{DOMAIN}/pod-template-hash") != new_hash
        ]
        inventory = Inventory(len(clients), len(clients) - len(outdated), recheck, tuple(outdated))

        def delete_pods(names: tuple[str, ...]) -> None:
            for ref in names:
                ns, _, name = ref.partition("/")
                pod = self.cache.get("v1", "Pod", ns, name)
                if pod is not None:
                    self._delete(pod)

        return new_hash, inventory, delete_pods


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
