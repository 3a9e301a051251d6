"""A pool's rollout gates as ``rollout.yaml`` writes them (``pools.<pool>.gates``) and the cluster's
Prometheus; how they are judged is ``core.rollouts.gates``'s."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

Op = Literal["<", "<=", ">", ">=", "==", "!="]


OnEmpty = Literal["inconclusive", "pass", "fail"]


KubeCheck = Literal["no-pending-gpunodes", "no-crashloop", "allocation-failures"]


OPS: tuple[Op, ...] = ("<", "<=", ">", ">=", "==", "!=")


ON_EMPTY: tuple[OnEmpty, ...] = ("inconclusive", "pass", "fail")


KUBE_CHECKS: tuple[KubeCheck, ...] = ("no-pending-gpunodes", "no-crashloop", "allocation-failures")


# Pool defaults: an inconclusive gate is evaluated again up to 3 more times, 60 s apart.
GATE_RETRY_DEFAULT = 3


GATE_RETRY_INTERVAL_DEFAULT = 60


PROMETHEUS_TIMEOUT_DEFAULT = 10


@dataclass(frozen=True, slots=True)
class PromQueryGate:
    name: str
    query: str
    op: Op
    threshold: float
    on_empty: OnEmpty = "inconclusive"


@dataclass(frozen=True, slots=True)
class AlertsGate:
    name: str
    matchers: Mapping[str, str] = field(default_factory=dict)
    include_pending: bool = False

    def __hash__(self) -> int:
        # The generated hash would fail on the dict: gates may sit in hashed policy objects.
        return hash((self.name, tuple(sorted(self.matchers.items())), self.include_pending))


@dataclass(frozen=True, slots=True)
class KubeGate:
    name: str
    check: KubeCheck
    selector: str = ""  # label selector of the pods (no-crashloop)
    namespace: str | None = None  # None: every namespace (no-crashloop)
    max: float = 0  # allowed growth of the allocation-failure counter (allocation-failures)


Gate = PromQueryGate | AlertsGate | KubeGate


def needs_prometheus(gate: Gate) -> bool:
    """Does this gate read Prometheus (so the cluster needs a ``prometheus:`` block)?"""
    return not isinstance(gate, KubeGate) or gate.check == "allocation-failures"


@dataclass(frozen=True, slots=True)
class PrometheusEndpoint:
    """A cluster's Prometheus: the base URL, the name of the environment variable holding a
    bearer token (the token itself is never in Git), the timeout of one request."""

    url: str
    token_env: str | None = None
    timeout_seconds: int = PROMETHEUS_TIMEOUT_DEFAULT
