"""Rollout gates: what a pool's policy asks to hold true after each batch of a component
rollout before the next batch opens, and the pure judgement of data already fetched.

Three kinds (``clusters/<name>/rollout.yaml``, ``pools.<pool>.gates``; parsed by
``core.fleet.gates_file``):

* ``PromQueryGate``: every sample of a PromQL instant vector (or the scalar) must satisfy
  ``value <op> threshold``; an empty answer is ``on_empty``.
* ``AlertsGate``: no alert whose labels include ``matchers`` is firing (or pending, with
  ``include_pending``), as Prometheus's ``/api/v1/alerts`` lists them.
* ``KubeGate``: a check on the cluster: ``no-pending-gpunodes`` (every GPUNode of the pool is
  Running), ``no-crashloop`` (no container of the selected pods waits in CrashLoopBackOff),
  ``allocation-failures`` (TensorFusion's allocation-failure counter grew by at most ``max``
  over ``ALLOCATION_WINDOW``; read through Prometheus, see ``allocation_failure_query``).

Each evaluation gives one ``GateResult`` per gate; ``verdict`` turns them into OPEN, RETRY
or HALT. Pure: no I/O, no clock (the caller counts attempts and waits between them).
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from gitopsbot.core.fleet.gate_specs import GATE_RETRY_DEFAULT as GATE_RETRY_DEFAULT
from gitopsbot.core.fleet.gate_specs import (
    GATE_RETRY_INTERVAL_DEFAULT as GATE_RETRY_INTERVAL_DEFAULT,
)
from gitopsbot.core.fleet.gate_specs import KUBE_CHECKS as KUBE_CHECKS
from gitopsbot.core.fleet.gate_specs import ON_EMPTY as ON_EMPTY
from gitopsbot.core.fleet.gate_specs import OPS as OPS
from gitopsbot.core.fleet.gate_specs import PROMETHEUS_TIMEOUT_DEFAULT as PROMETHEUS_TIMEOUT_DEFAULT
from gitopsbot.core.fleet.gate_specs import AlertsGate as AlertsGate
from gitopsbot.core.fleet.gate_specs import Gate as Gate
from gitopsbot.core.fleet.gate_specs import KubeCheck as KubeCheck
from gitopsbot.core.fleet.gate_specs import KubeGate as KubeGate
from gitopsbot.core.fleet.gate_specs import OnEmpty as OnEmpty
from gitopsbot.core.fleet.gate_specs import Op as Op
from gitopsbot.core.fleet.gate_specs import PrometheusEndpoint as PrometheusEndpoint
from gitopsbot.core.fleet.gate_specs import PromQueryGate as PromQueryGate
from gitopsbot.core.fleet.gate_specs import needs_prometheus as needs_prometheus

_COMPARE: dict[str, Callable[[float, float], bool]] = {
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
    "==": operator.eq,
    "!=": operator.ne,
}


# TensorFusion's allocation-failure counter: the chart's alert rule WorkerAllocationFailed
# (values.yaml dynamicConfig.alertRules) reads field ``total_allocation_fail_cnt`` of
# measurement ``tf_system_metrics``, tagged ``pool`` (the GPUPool name). Exported to
# Prometheus the usual influx way (measurement_field, as Telegraf's prometheus output names it).
ALLOCATION_FAILURE_METRIC = "tf_system_metrics_total_allocation_fail_cnt"
# The window over which the counter's growth is measured: about one batch interval.
ALLOCATION_WINDOW = "5m"
# Evidence is for a PR comment or a log line: bounded.
_EVIDENCE_ITEMS = 5
_EVIDENCE_CHARS = 500


@dataclass(frozen=True, slots=True)
class Sample:
    """One sample of an instant vector (``labels`` of its series), or a scalar (no labels)."""

    labels: Mapping[str, str]
    value: float


@dataclass(frozen=True, slots=True)
class Alert:
    """One alert as ``/api/v1/alerts`` lists it; ``state`` firing or pending."""

    labels: Mapping[str, str]
    state: str
    active_at: str = ""
    value: str = ""


class GateOutcome(StrEnum):
    PASS = "pass"
    FAIL = "fail"
    INCONCLUSIVE = "inconclusive"


@dataclass(frozen=True, slots=True)
class GateResult:
    gate: str
    outcome: GateOutcome
    evidence: str


class GateAction(StrEnum):
    OPEN = "open"  # every gate passed: the next batch may open
    RETRY = "retry"  # some gate is inconclusive and attempts are left: evaluate again later
    HALT = "halt"  # a gate failed, or stayed inconclusive past the retries


@dataclass(frozen=True, slots=True)
class GateVerdict:
    action: GateAction
    reason: str
    results: tuple[GateResult, ...] = ()


def _bounded(text: str) -> str:
    return text if len(text) <= _EVIDENCE_CHARS else text[: _EVIDENCE_CHARS - 1] + "…"


def _labels(labels: Mapping[str, str]) -> str:
    return "{" + ", ".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}"


def _listing(items: Sequence[str]) -> str:
    shown = ", ".join(items[:_EVIDENCE_ITEMS])
    more = len(items) - _EVIDENCE_ITEMS
    return f"{shown} and {more} more" if more > 0 else shown


def _num(value: float) -> str:
    return f"{value:g}"


def _unread(gate: str, want: str, failed: str, error: BaseException) -> GateResult:
    """A gate whose read failed (``failed``: what did): inconclusive, not failed."""
    text = str(error) or type(error).__name__
    return GateResult(gate, GateOutcome.INCONCLUSIVE, _bounded(f"{want}: {failed}: {text}"))


def judge_prom_samples(
    gate: PromQueryGate, samples: Sequence[Sample] | BaseException
) -> GateResult:
    """Every sample must satisfy ``value op threshold``. A query error is inconclusive; so
    is a NaN sample (no answer, not a bad one) unless another sample already fails."""
    want = f"{gate.query} {gate.op} {_num(gate.threshold)}"
    if isinstance(samples, BaseException):
        return _unread(gate.name, want, "query failed", samples)
    if not samples:
        return GateResult(
            gate.name, GateOutcome(gate.on_empty), _bounded(f"{want}: no samples (empty result)")
        )
    compare = _COMPARE[gate.op]
    bad = [s for s in samples if not math.isnan(s.value) and not compare(s.value, gate.threshold)]
    nan = [s for s in samples if math.isnan(s.value)]

    def shown(items: Sequence[Sample]) -> str:
        return _listing(
            [f"{_labels(s.labels)} {_num(s.value)}" if s.labels else _num(s.value) for s in items]
        )

    if bad:
        outcome, seen = GateOutcome.FAIL, f"{len(bad)} of {len(samples)} not: {shown(bad)}"
    elif nan:
        outcome, seen = GateOutcome.INCONCLUSIVE, f"{len(nan)} of {len(samples)} NaN: {shown(nan)}"
    else:
        outcome, seen = GateOutcome.PASS, f"all {len(samples)} hold: {shown(samples)}"
    return GateResult(gate.name, outcome, _bounded(f"{want}: {seen}"))


def alert_matches(gate: AlertsGate, alert: Alert) -> bool:
    if alert.state != "firing" and not (gate.include_pending and alert.state == "pending"):
        return False
    return all(alert.labels.get(k) == v for k, v in gate.matchers.items())


def judge_alerts(gate: AlertsGate, alerts: Sequence[Alert] | BaseException) -> GateResult:
    """Passes when no alert matching ``matchers`` is firing (or pending, when asked)."""
    states = "firing or pending" if gate.include_pending else "firing"
    want = f"alerts {_labels(gate.matchers)} {states}"
    if isinstance(alerts, BaseException):
        return _unread(gate.name, want, "listing alerts failed", alerts)
    hits = [a for a in alerts if alert_matches(gate, a)]
    if not hits:
        return GateResult(gate.name, GateOutcome.PASS, f"{want}: none")
    names = [f"{a.labels.get('alertname', '?')}{_labels(a.labels)} ({a.state})" for a in hits]
    return GateResult(gate.name, GateOutcome.FAIL, _bounded(f"{want}: {_listing(names)}"))


def judge_pending_gpunodes(gpunodes: Sequence[Mapping[str, Any]], gate: str = "") -> GateResult:
    """Every GPUNode of the pool is Running (facts §3.9: Pending while its hypervisor is not
    ready); one being deleted (Destroying) is not waited for."""
    name = gate or "no-pending-gpunodes"
    waiting: list[str] = []
    for node in gpunodes:
        phase = str((node.get("status") or {}).get("phase") or "Pending")
        if phase not in ("Running", "Destroying"):
            waiting.append(f"{(node.get('metadata') or {}).get('name', '?')} ({phase})")
    if waiting:
        return GateResult(
            name,
            GateOutcome.FAIL,
            _bounded(
                f"{len(waiting)} of {len(gpunodes)} GPUNodes not Running: {_listing(waiting)}"
            ),
        )
    return GateResult(name, GateOutcome.PASS, f"all {len(gpunodes)} GPUNodes Running")


def crashlooping(pod: Mapping[str, Any]) -> list[str]:
    """Names of the pod's containers (init containers too) waiting in CrashLoopBackOff."""
    status = pod.get("status") or {}
    out: list[str] = []
    for key in ("initContainerStatuses", "containerStatuses"):
        for c in status.get(key) or []:
            waiting = (c.get("state") or {}).get("waiting") or {}
            if waiting.get("reason") == "CrashLoopBackOff":
                out.append(str(c.get("name", "?")))
    return out


