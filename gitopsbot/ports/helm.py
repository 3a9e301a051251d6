"""Helm as the executor needs it: status, history, values, upgrade (with the rollout-policy
post-renderer), rollback, pull.

Implemented by ``gitopsbot.adapters.helm.HelmCli`` (the real helm 3 or 4 binary) and by
``gitopsbot.testing.FakeHelm``; the same contract tests (tests/executor) run against both.

R8: every upgrade passes the WHOLE values file from Git, an explicit ``--version`` and
``--namespace``, never ``--reuse-values``. A release stuck in pending-* raises
``errors.HelmReleaseLocked`` and is never forced. ``post_render_policy`` (F1, see
docs/rollout-policy.md) rewrites each rendered TensorFusionCluster's per-pool rollout policy to
the Git policy with every ``autoUpdate*`` switch closed. What an upgrade is given travels as
one ``UpgradeRequest`` from the helm-upgrade step to helm, and what a rollback is given as one
``RollbackRequest``.

Every call retries transient API failures (409 on a stale object, 429, 5xx, a dropped
connection) inside itself, with a bounded backoff; ``last_retries`` says how many retries the
last call of the calling thread needed. After the budget the last error is raised
(``HelmFailed``). A chart that cannot be fetched or loaded raises ``HelmChartUnusable``:
nothing was changed in the cluster. An upgrade's errors mask the secrets (``secret_values``
and the values at secret paths) and nothing else. docs/helm.md has the details.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from gitopsbot.core.charts.observed import HelmReleaseInfo
from gitopsbot.core.fleet.model import ReleaseSpec, RolloutPolicy


@dataclass(frozen=True, slots=True)
class ChartRef:
    """A chart in a repository (``repo_url`` + ``name``; http(s):// or oci://) or a local
    chart directory/archive (``path``)."""

    name: str = ""
    repo_url: str = ""
    path: str = ""

    def __post_init__(self) -> None:
        if bool(self.path) == bool(self.repo_url):
            raise ValueError("ChartRef needs exactly one of repo_url (with name) or path")
        if self.repo_url and not self.name:
            raise ValueError("ChartRef with repo_url needs a chart name")

    @classmethod
    def of(cls, release: ReleaseSpec) -> ChartRef:
        return cls(name=release.chart_name, repo_url=release.chart_repo_url)

    @property
    def label(self) -> str:
        return self.path or f"{self.repo_url.rstrip('/')}/{self.name}"


@dataclass(frozen=True, slots=True)
class UpgradeRequest:
    """One ``helm upgrade [--install]``: the release, the chart and version, the WHOLE values
    from Git (R8) and the description that marks the revision as the operation's.

    ``values`` may hold merged secrets and ``secret_values`` are those secrets (what helm's
    errors mask): neither is in the repr, so a request that reaches a log or an error shows
    no secret. ``post_render_policy``: the rollout policy helm's post-renderer writes into
    each rendered TensorFusionCluster (F1; None: no post-renderer). ``install``: install the
    release when it does not exist (``--install``).
    """

    release: str
    namespace: str
    chart: ChartRef
    version: str
    values: Mapping[str, Any] = field(repr=False)
    description: str
    post_render_policy: RolloutPolicy | None = None
    wait: bool = False
    timeout_seconds: int = 300
    install: bool = True
    secret_values: Sequence[str] = field(default=(), repr=False)


@dataclass(frozen=True, slots=True)
class RollbackRequest:
    """One ``helm rollback`` of ``release`` to ``revision``. ``description`` names the
    operation in the log and in errors (helm records ``Rollback to <revision>`` itself)."""

    release: str
    namespace: str
    revision: int
    description: str
    wait: bool = False
    timeout_seconds: int = 300


class Helm(Protocol):
    @property
    def last_retries(self) -> int:
        """Retries after transient failures in the last call made by this thread (0 when it
        went through at once), the reads it made itself included."""
        ...

    def operation_alive(self, description: str) -> bool:
        """Whether a helm carrying ``description`` (an upgrade's description, or the one given
        to ``rollback``) is still running on this machine, e.g. the helm of a bot that was
        killed. While it runs, the release shows pending-* with helm's own description."""
        ...

    def status(self, release: str, namespace: str) -> HelmReleaseInfo | None:
        """The latest revision (whatever its state, pending-* included), or None."""
        ...

    def release_mark(self, release: str, namespace: str) -> str | None:
        """A mark that changes whenever a revision of the release is added, removed or
        changes state, read cheaply: the idle check reads ``status`` only when it changed
        (docs/executor.md "The idle check"). Read from Helm's storage without the records
        (a metadata-only list); None when that is not possible (helm keeps releases
        elsewhere): the caller reads ``status``. Fails as ``status`` does (an unreachable
        cluster, RBAC)."""
        ...

    def history(self, release: str, namespace: str) -> list[HelmReleaseInfo]:
        """All kept revisions, oldest first; [] when the release does not exist."""
        ...

    def get_values(
        self, release: str, namespace: str, revision: int | None = None
    ) -> dict[str, Any]:
        """User-supplied values of a revision (latest when None); {} when none were given."""
        ...

    def upgrade(self, request: UpgradeRequest) -> HelmReleaseInfo:
        """``helm upgrade [--install]`` of ``request`` with its whole ``values`` (R8). Values
        may hold merged secrets: they reach helm on its standard input, never a file or argv.
        An error masks ``request.secret_values`` wherever they appear (also where a value at a
        path that is not secret equals one), and the values at secret paths
        (``core.fleet.secrets.secret_strings``); no other value, so helm's message stays
        readable.
        Returns the new revision. HelmReleaseLocked when the release is pending-* (also when
        a transient failure left it so); HelmChartUnusable when the chart cannot be fetched
        or loaded (nothing changed); HelmTimeout / HelmFailed otherwise. A transient failure
        leaves a ``failed`` revision and is retried."""
        ...

    def rollback(self, request: RollbackRequest) -> HelmReleaseInfo:
        """``helm rollback`` to ``request.revision``; returns the new revision. Neither helm 3
        nor helm 4 takes ``--description`` on rollback: helm records ``Rollback to <revision>``
        itself, which is how a resumed executor recognises it; ``request.description`` goes to
        the log and to errors only (docs/helm.md)."""
        ...

    def pull(self, chart: ChartRef, version: str, dest: Path) -> Path:
        """Download and unpack the chart into ``dest``; returns the chart directory.
        HelmChartUnusable when it cannot be fetched or is refused (e.g. paths outside the
        chart)."""
        ...
