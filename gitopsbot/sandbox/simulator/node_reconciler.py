"""The node reconcilers: the simulated machines (Nodes and GPUNodes, node_controller.go) and
each GPUNode's hypervisor pod and phase (gpunode_controller.go, facts §3.4).
"""

from __future__ import annotations

from gitopsbot.sandbox.simulator import hashing, objects
from gitopsbot.sandbox.simulator.reconcile_core import POOL_LABEL, TF, Obj, ReconcilerCore
from gitopsbot.sandbox.simulator.rollout import DOMAIN


class NodeReconciler(ReconcilerCore):
    """GPUPool → Nodes and GPUNodes; GPUNode → hypervisor pod and phase."""

    _had_ready: set[str]

    def _ensure_machines(self, pool: Obj) -> None:
        """The simulated Nodes of a pool and their GPUNodes (labels as node_controller.go)."""
        pool_name = pool["metadata"]["name"]
        short = objects.short_pool_name(pool)
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
                            "ownerReferences": [objects.owner_ref(pool, controller=True)],
                        },
                        "spec": {"manageMode": "AutoSelect"},
                        "status": {
                            "phase": "Pending",
                            "totalGPUs": self.config.gpus_per_node,
                            "managedGPUs": self.config.gpus_per_node,
                        },
                    }
                )

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
            if objects.deleting(gpunode):
                continue
            pool = by_pool.get(objects.labels_of(gpunode).get(f"{DOMAIN}/managed-by", ""))
            if pool is None:
                continue
            node_name = gpunode["metadata"]["name"]
            spec = pool.get("spec") or {}
            pool_name = pool["metadata"]["name"]
            if pool_name not in wants:  # one hash per pool, not per node
                wants[pool_name] = hashing.node_hypervisor_hash(spec, controller_image=code)
            want = wants[pool_name]
            pod = pods.get(hashing.hypervisor_pod_name(node_name, self._pod_prefix))
            phase = objects.phase(gpunode)
            if pod is not None and not objects.deleting(pod) and phase != "Running":
                stopped = (pod.get("status") or {}).get("phase") in ("Failed", "Succeeded")
                if stopped or objects.labels_of(pod).get(f"{DOMAIN}/pod-template-hash") != want:
                    self._delete(pod)
                    pod = None
            if pod is None:
                node = self.cache.get("v1", "Node", None, node_name)
                if node is not None:
                    pod = self._create(self._hypervisor_pod(pool, gpunode, node, namespace, want))
            ready = pod is not None and objects.pod_ready(pod)
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
            owners=[
                objects.owner_ref(gpunode, controller=True),
                objects.owner_ref(node, controller=False),
            ],
            never_ready=never,
        )


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