def judge_crashloop(pods: Sequence[Mapping[str, Any]], gate: str = "") -> GateResult:
    """Passes when no container of ``pods`` waits in CrashLoopBackOff."""
    name = gate or "no-crashloop"
    bad: list[str] = []
    for pod in pods:
        containers = crashlooping(pod)
        if containers:
            meta = pod.get("metadata") or {}
            bad.append(
                f"{meta.get('namespace', '')}/{meta.get('name', '?')} ({', '.join(containers)})"
            )
    if bad:
        return GateResult(
            name,
            GateOutcome.FAIL,
            _bounded(f"{len(bad)} of {len(pods)} pods in CrashLoopBackOff: {_listing(bad)}"),
        )
    return GateResult(name, GateOutcome.PASS, f"no CrashLoopBackOff in {len(pods)} pods")


def allocation_failure_query(gpupool: str, window: str = ALLOCATION_WINDOW) -> str:
    """How much the pool's allocation-failure counter grew over ``window``."""
    pool = gpupool.replace("\\", "\\\\").replace('"', '\\"')
    return f'sum(increase({ALLOCATION_FAILURE_METRIC}{{pool="{pool}"}}[{window}]))'


def allocation_gate(gate: KubeGate, gpupool: str) -> PromQueryGate:
    """An ``allocation-failures`` check as the Prometheus gate it is: growth <= ``max``. An
    empty answer (the metric is not exported) stays inconclusive: a gate never passes on
    data it could not see."""
    return PromQueryGate(gate.name, allocation_failure_query(gpupool), "<=", gate.max)


