"""What is deployed now, as the plan's baseline.

The executor builds a ``DeployedState`` from ``helm get values`` / ``helm history`` and the
cluster; where nothing is deployed the CLI builds one from the fleet at the ``--from`` Git ref
(``source="git:<ref>"``). ``values`` are the user-supplied values (what R6 backs up), not the
chart defaults merged in.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any

from gitopsbot.core.fleet.model import CredentialsSpec, Location


@dataclass(frozen=True, slots=True)
class DeployedState:
    chart_version: str
    app_version: str
    values: Mapping[str, Any]
    revision: int = 0
    # "helm" when read from the release; "git:<ref>" when the baseline is a fleet commit.
    source: str = "helm"
    # Observed GPU node count per pool (by fleet pool name); overrides PoolPolicy.nodes.
    pool_nodes: Mapping[str, int] = field(default_factory=dict)
    # A Git baseline that still holds secret-looking literals in values.yaml: values path →
    # where it is written. ``values`` holds ``***`` there, never the literal (docs/plan.md).
    secret_literals: Mapping[str, Location] = field(default_factory=dict)
    # The credentials.yaml the baseline was applied with (None: unknown, e.g. read from
    # Helm alone), to tell which credentials a change rotates (core.rotation).
    credentials: CredentialsSpec | None = None


# -- Helm releases, CRD applies and Deployment readiness, as the adapters observe them ------
# (built by adapters.helm / adapters.kube / adapters.kubectl and by the fakes in testing.py)


class HelmReleaseStatus(StrEnum):
    """Helm's release states (``helm status -o json`` → ``info.status``)."""

    UNKNOWN = "unknown"
    DEPLOYED = "deployed"
    UNINSTALLED = "uninstalled"
    SUPERSEDED = "superseded"
    FAILED = "failed"
    UNINSTALLING = "uninstalling"
    PENDING_INSTALL = "pending-install"
    PENDING_UPGRADE = "pending-upgrade"
    PENDING_ROLLBACK = "pending-rollback"

    @property
    def pending(self) -> bool:
        """A pending-* release blocks every further upgrade/rollback (R8: reported, not forced)."""
        return self.value.startswith("pending-")

    @classmethod
    def parse(cls, text: str) -> HelmReleaseStatus:
        try:
            return cls(text.strip().lower())
        except ValueError:
            return cls.UNKNOWN


@dataclass(frozen=True, slots=True)
class HelmReleaseInfo:
    """One revision of a Helm release.

    ``description`` is the text the bot passed with ``--description`` (for example
    ``gitopsbot op=<operation id> step=<step>``): how the executor recognises its own revision
    after a restart (issue 5 part 1).
    """

    name: str
    namespace: str
    revision: int
    status: HelmReleaseStatus
    chart_name: str
    chart_version: str
    app_version: str
    description: str
    updated: datetime | None = None

    @property
    def chart(self) -> str:
        """``<name>-<version>``, as helm prints it."""
        return f"{self.chart_name}-{self.chart_version}"


@dataclass(frozen=True, slots=True)
class CrdApplyResult:
    """One CustomResourceDefinition after a server-side apply (R7)."""

    name: str  # e.g. "gpupools.tensor-fusion.ai"
    applied: bool  # the apply call succeeded ("serverside-applied")
    established: bool  # condition Established=True was seen afterwards
    stored_versions: tuple[str, ...] = ()
    message: str = ""  # why not applied / not established; secret-free

    @property
    def ok(self) -> bool:
        return self.applied and self.established


@dataclass(frozen=True, slots=True)
class DeploymentReadiness:
    """A Deployment's rollout, judged like ``kubectl rollout status`` does. Truthy when ready."""

    namespace: str
    name: str
    ready: bool
    generation: int = 0
    observed_generation: int = 0
    replicas: int = 0
    updated_replicas: int = 0
    ready_replicas: int = 0
    available_replicas: int = 0
    message: str = ""

    def __bool__(self) -> bool:
        return self.ready
