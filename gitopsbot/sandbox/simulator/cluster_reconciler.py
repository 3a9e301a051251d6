"""The TensorFusionCluster reconciler: the cluster's GPUPools and its status
(tensorfusioncluster_controller.go, facts §3.1).
"""

from __future__ import annotations

import copy

from gitopsbot.sandbox.simulator import objects
from gitopsbot.sandbox.simulator.reconcile_core import TF, Obj, ReconcilerCore
from gitopsbot.sandbox.simulator.rollout import DOMAIN


class ClusterReconciler(ReconcilerCore):
    """TensorFusionCluster → GPUPools (spec overwritten from specTemplate, R11), and phase."""

    def _reconcile_cluster(self, tfc: Obj) -> bool:
        """Derive the GPUPools; True if any was created, replaced or deleted."""
        if objects.deleting(tfc):
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
                labels = {**objects.labels_of(tfc), f"{DOMAIN}/managed-by": name}
                pool = {
                    "apiVersion": TF,
                    "kind": "GPUPool",
                    "metadata": {
                        "name": pool_name,
                        "labels": labels,
                        "annotations": {
                            f"{DOMAIN}/is-default-pool": str(bool(entry.get("isDefault"))).lower()
                        },
                        "ownerReferences": [objects.owner_ref(tfc, controller=True)],
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
            if pool_name not in wanted and not objects.deleting(pool):
                self._delete(pool)
                changed = True
        return changed

    def _cluster_status(self, tfc: Obj, pools: list[Obj], *, updating: bool) -> None:
        if objects.deleting(tfc):
            return
        name = tfc["metadata"]["name"]
        mine = [p for p in pools if objects.labels_of(p).get(f"{DOMAIN}/managed-by") == name]
        ready = sorted(p["metadata"]["name"] for p in mine if objects.phase(p) == "Running")
        not_ready = sorted(p["metadata"]["name"] for p in mine if objects.phase(p) != "Running")
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
