"""A pool's issue-18 settings as the plan lists them: its gates, gate retries, maxUnavailable,
waitForWorkloads, maxTenantDisruption, the GPU canary smoke and windowFit, each as (key,
description) in rollout.yaml's words (``core.planning.plan`` re-exports these names)."""

from __future__ import annotations

from gitopsbot.core.fleet.model import PoolPolicy
from gitopsbot.core.rollouts.canary_smoke import CanarySmoke
from gitopsbot.core.rollouts.gates import AlertsGate, Gate, KubeGate, PromQueryGate
from gitopsbot.core.rollouts.timeline import format_duration


def describe_gate(gate: Gate) -> str:
    """One gate as the plan lists it: name, kind and threshold."""
    if isinstance(gate, PromQueryGate):
        return (
            f"{gate.name} (prometheus): `{gate.query}` {gate.op} {gate.threshold:g}"
            f"; an empty answer is {gate.on_empty}"
        )
    if isinstance(gate, AlertsGate):
        matching = ", ".join(f"{k}={v}" for k, v in sorted(gate.matchers.items()))
        states = "firing or pending" if gate.include_pending else "firing"
        return f"{gate.name} (alerts): no {states} alert" + (
            f" matching {matching}" if matching else ""
        )
    assert isinstance(gate, KubeGate)
    what: dict[str, str] = {
        "no-pending-gpunodes": "every GPUNode of the pool Running",
        "no-crashloop": "no selected container in CrashLoopBackOff"
        + (f" (selector `{gate.selector}`)" if gate.selector else "")
        + (f" in namespace {gate.namespace}" if gate.namespace else ""),
        "allocation-failures": f"allocation failures grow by at most {gate.max:g} over 5m",
    }
    return f"{gate.name} (kubernetes {gate.check}): {what[gate.check]}"


def admission_settings(
    pool: PoolPolicy, smoke: CanarySmoke | None = None
) -> tuple[tuple[str, str], ...]:
    """The pool's issue-18 settings as (key, description), in rollout.yaml's words; empty for
    a pool that sets none of them (then the plan renders as before)."""
    out: list[tuple[str, str]] = []
    for gate in pool.gates:
        out.append(("gate", describe_gate(gate)))
    if pool.gates:
        out.append(
            (
                "gateRetries",
                f"{pool.gate_retries} retries "
                f"{format_duration(pool.gate_retry_interval_seconds)} apart: an "
                f"inconclusive judgement {pool.gate_retries + 1} times in a row halts; a fail "
                "halts at once",
            )
        )
    if pool.max_unavailable is not None:
        out.append(
            (
                "maxUnavailable",
                f"{pool.max_unavailable}: at most that many GPU nodes out of service at once "
                "(hypervisor batches; NotReady or cordoned nodes count first)",
            )
        )
    workloads = pool.workloads
    wait = workloads.wait if workloads is not None else None
    if wait is not None:
        scope = f"selector `{wait.selector}`" if wait.selector else "every TensorFusion pod"
        where = f" in namespace {wait.namespace}" if wait.namespace else ""
        out.append(
            (
                "waitForWorkloads",
                f"before each worker/client batch, wait until {wait.until} ({scope}{where}), "
                f"at most {format_duration(wait.timeout_seconds)}, then {wait.on_timeout}",
            )
        )
    if workloads is not None and workloads.max_tenant_share_percent is not None:
        out.append(
            (
                "maxTenantDisruption",
                f"{workloads.max_tenant_share_percent}%: a worker/client batch touches at most "
                "that share of the pool's tenants (distinct owning workloads)",
            )
        )
    if smoke is not None and smoke.applies_to(pool):
        out.append(
            (
                "canary-smoke.yaml",
                "after the canary batch, a smoke pod makes a GPU call on an updated node "
                f"(timeout {format_duration(smoke.timeout_seconds)}); a failure marks the "
                "version failed for "
                "every pool and wave until clearedVersions clears it",
            )
        )
    if out or not pool.window_fit:
        out.append(
            (
                "windowFit",
                "on: a batch opens only if it fits in what is left of the window"
                if pool.window_fit
                else "off: a batch opens whenever the window is open",
            )
        )
    return tuple(out)
