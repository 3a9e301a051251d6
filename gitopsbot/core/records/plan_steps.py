"""A plan's steps: what each ``StepKind`` is, a ``Step`` (the procedure rule it carries out
and its impact on running work), and R3's impact column the steps quote. ``core.planning.plan``
builds them (and re-exports these names)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

from gitopsbot.core.fleet.model import Component

# R3's impact column.
IMPACT: Mapping[str, str] = {
    "backup": "none: reads the release values and the TensorFusion objects",
    "crds": "none: CRDs are applied server-side before the release (Helm never upgrades crds/)",
    "controller": (
        "while no controller replica is available, pods labelled "
        '`tensor-fusion.ai/enabled: "true"` cannot be created or scheduled'
    ),
    "controller-ready": "none: waits for the controller Deployment to be rolled out",
    Component.HYPERVISOR: (
        "running pods do not restart; a node takes no new GPU work until its new "
        "hypervisor is ready"
    ),
    Component.WORKER: "apps connected to a rebuilt worker lose their GPU session",
    Component.CLIENT: "app pods with outdated injection are deleted and recreated by their owners",
    "verify": "none: reads status; runs the smoke-test workload when configured",
}


class StepKind(StrEnum):
    BACKUP = "backup"
    CRDS = "crds"
    HELM_UPGRADE = "helm-upgrade"
    CONTROLLER_READY = "controller-ready"
    CONTROLLER_RESTART = "controller-restart"
    POOL_ROLLOUT = "pool-rollout"
    VERIFY = "verify"
    # A rotation's own steps (core.rotation_plan).
    VENDOR_SECRET = "vendor-secret"
    AGENT_RECONNECT = "agent-reconnect"
    HYPERVISOR_RESTART = "hypervisor-restart"


@dataclass(frozen=True, slots=True)
class Step:
    kind: StepKind
    title: str
    rule: str  # the procedure rule this step carries out (R6, R7, ...)
    impact: str
    pool: str = ""
    components: tuple[Component, ...] = ()
