"""FakeHelm: the Helm port in memory, a release history per release.

Contract tests: tests/executor/adapters/test_helm_contract.py.
"""

from __future__ import annotations

import builtins
import copy
import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML

from gitopsbot.adapters.redaction import helm_secrets, redact_secrets
from gitopsbot.core.charts.observed import (
    HelmReleaseInfo,
    HelmReleaseStatus,
)
from gitopsbot.core.fleet.model import RolloutPolicy
from gitopsbot.errors import (
    HelmChartUnusable,
    HelmError,
    HelmFailed,
    HelmReleaseLocked,
)
from gitopsbot.ports.helm import ChartRef, Helm, RollbackRequest, UpgradeRequest
from gitopsbot.testing.injected_failures import InjectedFailures


@dataclass(slots=True)
class _Revision:
    info: HelmReleaseInfo
    values: dict[str, Any]
    post_render_policy: RolloutPolicy | None


class FakeHelm(Helm):
    """Helm in memory: a release history per (namespace, release).

    ``fail(operation, error, times)`` makes the next ``upgrade``/``rollback``/``status``...
    raise; ``set_pending`` leaves the latest revision in a pending-* state, as a killed helm
    does. ``app_versions`` maps chart version → appVersion. ``on_deploy`` (if given) is called
    with each new revision, its values and post-render policy, so a test can reflect the
    release into a FakeCluster. ``clock`` gives the ``updated`` time.

    Like HelmCli: ``transient(operation, times)`` makes the next call meet ``times``
    transient API failures, retried inside the call (``last_retries``) up to
    ``retry_attempts`` attempts, then HelmFailed; each failed upgrade/rollback attempt
    leaves a ``failed`` revision, as helm does. ``running`` holds the descriptions of helm
    operations still running (``operation_alive``). A local chart path that does not exist
    raises HelmChartUnusable. Like HelmCli, an upgrade's error (an injected one stands for
    helm's stderr) masks ``secret_values`` and the values at secret paths, nothing else;
    ``last_secret_values`` keeps what the last upgrade was given.
    """

    def __init__(
        self,
        *,
        app_versions: Mapping[str, str] | None = None,
        on_deploy: Callable[[HelmReleaseInfo, Mapping[str, Any], RolloutPolicy | None], None]
        | None = None,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        charts: Mapping[str, Path] | None = None,
        retry_attempts: int = 4,
    ) -> None:
        self.releases: dict[tuple[str, str], builtins.list[_Revision]] = {}
        self.app_versions = dict(app_versions or {})
        self.on_deploy = on_deploy
        self.clock = clock
        self.charts = dict(charts or {})  # chart version → local chart directory, for pull
        self.calls: builtins.list[str] = []
        self.retry_attempts = retry_attempts
        self.running: set[str] = set()
        self.last_secret_values: tuple[str, ...] = ()
        self._failures = InjectedFailures()
        self._transient: dict[str, int] = {}
        self._retries = 0

    def fail(self, operation: str, error: Exception, *, times: int = 1) -> None:
        self._failures.add(operation, error, times)

    def transient(self, operation: str, *, times: int = 1) -> None:
        self._transient[operation] = self._transient.get(operation, 0) + times

    @property
    def last_retries(self) -> int:
        return self._retries

    def operation_alive(self, description: str) -> bool:
        return bool(description) and description in self.running

    def set_pending(
        self,
        release: str,
        namespace: str,
        status: HelmReleaseStatus = HelmReleaseStatus.PENDING_UPGRADE,
    ) -> None:
        history = self.releases[(namespace, release)]
        history[-1].info = replace(history[-1].info, status=status)

    def status(self, release: str, namespace: str) -> HelmReleaseInfo | None:
        self._enter("status")
        history = self.releases.get((namespace, release))
        return history[-1].info if history else None

    def release_mark(self, release: str, namespace: str) -> str | None:
        # The same storage as ``status``: a failure injected for it fails this read too.
        self._enter("release_mark", failures_of="status")
        history = self.releases.get((namespace, release), [])
        return "\n".join(f"{r.info.revision}|{r.info.status}|{r.info.description}" for r in history)

    def history(self, release: str, namespace: str) -> builtins.list[HelmReleaseInfo]:
        self._enter("history")
        return [r.info for r in self.releases.get((namespace, release), [])]

    def get_values(
        self, release: str, namespace: str, revision: int | None = None
    ) -> dict[str, Any]:
        self._enter("get_values")
        found = self._revision(release, namespace, revision)
        return copy.deepcopy(found.values)

    def upgrade(self, request: UpgradeRequest) -> HelmReleaseInfo:
        self.last_secret_values = tuple(request.secret_values)
        try:
            return self._upgrade(request)
        except HelmError as exc:
            text = redact_secrets(str(exc), helm_secrets(request.values, request.secret_values))
            if text == str(exc):
                raise
            raise type(exc)(text) from None

    def _upgrade(self, request: UpgradeRequest) -> HelmReleaseInfo:
        release, namespace, chart = request.release, request.namespace, request.chart
        self._enter("upgrade")
        history = self.releases.get((namespace, release), [])
        self._refuse_pending(history, release, namespace, "helm upgrade")
        if chart.path and not Path(chart.path).exists():
            raise HelmChartUnusable(
                f"helm upgrade {release}: chart {chart.label} version {request.version} cannot "
                f'be used (nothing was changed in the cluster): path "{chart.path}" not found'
            )
        if not history and not request.install:
            raise HelmFailed(f'helm upgrade {release}: "{release}" has no deployed releases')
        self._absorb_transient("upgrade", release, namespace)
        version = request.version
        name, app_version = chart.name, self.app_versions.get(version, version)
        metadata = Path(chart.path) / "Chart.yaml" if chart.path else None
        if metadata is not None and metadata.is_file():
            # Like helm: a local chart's name, version and appVersion come from Chart.yaml.
            meta = YAML(typ="safe").load(metadata.read_text(encoding="utf-8"))
            name, version = str(meta["name"]), str(meta["version"])
            app_version = str(meta.get("appVersion", app_version))
        return self._deploy(
            release,
            namespace,
            chart_name=name or Path(chart.path).name,
            chart_version=version,
            app_version=app_version,
            values=dict(request.values),
            description=request.description,
            policy=request.post_render_policy,
        )

    def rollback(self, request: RollbackRequest) -> HelmReleaseInfo:
        release, namespace, revision = request.release, request.namespace, request.revision
        self._enter("rollback")
        history = self.releases.get((namespace, release), [])
        self._refuse_pending(history, release, namespace, "helm rollback")
        target = self._revision(release, namespace, revision)
        self._absorb_transient("rollback", release, namespace)
        return self._deploy(
            release,
            namespace,
            chart_name=target.info.chart_name,
            chart_version=target.info.chart_version,
            app_version=target.info.app_version,
            values=copy.deepcopy(target.values),
            description=f"Rollback to {revision}",
            policy=target.post_render_policy,
        )

    def pull(self, chart: ChartRef, version: str, dest: Path) -> Path:
        self._enter("pull")
        source = Path(chart.path) if chart.path else self.charts.get(version)
        if source is None or not source.is_dir():
            raise HelmChartUnusable(
                f"helm pull {chart.label} {version}: chart {chart.label} version {version} "
                "cannot be used: not found"
            )
        target = dest / (chart.name or source.name)
        shutil.copytree(source, target, dirs_exist_ok=True)
        return target

    def _enter(self, operation: str, *, failures_of: str = "") -> None:
        self.calls.append(operation)
        self._retries = 0
        failing = failures_of or operation
        if operation not in ("upgrade", "rollback"):
            self._absorb_transient(failing, "", "")
        self._failures.raise_next(failing)

    def _absorb_transient(self, operation: str, release: str, namespace: str) -> None:
        """Injected transient failures: each failed upgrade/rollback attempt leaves a
        ``failed`` revision; retried while the budget lasts, then HelmFailed."""
        pending = self._transient.pop(operation, 0)
        for attempt in range(1, pending + 1):
            if release:
                self._record_failed(release, namespace, operation)
            if attempt == self.retry_attempts:
                self._transient[operation] = pending - attempt
                raise HelmFailed(
                    f"helm {operation}: exit 1: Error: Operation cannot be fulfilled: the "
                    "object has been modified; please apply your changes to the latest "
                    "version and try again"
                )
            self._retries += 1

    def _record_failed(self, release: str, namespace: str, operation: str) -> None:
        history = self.releases.get((namespace, release), [])
        if not history:
            return
        latest = history[-1]
        verb = "Upgrade" if operation == "upgrade" else "Rollback"
        info = replace(
            latest.info,
            revision=latest.info.revision + 1,
            status=HelmReleaseStatus.FAILED,
            description=f'{verb} "{release}" failed: the object has been modified',
            updated=self.clock(),
        )
        history.append(_Revision(info, copy.deepcopy(latest.values), latest.post_render_policy))

    @staticmethod
    def _refuse_pending(
        history: builtins.list[_Revision], release: str, namespace: str, what: str
    ) -> None:
        if history and history[-1].info.status.pending:
            latest = history[-1].info
            raise HelmReleaseLocked(
                f"{what}: release {namespace}/{release} revision {latest.revision} is "
                f"{latest.status}; not forcing it (R8)"
            )

    def _revision(self, release: str, namespace: str, revision: int | None) -> _Revision:
        history = self.releases.get((namespace, release), [])
        if not history:
            raise HelmFailed(f"helm {release}: release: not found")
        if revision is None:
            return history[-1]
        for entry in history:
            if entry.info.revision == revision:
                return entry
        raise HelmFailed(f"helm {release}: revision {revision} not found")

    def _deploy(
        self,
        release: str,
        namespace: str,
        *,
        chart_name: str,
        chart_version: str,
        app_version: str,
        values: dict[str, Any],
        description: str,
        policy: RolloutPolicy | None,
    ) -> HelmReleaseInfo:
        history = self.releases.setdefault((namespace, release), [])
        for entry in history:
            if entry.info.status is HelmReleaseStatus.DEPLOYED:
                entry.info = replace(entry.info, status=HelmReleaseStatus.SUPERSEDED)
        info = HelmReleaseInfo(
            name=release,
            namespace=namespace,
            revision=(history[-1].info.revision + 1) if history else 1,
            status=HelmReleaseStatus.DEPLOYED,
            chart_name=chart_name,
            chart_version=chart_version,
            app_version=app_version,
            description=description,
            updated=self.clock(),
        )
        history.append(_Revision(info, copy.deepcopy(values), policy))
        if self.on_deploy is not None:
            self.on_deploy(info, values, policy)
        return info
