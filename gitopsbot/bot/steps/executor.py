"""Run one step of an operation through the ports and say how it went.

Every step is idempotent or recognises its own earlier effect, so a restart after a kill
never repeats one that took effect: the Helm upgrade finds its revision by the description
it gave it (``gitopsbot op=<id> step=helm-upgrade``), a rollback finds helm's own
``Rollback to <n>`` revision, a controller restart stamps the step's start time (a repeat
writes the same annotation and starts no new rollout).

Each step kind lives in its own module of ``bot.steps`` (``backup``, ``crds``,
``helm_upgrade``, ``controller``, ``pool_switch``, ``verify``, ``rollback``); the pure
TensorFusion judgments are in ``core.rollouts.tf_objects``. ``Executor`` holds the ports and hands
them to the steps.

Outcomes are values (``StepOutcome``): SUCCEEDED / SKIPPED / FAILED, or RUNNING with a
``retry_after`` when the world needs more time. Exceptions from the ports are mapped in one
place (``run``): TransientError → RUNNING (retry), PermanentError → FAILED.
No adapter is imported here: ports are injected (``gitopsbot.app`` wires them).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from datetime import datetime

from gitopsbot.bot import gate_checks, gpu_canary, node_reads
from gitopsbot.bot.steps import backup as backup_step
from gitopsbot.bot.steps import controller as controller_steps
from gitopsbot.bot.steps import crds as crds_step
from gitopsbot.bot.steps import helm_upgrade as helm_step
from gitopsbot.bot.steps import pool_switch
from gitopsbot.bot.steps import rollback as rollback_step
from gitopsbot.bot.steps import rotation as rotation_steps
from gitopsbot.bot.steps import verify as verify_step
from gitopsbot.bot.steps.cluster_reads import pool_images
from gitopsbot.bot.steps.outcome import RETRY, WAIT_SLICE_SECONDS, SecretSource, StepOutcome
from gitopsbot.core.fleet.model import ClusterSpec, Component
from gitopsbot.core.records.batch_record import GateNote
from gitopsbot.core.records.journal import Journal, RollbackPoint, Step, StepKind, StepState
from gitopsbot.core.records.node_states import NodeSnapshot
from gitopsbot.core.rollouts import canary_smoke, rollout
from gitopsbot.core.rollouts import tf_objects as tf
from gitopsbot.core.rollouts.canary_smoke import (
    CanaryEvidence,
    CanaryResult,
    CanarySmoke,
    CanaryVerdict,
)
from gitopsbot.core.rollouts.gates import Gate, PrometheusEndpoint, needs_prometheus
from gitopsbot.errors import (
    ChartInvalid,
    ChartNotFound,
    GitOpsBotError,
    HelmChartUnusable,
    HelmReleaseLocked,
    PermanentError,
    TransientError,
)
from gitopsbot.ports.charts import ChartArchives
from gitopsbot.ports.cluster import Cluster
from gitopsbot.ports.helm import ChartRef, Helm
from gitopsbot.ports.prometheus import Prometheus


class Executor:
    """Runs steps against one cluster's ports. ``now`` comes from the caller's clock.

    ``wait_slice``: how long one step (controller ready, verify) or one pool pass may wait
    on the API server's watch before it returns (docs/executor.md, "Waiting"); 0 never
    waits. Bounded so that Lease loss and shutdown are never held up longer."""

    def __init__(
        self,
        *,
        cluster: Cluster,
        helm: Helm,
        secrets: SecretSource,
        smoke_test_timeout: int = 300,
        wait_slice: float = WAIT_SLICE_SECONDS,
        prometheus: Callable[[PrometheusEndpoint], Prometheus] | None = None,
        archives: ChartArchives | None = None,
    ) -> None:
        self.cluster = cluster
        # Where the archive an operation was admitted with is kept (bot.reviewed_chart).
        self.archives = archives
        self.helm = helm
        self.secrets = secrets
        # Builds the client of a cluster's prometheus: block (the endpoint is Git's, read
        # each pass), one per endpoint.
        self._prometheus_of = prometheus
        self._prometheus: dict[PrometheusEndpoint, Prometheus] = {}
        self.smoke_test_timeout = smoke_test_timeout
        self.wait_slice = wait_slice

    # -- the one place exceptions become outcomes -----------------------------------------

    def run(
        self,
        step: Step,
        journal: Journal,
        spec: ClusterSpec,
        *,
        now: datetime,
        rollback_to: RollbackPoint | None = None,
    ) -> StepOutcome:
        handlers: dict[StepKind, Callable[[], StepOutcome]] = {
            StepKind.BACKUP: lambda: self.backup(journal, spec),
            StepKind.CRDS: lambda: self.crds(journal, spec),
            StepKind.HELM_UPGRADE: lambda: self.helm_upgrade(journal, spec, now=now, step=step),
            StepKind.CONTROLLER_READY: lambda: controller_steps.controller_ready(
                self.cluster, step, spec, now, wait_slice=self.wait_slice
            ),
            StepKind.CONTROLLER_RESTART: lambda: controller_steps.controller_restart(
                self.cluster, step, spec, now
            ),
            StepKind.VERIFY: lambda: verify_step.verify(
                self.cluster,
                step,
                spec,
                now,
                rolled=tf.rolled(journal),
                predates=journal.created_at,
                wait_slice=self.wait_slice,
            ),
            StepKind.ROLLBACK: lambda: self.rollback(
                journal, spec, rollback_to, now=now, step=step
            ),
            StepKind.VENDOR_SECRET: lambda: rotation_steps.vendor_secret(
                self.cluster, self.secrets, spec
            ),
            StepKind.AGENT_RECONNECT: lambda: rotation_steps.agent_reconnect_check(
                self.cluster, step, spec, now
            ),
            StepKind.HYPERVISOR_RESTART: lambda: rotation_steps.hypervisor_restart_step(
                self.cluster, step, spec, now
            ),
        }
        handler = handlers.get(step.kind)
        if handler is None:
            return StepOutcome(StepState.FAILED, f"{step.kind} is not run by the executor")
        try:
            return handler()
        except HelmReleaseLocked as e:
            # Another helm took the release between the step's read and its call: the step
            # reads it again on the next pass (and blocks if it stays locked, see helm_upgrade).
            return StepOutcome(StepState.RUNNING, f"waiting: {e}", retry_after=RETRY)
        except HelmChartUnusable as e:
            # helm stopped before it touched the release: nothing to roll back (blocked).
            return StepOutcome(StepState.FAILED, f"{e}; nothing was changed", blocked=True)
        except TransientError as e:
            return StepOutcome(StepState.RUNNING, f"retrying: {e}", retry_after=e.retry_after)
        except (PermanentError, GitOpsBotError) as e:
            return StepOutcome(StepState.FAILED, str(e))

    # -- the steps (bot.steps.*) ----------------------------------------------------------

    def backup(self, journal: Journal, spec: ClusterSpec) -> StepOutcome:
        return backup_step.backup(self.cluster, self.helm, journal, spec)

    def chart_ref(self, journal: Journal, spec: ClusterSpec) -> ChartRef | None:
        """The archive the apply gate fetched and compared with the plan
        (``journal.chart_archive``), kept on disk (fetched again and checked when it is gone:
        ChartInvalid when the repository now serves other bytes); None: the release's
        repository, as before (an operation admitted without an archive, a rollback)."""
        if not journal.chart_archive or self.archives is None:
            return None
        rel = spec.release
        try:
            kept = self.archives.kept(
                rel.chart_repo_url, rel.chart_name, rel.version, journal.chart_archive
            )
        except (ChartInvalid, ChartNotFound) as e:
            # Before helm touched the release: the operation is blocked, nothing applied.
            raise HelmChartUnusable(f"chart {rel.chart_name} {rel.version}: {e}") from None
        return ChartRef(path=str(kept.path))

    def crds(self, journal: Journal, spec: ClusterSpec) -> StepOutcome:
        return crds_step.crds(
            self.cluster, self.helm, journal, spec, chart=self.chart_ref(journal, spec)
        )

    def helm_upgrade(
        self,
        journal: Journal,
        spec: ClusterSpec,
        *,
        now: datetime,
        step: Step | None = None,
        version: str | None = None,
    ) -> StepOutcome:
        return helm_step.helm_upgrade(
            self.helm,
            self.cluster,
            self.secrets,
            journal,
            spec,
            now=now,
            step=step,
            version=version,
            chart=self.chart_ref(journal, spec) if version is None else None,
        )

    def rollback(
        self,
        journal: Journal,
        spec: ClusterSpec,
        point: RollbackPoint | None,
        *,
        now: datetime,
        step: Step | None = None,
    ) -> StepOutcome:
        return rollback_step.rollback(
            self.helm, self.cluster, self.secrets, journal, spec, point, now=now, step=step,
            fallback_chart=self.fallback_chart,
        )  # fmt: skip

    def fallback_chart(
        self, spec: ClusterSpec, point: RollbackPoint
    ) -> tuple[ChartRef | None, str]:
        """The chart a rollback that cannot use ``helm rollback`` upgrades to, and what was
        compared (docs/plan.md, "Rollbacks"): the archive the operation that made the
        revision applied (``point.chart_archive``), kept on disk or fetched again and
        checked; none recorded: the repository's, as it serves it, and the note says so.
        Raises HelmChartUnusable (the rollback blocked, nothing applied) when the
        repository now serves other bytes under that version."""
        rel = spec.release
        what = f"chart {rel.chart_name} {point.chart_version}"
        if self.archives is None:
            return None, ""
        if not point.chart_archive:
            return None, (
                f"no chart archive was recorded when revision {point.helm_revision} was "
                f"applied: {what} read from the repository as it serves it, not compared"
            )
        try:
            kept = self.archives.kept(
                rel.chart_repo_url, rel.chart_name, point.chart_version, point.chart_archive
            )
        except (ChartInvalid, ChartNotFound) as e:
            raise HelmChartUnusable(
                f"rollback blocked: {what} is not the archive {point.chart_archive} that "
                f"{point.applied_by} applied at revision {point.helm_revision} ({e}): the "
                "chart was re-published under the same version and the bot will not install "
                "unreviewed bytes. Restore the archive in the repository, or pin the one you "
                "trust with chart.digest in release.yaml in a new commit"
            ) from None
        return ChartRef(path=str(kept.path)), (
            f"chart archive {point.chart_archive} as {point.applied_by} applied it"
        )

    def observe_pool(
        self, spec: ClusterSpec, pool: str, component: Component
    ) -> rollout.PoolObservation | None:
        return pool_switch.observe_pool(self.cluster, spec, pool, component)

    def await_pools(
        self,
        spec: ClusterSpec,
        pools: Sequence[str],
        timeout: float,
        *,
        seen: Mapping[str, str] | None = None,
    ) -> bool:
        """Wait up to ``timeout`` seconds (at most ``wait_slice``) for one of ``pools``'
        GPUPools to change from ``seen`` (pool → resourceVersion observed); True as soon as
        one did (``pool_switch.await_pools``)."""
        return pool_switch.await_pools(
            self.cluster, spec, pools, timeout, wait_slice=self.wait_slice, seen=seen
        )

    def set_switch(
        self,
        spec: ClusterSpec,
        pool: str,
        component: Component,
        *,
        open_: bool,
        batch_percentage: int | None = None,
        batch_interval_seconds: int | None = None,
    ) -> None:
        pool_switch.set_switch(
            self.cluster,
            spec,
            pool,
            component,
            open_=open_,
            batch_percentage=batch_percentage,
            batch_interval_seconds=batch_interval_seconds,
        )

    def node_snapshots(self, spec: ClusterSpec, pool: str) -> tuple[NodeSnapshot, ...]:
        """Each GPU node of ``pool`` as seen now, for its per-node state (issue 18)."""
        image = pool_images(self.cluster, spec).get(pool, {}).get(str(Component.HYPERVISOR))
        return node_reads.node_snapshots(self.cluster, spec, pool, image or "")

    def gpu_canary(
        self,
        spec: ClusterSpec,
        smoke: CanarySmoke,
        pool: str,
        op_id: str,
        now: datetime,
        started_at: datetime | None,
    ) -> CanaryResult:
        """One look at the GPU-path canary of ``pool`` (``bot.gpu_canary``); a cluster error
        is a result still running (the next look tries again, up to the smoke's timeout)."""
        try:
            return gpu_canary.run_canary_smoke(
                self.cluster, spec, smoke, pool, op_id, now, started_at
            )
        except TransientError as e:
            evidence = CanaryEvidence(canary_smoke.pod_name(op_id, pool), spec.release.namespace)
            return CanaryResult(CanaryVerdict.RUNNING, f"GPU canary: {e}", evidence, RETRY)

    def judge_gates(
        self, spec: ClusterSpec, pool: str, gates: Sequence[Gate]
    ) -> tuple[GateNote, ...]:
        """Judge a pool's gates between two batches (issue 18): one note per gate. Never
        raises for the cluster's or Prometheus's failures: they are inconclusive results
        with the error as evidence (``bot.gate_checks``)."""
        endpoint = spec.rollout.prometheus
        client: Prometheus | None = None
        trouble = ""
        wanted = any(needs_prometheus(g) for g in gates)
        if endpoint is not None and self._prometheus_of is not None and wanted:
            try:
                if endpoint not in self._prometheus:
                    self._prometheus[endpoint] = self._prometheus_of(endpoint)
                client = self._prometheus[endpoint]
            except GitOpsBotError as e:
                trouble = str(e)
        results = gate_checks.evaluate_gates(
            gates, prometheus=client, cluster=self.cluster, spec=spec, pool=pool
        )
        return tuple(
            GateNote(
                r.gate,
                str(r.outcome),
                f"{r.evidence} ({trouble})" if trouble and needs_prometheus(g) else r.evidence,
            )
            for g, r in zip(gates, results, strict=True)
        )

    def check(
        self,
        spec: ClusterSpec,
        pools: Sequence[str] | None = None,
        *,
        canary: bool = False,
        component: Component | None = None,
        rolled: Mapping[str, Collection[Component]] | None = None,
        predates: datetime | None = None,
    ) -> list[str]:
        return verify_step.check(
            self.cluster,
            spec,
            pools,
            canary=canary,
            component=component,
            rolled=rolled,
            predates=predates,
        )
