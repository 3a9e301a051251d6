"""core.gates: the pure judgements of each gate kind and the verdict over them."""

from __future__ import annotations

import math
from typing import Any

import pytest

from gitopsbot.core.rollouts.gates import (
    Alert,
    AlertsGate,
    GateAction,
    GateOutcome,
    GateResult,
    KubeGate,
    PromQueryGate,
    Sample,
    allocation_failure_query,
    allocation_gate,
    judge_alerts,
    judge_crashloop,
    judge_pending_gpunodes,
    judge_prom_samples,
    needs_prometheus,
    verdict,
)
from gitopsbot.ports.prometheus import PrometheusUnavailable

P, F, UNSURE = GateOutcome.PASS, GateOutcome.FAIL, GateOutcome.INCONCLUSIVE
ERR = "sum(rate(http_errors_total[5m]))"


def prom(op: Any = "<", threshold: float = 0.5, on_empty: Any = "inconclusive") -> PromQueryGate:
    return PromQueryGate("error-rate", ERR, op, threshold, on_empty)


@pytest.mark.parametrize(
    ("op", "value", "outcome"),
    [
        ("<", 0.4, P),
        ("<", 0.5, F),
        ("<=", 0.5, P),
        (">", 0.6, P),
        (">", 0.5, F),
        (">=", 0.5, P),
        ("==", 0.5, P),
        ("==", 0.4, F),
        ("!=", 0.4, P),
        ("!=", 0.5, F),
    ],
)
def test_each_operator(op: Any, value: float, outcome: GateOutcome) -> None:
    assert judge_prom_samples(prom(op), [Sample({}, value)]).outcome is outcome


def test_every_sample_must_hold_and_evidence_names_the_bad_ones() -> None:
    samples = [Sample({"pod": "a"}, 0.1), Sample({"pod": "b"}, 0.9), Sample({"pod": "c"}, 0.2)]
    result = judge_prom_samples(prom(), samples)
    assert result.outcome is F and result.gate == "error-rate"
    assert ERR in result.evidence and 'pod="b"' in result.evidence and "1 of 3" in result.evidence
    assert 'pod="a"' not in result.evidence
    passed = judge_prom_samples(prom(), samples[:1] + samples[2:])
    assert passed.outcome is P and "all 2 hold" in passed.evidence


@pytest.mark.parametrize(
    ("on_empty", "outcome"), [("inconclusive", UNSURE), ("pass", P), ("fail", F)]
)
def test_empty_result_is_on_empty(on_empty: Any, outcome: GateOutcome) -> None:
    result = judge_prom_samples(prom(on_empty=on_empty), [])
    assert result.outcome is outcome and "no samples" in result.evidence


def test_nan_is_inconclusive_unless_another_sample_fails() -> None:
    nan = Sample({"pod": "x"}, math.nan)
    assert judge_prom_samples(prom(), [nan, Sample({}, 0.1)]).outcome is UNSURE
    assert judge_prom_samples(prom(), [nan, Sample({}, 0.9)]).outcome is F


def test_query_error_is_inconclusive_with_the_error() -> None:
    result = judge_prom_samples(prom(), PrometheusUnavailable("prometheus down: 503"))
    assert result.outcome is UNSURE and "prometheus down: 503" in result.evidence


def test_evidence_is_bounded() -> None:
    many = [Sample({"pod": f"p{i}" * 20}, 1.0) for i in range(200)]
    result = judge_prom_samples(prom(), many)
    assert result.outcome is F and len(result.evidence) <= 500 and "more" in result.evidence


def crit(name: str, state: str = "firing", **labels: str) -> Alert:
    return Alert({"alertname": name, "severity": "critical", **labels}, state)


def test_alerts_firing_match_fails_naming_them() -> None:
    gate = AlertsGate("no-alerts", {"severity": "critical"})
    alerts = [
        crit("GPUDown", node="n1"),
        Alert({"alertname": "Minor", "severity": "info"}, "firing"),
    ]
    result = judge_alerts(gate, alerts)
    assert result.outcome is F
    assert "GPUDown" in result.evidence and 'node="n1"' in result.evidence
    assert "Minor" not in result.evidence


def test_pending_alerts_count_only_with_include_pending() -> None:
    pending = [crit("Soon", state="pending")]
    assert judge_alerts(AlertsGate("a", {"severity": "critical"}), pending).outcome is P
    assert judge_alerts(AlertsGate("a", {"severity": "critical"}, True), pending).outcome is F


