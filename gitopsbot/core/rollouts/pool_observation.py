"""One pool's component as observed, and the context a decision about its phase is made in."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from gitopsbot.core.fleet.model import Component, PoolPolicy
from gitopsbot.core.rollouts import windows
from gitopsbot.core.rollouts.workload_wait import WorkloadSnapshot


@dataclass(frozen=True, slots=True)
class PoolObservation:
    """One pool's component as observed (GPUPool status, TensorFusionCluster switch)."""

    progress: int | None  # R14 …UpdateProgress; None when the status has none yet
    synced: bool  # …ConfigSynced
    switch_open: bool  # autoUpdate<Component> in the TensorFusionCluster's pool template
    nodes: int  # GPU nodes in the pool
    pending_nodes: tuple[str, ...] = ()  # GPUNodes in phase Pending (F4)
    # Whether the pool's pods already run what its template says (hypervisor: the image on
    # every node); None when it cannot be told. Guards against a status still reading
    # "synced at 100" from before the controller saw the new template.
    current: bool | None = None
    # The GPUPool's resourceVersion as observed: a wait for the pool to move compares with
    # it, so a change between this observation and the wait is not missed.
    version: str = ""
    # What the component's batches count, when not nodes: TensorFusionWorkloads (worker) or
    # client pods (client) of the pool (facts §3.5, §3.6); None: the nodes.
    units: int | None = None
    # Pool nodes out of service (NotReady, or cordoned by a person): the availability
    # budget counts them first (issue 18).
    out_of_service: tuple[str, ...] = ()
    # Worker/client: the largest batch percentage whose batch disrupts no more than the
    # pool's tenant share, and why (None: no bound).
    tenant_percentage: int | None = None
    tenant_reason: str = ""
    # Worker/client with waitForWorkloads: the named workloads' sessions and opt-outs now
    # (core.workload_wait); None: not asked.
    workload: WorkloadSnapshot | None = None

    @property
    def total(self) -> int:
        return self.nodes if self.units is None else self.units


@dataclass(frozen=True, slots=True)
class PhaseContext:
    """What a decision about one phase is made from, besides the phase itself (which each
    transition moves on): the pool's policy, the component, the observation, "now" and the
    maintenance window."""

    policy: PoolPolicy
    component: Component
    observed: PoolObservation
    now: datetime
    window: windows.Window | None
