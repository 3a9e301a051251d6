"""bot.gate_checks.evaluate_gates: each gate fetched through the ports (the Prometheus test
server over HTTP, FakeCluster) and judged; failures to fetch are inconclusive, not raised."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from gitopsbot.adapters.prometheus import HttpPrometheus
from gitopsbot.bot.gate_checks import evaluate_gates
from gitopsbot.core.fleet.model import ClusterSpec, Environment, ReleaseSpec, RolloutPolicy
from gitopsbot.core.rollouts.gates import (
    AlertsGate,
    GateAction,
    GateOutcome,
    KubeGate,
    PromQueryGate,
    allocation_failure_query,
    verdict,
)
from gitopsbot.errors import KubeServerError
from gitopsbot.testing import FakeCluster
from tests.gates.promserver import PromServer

P, F, UNSURE = GateOutcome.PASS, GateOutcome.FAIL, GateOutcome.INCONCLUSIVE
NS = "tensor-fusion-sys"
Q = "sum(rate(http_errors_total[5m]))"


def spec() -> ClusterSpec:
    release = ReleaseSpec("https://charts.example", "tensor-fusion", "1.8.7", "tf", NS)
    return ClusterSpec("alpha", Environment("staging"), release, {}, RolloutPolicy())


def gpunode(name: str, phase: str, pool: str = "gpu-a") -> Any:
    return {
        "apiVersion": "tensor-fusion.ai/v1",
        "kind": "GPUNode",
        "metadata": {
            "name": name,
            "labels": {f"tensor-fusion.ai/pool-tensor-fusion-{pool}": "true"},
        },
        "status": {"phase": phase},
    }


def pod(name: str, ns: str, app: str, reason: str = "") -> Any:
    state = {"waiting": {"reason": reason}} if reason else {"running": {}}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "labels": {"app": app}},
        "status": {"containerStatuses": [{"name": "main", "state": state}]},
    }


@pytest.fixture
def server() -> Iterator[PromServer]:
    with PromServer() as s:
        yield s


@pytest.fixture
def prom(server: PromServer) -> Iterator[HttpPrometheus]:
    client = HttpPrometheus(server.url, timeout=2)
    yield client
    client.close()


GATES = (
    PromQueryGate("error-rate", Q, "<", 0.5),
    AlertsGate("no-alerts", {"severity": "critical"}),
    KubeGate("nodes-ready", "no-pending-gpunodes"),
    KubeGate("apps-healthy", "no-crashloop", "app=trainer", "ml"),
    KubeGate("allocation", "allocation-failures", max=0),
)


def healthy(server: PromServer, cluster: FakeCluster) -> None:
    server.vector(Q, ({"service": "api"}, 0.1))
    server.vector(allocation_failure_query("tensor-fusion-gpu-a"), ({}, 0))
    server.alert({"alertname": "Minor", "severity": "warning"})
    cluster.put(gpunode("n1", "Running"))
    cluster.put(gpunode("n2", "Running"))
    cluster.put(gpunode("other", "Pending", pool="gpu-b"))  # another pool: not looked at
    cluster.put(pod("trainer-0", "ml", "trainer"))
    cluster.put(pod("web-0", "ml", "web", "CrashLoopBackOff"))  # not selected
    cluster.put(pod("trainer-x", "other", "trainer", "CrashLoopBackOff"))  # other namespace


def run(prom: HttpPrometheus | None, cluster: FakeCluster) -> dict[str, Any]:
    results = evaluate_gates(GATES, prometheus=prom, cluster=cluster, spec=spec(), pool="gpu-a")
    assert [r.gate for r in results] == [g.name for g in GATES]
    return {r.gate: r for r in results}


def test_all_pass_opens(server: PromServer, prom: HttpPrometheus) -> None:
    cluster = FakeCluster()
    healthy(server, cluster)
    results = run(prom, cluster)
    assert {k: r.outcome for k, r in results.items()} == dict.fromkeys(results, P)
    assert verdict(tuple(results.values()), 1, 3).action is GateAction.OPEN
    asked = {r.query for r in server.requests if r.path == "/api/v1/query"}
    assert asked == {
        Q,
        'sum(increase(tf_system_metrics_total_allocation_fail_cnt{pool="tensor-fusion-gpu-a"}[5m]))',
    }


def test_each_gate_fails_with_evidence(server: PromServer, prom: HttpPrometheus) -> None:
    cluster = FakeCluster()
    healthy(server, cluster)
    server.vector(Q, ({"service": "api"}, 0.9))
    server.vector(allocation_failure_query("tensor-fusion-gpu-a"), ({}, 3))
    server.alert({"alertname": "GPUDown", "severity": "critical", "node": "n2"})
    cluster.put(gpunode("n2", "Pending"))
    cluster.put(pod("trainer-1", "ml", "trainer", "CrashLoopBackOff"))
    results = run(prom, cluster)
    assert {k: r.outcome for k, r in results.items()} == dict.fromkeys(results, F)
    assert 'service="api"} 0.9' in results["error-rate"].evidence
    assert "GPUDown" in results["no-alerts"].evidence
    assert "n2 (Pending)" in results["nodes-ready"].evidence
    assert "ml/trainer-1 (main)" in results["apps-healthy"].evidence
    assert "3" in results["allocation"].evidence
    assert verdict(tuple(results.values()), 1, 3).action is GateAction.HALT


def test_prometheus_errors_are_inconclusive(server: PromServer, prom: HttpPrometheus) -> None:
    cluster = FakeCluster()
    healthy(server, cluster)
    server.http(Q, 503, b"overloaded")
    server.alerts_answer = server.answers[Q]
    server.error(allocation_failure_query("tensor-fusion-gpu-a"), "bad_data", "unknown function")
    results = run(prom, cluster)
    for name in ("error-rate", "no-alerts", "allocation"):
        assert results[name].outcome is UNSURE, results[name]
    assert "HTTP 503" in results["error-rate"].evidence
    assert "unknown function" in results["allocation"].evidence
    assert results["nodes-ready"].outcome is P
    v = verdict(tuple(results.values()), 1, 3)
    assert v.action is GateAction.RETRY and "error-rate, no-alerts, allocation" in v.reason


def test_unreachable_prometheus_is_inconclusive(server: PromServer) -> None:
    cluster = FakeCluster()
    healthy(server, cluster)
    url = server.url
    server.stop()
    results = run(HttpPrometheus(url, timeout=1), cluster)
    assert (
        results["error-rate"].outcome is UNSURE and "ConnectError" in results["error-rate"].evidence
    )


def test_no_prometheus_configured_is_inconclusive() -> None:
    cluster = FakeCluster()
    cluster.put(gpunode("n1", "Running"))
    results = run(None, cluster)
    for name in ("error-rate", "no-alerts", "allocation"):
        assert results[name].outcome is UNSURE and "no prometheus:" in results[name].evidence
    assert results["nodes-ready"].outcome is P and results["apps-healthy"].outcome is P


def test_cluster_read_failure_is_inconclusive() -> None:
    cluster = FakeCluster()
    cluster.fail("list", KubeServerError("apiserver: HTTP 500"), times=2)
    results = run(None, cluster)
    assert results["nodes-ready"].outcome is UNSURE
    assert "apiserver: HTTP 500" in results["nodes-ready"].evidence
    assert results["apps-healthy"].outcome is UNSURE


def test_crashloop_without_selector_or_namespace_looks_everywhere() -> None:
    cluster = FakeCluster()
    cluster.put(pod("a", "ns1", "x"))
    cluster.put(pod("b", "ns2", "y", "CrashLoopBackOff"))
    gate = KubeGate("all", "no-crashloop")
    (result,) = evaluate_gates([gate], prometheus=None, cluster=cluster, spec=spec(), pool="gpu-a")
    assert result.outcome is F and "ns2/b" in result.evidence