def verdict(results: Sequence[GateResult], attempts_so_far: int, retry_limit: int) -> GateVerdict:
    """OPEN when every gate passed; HALT when any failed (fail beats inconclusive), or when
    one is inconclusive and the retries are spent; else RETRY.

    ``attempts_so_far``: evaluations done, this one included (1 after the first).
    ``retry_limit``: how many times an inconclusive evaluation is repeated (``gateRetries``),
    so HALT comes at attempt ``retry_limit + 1``."""
    done = tuple(results)
    failed = [r.gate for r in done if r.outcome is GateOutcome.FAIL]
    unsure = [r.gate for r in done if r.outcome is GateOutcome.INCONCLUSIVE]
    if failed:
        return GateVerdict(GateAction.HALT, f"gate failed: {', '.join(failed)}", done)
    if unsure:
        what = f"inconclusive: {', '.join(unsure)}"
        if attempts_so_far > retry_limit:
            return GateVerdict(
                GateAction.HALT, f"gates {what} after {attempts_so_far} attempts", done
            )
        left = retry_limit - attempts_so_far + 1
        return GateVerdict(
            GateAction.RETRY, f"gates {what} (attempt {attempts_so_far}, {left} left)", done
        )
    if not done:
        return GateVerdict(GateAction.OPEN, "no gates", done)
    return GateVerdict(GateAction.OPEN, f"gates passed: {', '.join(r.gate for r in done)}", done)
