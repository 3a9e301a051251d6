"""A pool's ``waitForWorkloads`` and ``maxTenantDisruption`` as ``rollout.yaml`` writes them;
the waiting and the sizing are ``core.rollouts.workload_wait``'s."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Until = Literal["no-active-session", "opt-out-gone"]


OnTimeout = Literal["proceed", "skip-window", "halt"]


UNTIL: tuple[Until, ...] = ("no-active-session", "opt-out-gone")


ON_TIMEOUT: tuple[OnTimeout, ...] = ("proceed", "skip-window", "halt")


# gitopsbot's own domain: the annotation is the bot's contract with app owners, not the
# controller's, so it must not sit under tensor-fusion.ai.
OPT_OUT_ANNOTATION = "gitopsbot.io/no-disruption"


@dataclass(frozen=True, slots=True)
class WorkloadWait:
    """Wait before a worker or client batch of a pool (see the module doc)."""

    selector: str  # a label selector on the pool's TensorFusion pods ("" = all of them)
    namespace: str | None  # None: every namespace
    until: Until
    timeout_seconds: int
    on_timeout: OnTimeout
    opt_out_annotation: str = OPT_OUT_ANNOTATION


@dataclass(frozen=True, slots=True)
class WorkloadAwareness:
    """A pool's ``waitForWorkloads`` and ``maxTenantDisruption`` (core.fleet.workload_file);
    either may be absent."""

    wait: WorkloadWait | None = None
    max_tenant_share_percent: int | None = None