def test_alerts_no_match_passes_empty_matchers_match_all_and_error_is_inconclusive() -> None:
    assert judge_alerts(AlertsGate("a", {"team": "ml"}), [crit("X")]).outcome is P
    assert judge_alerts(AlertsGate("a", {}), [crit("X")]).outcome is F
    assert judge_alerts(AlertsGate("a"), []).outcome is P
    err = judge_alerts(AlertsGate("a"), PrometheusUnavailable("refused"))
    assert err.outcome is UNSURE and "refused" in err.evidence


def gpunode(name: str, phase: str | None) -> Any:
    return {"metadata": {"name": name}, "status": {"phase": phase} if phase else {}}


def test_pending_gpunodes() -> None:
    ok = judge_pending_gpunodes([gpunode("a", "Running"), gpunode("b", "Destroying")], "nodes")
    assert ok.outcome is P and ok.gate == "nodes"
    bad = judge_pending_gpunodes(
        [gpunode("a", "Running"), gpunode("b", "Pending"), gpunode("c", None)]
    )
    assert bad.outcome is F and "b (Pending)" in bad.evidence and "c (Pending)" in bad.evidence
    assert "2 of 3" in bad.evidence
    assert judge_pending_gpunodes([]).outcome is P


def pod(name: str, *waiting: str, init: str = "") -> Any:
    statuses: list[Any] = [
        {"name": f"c{i}", "state": {"waiting": {"reason": r}} if r else {"running": {}}}
        for i, r in enumerate(waiting)
    ]
    status: dict[str, Any] = {"containerStatuses": statuses}
    if init:
        status["initContainerStatuses"] = [{"name": "init", "state": {"waiting": {"reason": init}}}]
    return {"metadata": {"name": name, "namespace": "ml"}, "status": status}


def test_crashloop() -> None:
    healthy = [pod("a", ""), pod("b", "ContainerCreating")]
    assert judge_crashloop(healthy, "apps").outcome is P
    result = judge_crashloop(
        [*healthy, pod("c", "", "CrashLoopBackOff"), pod("d", init="CrashLoopBackOff")]
    )
    assert result.outcome is F
    assert "ml/c (c1)" in result.evidence and "ml/d (init)" in result.evidence
    assert judge_crashloop([{"metadata": {"name": "x"}}]).outcome is P  # no status yet


def test_allocation_gate_is_a_prometheus_query() -> None:
    gate = KubeGate("allocation", "allocation-failures", max=2)
    as_prom = allocation_gate(gate, "tensor-fusion-gpu-a")
    assert as_prom.name == "allocation" and as_prom.op == "<=" and as_prom.threshold == 2
    assert as_prom.query == allocation_failure_query("tensor-fusion-gpu-a")
    assert (
        'tf_system_metrics_total_allocation_fail_cnt{pool="tensor-fusion-gpu-a"}' in as_prom.query
    )
    assert judge_prom_samples(as_prom, []).outcome is UNSURE
    assert needs_prometheus(gate) and needs_prometheus(AlertsGate("a"))
    assert not needs_prometheus(KubeGate("n", "no-pending-gpunodes"))


def r(name: str, outcome: GateOutcome) -> GateResult:
    return GateResult(name, outcome, "")


def test_verdict_open_retry_halt() -> None:
    assert verdict([], 1, 3).action is GateAction.OPEN
    ok = verdict([r("a", P), r("b", P)], 1, 3)
    assert ok.action is GateAction.OPEN and "a, b" in ok.reason
    unsure = [r("a", P), r("b", UNSURE)]
    first = verdict(unsure, 1, 3)
    assert first.action is GateAction.RETRY and "b" in first.reason and "3 left" in first.reason
    assert verdict(unsure, 3, 3).action is GateAction.RETRY
    last = verdict(unsure, 4, 3)
    assert last.action is GateAction.HALT and "b" in last.reason and "4 attempts" in last.reason
    assert verdict(unsure, 1, 0).action is GateAction.HALT


def test_fail_beats_inconclusive_even_with_retries_left() -> None:
    v = verdict([r("a", UNSURE), r("b", F), r("c", P)], 1, 3)
    assert v.action is GateAction.HALT and v.reason == "gate failed: b"
    assert v.results[1].outcome is F


def test_gates_are_hashable_values() -> None:
    a = AlertsGate("a", {"severity": "critical", "team": "ml"})
    b = AlertsGate("a", {"team": "ml", "severity": "critical"})
    assert a == b and hash(a) == hash(b) and len({a, b, KubeGate("k", "no-crashloop")}) == 2
