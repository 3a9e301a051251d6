"""Evaluate a pool's rollout gates: fetch what each one needs through the ports (Prometheus,
the cluster) and judge it with ``core.rollouts.gates``.

A fetch that fails (Prometheus down, a query refused, the API server erroring) or a
Prometheus gate with no Prometheus configured is an inconclusive result carrying the error
text as evidence: the caller's ``verdict`` decides between retrying and halting, so nothing
raised by an adapter leaves ``evaluate_gates``.
"""

from __future__ import annotations

from collections.abc import Sequence

from gitopsbot.core.fleet.model import ClusterSpec
from gitopsbot.core.rollouts import tf_objects as tf
from gitopsbot.core.rollouts.gates import (
    AlertsGate,
    Gate,
    GateOutcome,
    GateResult,
    KubeGate,
    PromQueryGate,
    allocation_gate,
    judge_alerts,
    judge_crashloop,
    judge_pending_gpunodes,
    judge_prom_samples,
)
from gitopsbot.errors import GitOpsBotError
from gitopsbot.ports.cluster import Cluster
from gitopsbot.ports.prometheus import Prometheus

_NO_PROMETHEUS = "no prometheus: block in rollout.yaml for this cluster"


def _inconclusive(gate: Gate, why: str) -> GateResult:
    return GateResult(gate.name, GateOutcome.INCONCLUSIVE, why)


def _one(
    gate: Gate, prometheus: Prometheus | None, cluster: Cluster, spec: ClusterSpec, pool: str
) -> GateResult:
    if isinstance(gate, KubeGate) and gate.check != "allocation-failures":
        try:
            if gate.check == "no-pending-gpunodes":
                label = f"{tf.GROUP}/pool-{tf.gpupool_name(spec, pool)}=true"
                nodes = cluster.list(tf.TF, "GPUNode", label_selector=label)
                return judge_pending_gpunodes(nodes, gate.name)
            pods = cluster.list("v1", "Pod", gate.namespace, label_selector=gate.selector or None)
            return judge_crashloop(pods, gate.name)
        except GitOpsBotError as exc:
            return _inconclusive(gate, f"{gate.check}: reading the cluster failed: {exc}")
    if prometheus is None:
        return _inconclusive(gate, _NO_PROMETHEUS)
    if isinstance(gate, AlertsGate):
        try:
            return judge_alerts(gate, prometheus.alerts())
        except GitOpsBotError as exc:
            return judge_alerts(gate, exc)
    query = gate if isinstance(gate, PromQueryGate) else allocation_gate(gate, _pool(spec, pool))
    try:
        return judge_prom_samples(query, prometheus.query(query.query))
    except GitOpsBotError as exc:
        return judge_prom_samples(query, exc)


def _pool(spec: ClusterSpec, pool: str) -> str:
    return tf.gpupool_name(spec, pool)


def evaluate_gates(
    gates: Sequence[Gate],
    *,
    prometheus: Prometheus | None,
    cluster: Cluster,
    spec: ClusterSpec,
    pool: str,
) -> tuple[GateResult, ...]:
    """One result per gate, in order. ``pool``: the rollout policy's pool name (its GPUPool
    is ``<tfc>-<pool>``); ``prometheus`` None when the cluster has no ``prometheus:``."""
    return tuple(_one(g, prometheus, cluster, spec, pool) for g in gates)
