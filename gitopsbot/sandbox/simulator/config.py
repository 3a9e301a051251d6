"""What the simulated cluster looks like and how its parts misbehave (``SimConfig``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class WorkloadSpec:
    """A TensorFusionWorkload the simulator creates in ``pool`` (the TFC's pool name, e.g.
    ``shared``), with ``replicas`` worker pods and ``clients`` client-injected app pods that an
    owner (played by the simulator) recreates when the client rollout deletes them."""

    name: str
    pool: str
    namespace: str = "default"
    replicas: int = 1
    clients: int = 0
    # False: the workload is idle; the connections of its client pods made from now on start
    # with their session ended (``sessions.end_session``), as an app that opens none.
    sessions: bool = True


@dataclass(frozen=True, slots=True)
class SimConfig:
    # Nodes per pool; ``pool_nodes`` overrides by the TFC's pool name ("shared").
    nodes_per_pool: int = 3
    pool_nodes: Mapping[str, int] = field(default_factory=dict)
    # Node names; {pool} is the GPUPool name (<cluster>-<pool>), {index} counts from 0.
    node_name_template: str = "{pool}-gpu-{index:03d}"
    gpus_per_node: int = 8
    # Seconds from a pod's creation to Running and Ready.
    hypervisor_ready_delay: float = 0.0
    worker_ready_delay: float = 0.0
    client_ready_delay: float = 0.0
    # Seconds from a controller Deployment change to its new replicas being ready.
    controller_ready_delay: float = 0.0
    # Nodes whose replacement hypervisor (any pod after the first that became ready) never
    # becomes Ready: the rollout stalls on them, as the real one does (no timeout).
    broken_nodes: frozenset[str] = frozenset()
    # Images that cannot be pulled: pods using them stay Pending with ErrImagePull, and a
    # controller Deployment using one never becomes ready.
    unpullable_images: frozenset[str] = frozenset()
    workloads: tuple[WorkloadSpec, ...] = ()
    # GPU canary smoke pods (simulator/smoke.py) whose node's hypervisor or whose worker
    # runs one of these images fail their GPU call: a broken GPU path on purpose.
    broken_gpu_path_images: frozenset[str] = frozenset()
    # Namespace of hypervisor pods; None: the controller Deployment's, else tensor-fusion-sys.
    operator_namespace: str | None = None
    # Set readiness on Deployments labelled app.kubernetes.io/component=controller and
    # app.kubernetes.io/name=tensor-fusion.
    manage_controller_deployment: bool = True
    # Act only while such a Deployment has a ready replica (no controller, no reconcile).
    require_controller: bool = False
    # F4: hashes cover code-level defaults, so a new controller image alone rolls components.
    hash_covers_controller_image: bool = False
    # F6: while a 2.0–2.13 controller image runs, hypervisor pods are named
    # tf-hypervisor-<node>; a newer controller creates hypervisor-<node> beside them.
    legacy_hypervisor_names: bool = False
    # The real controller requeues at least 3 s after a batch; 0 lets batchInterval rule.
    min_batch_requeue: float = 0.0
    # The store is a real API server (adapters/kube_store.py): the Deployment controller
    # writes Deployment status (manage_controller_deployment is then ignored), and the
    # simulator plays scheduler and kubelet for every pod: it binds unbound pods to a
    # sandbox Node, runs them (controller pods after controller_ready_delay, others at once)
    # and confirms their deletion.
    real_server: bool = False
    # The Node unbound pods are bound to (created when needed) on a real server.
    kubelet_node: str = "sandbox-node"
    # The enroll tokens the TensorFusion console accepts from the controller pods'
    # cluster-agent (agent.py): None accepts any non-empty token. Read when a controller pod
    # starts; ControllerSim.set_console_tokens changes it at runtime.
    console_tokens: frozenset[str] | None = None

    def nodes_for(self, pool: str) -> int:
        return int(self.pool_nodes.get(pool, self.nodes_per_pool))
