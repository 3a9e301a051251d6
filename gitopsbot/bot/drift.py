"""The drift check of one cluster: read the cluster (never write), build what Git wants, and
let ``core.drift.report`` compare them (docs/drift.md).

Reads through the executor's ports: Helm's release (status, history, values: from Helm's
storage, as every pass reads it), the TensorFusion CRDs, the TensorFusionCluster and its
GPUPools, the controller Deployment. Secrets the bot would merge in are resolved through the
executor's secret source only to be digested here; the values read from Helm are digested and
masked by ``core.drift.report.observed_values`` before anything else sees them.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from gitopsbot.bot.journal_store import JournalStore
from gitopsbot.bot.steps.cluster_reads import crd_digest, pool_images
from gitopsbot.bot.steps.executor import Executor
from gitopsbot.core.charts.chart import Chart
from gitopsbot.core.charts.images import effective_images
from gitopsbot.core.charts.postrender import rolling_update_policy
from gitopsbot.core.drift import baseline as drift_baseline
from gitopsbot.core.drift import report as drift
from gitopsbot.core.fleet.model import ClusterSpec
from gitopsbot.core.operations import manual_revision
from gitopsbot.core.records.journal import Journal
from gitopsbot.core.rollouts import tf_objects as tf
from gitopsbot.errors import GitOpsBotError

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class DriftInputs:
    """What Git and the state branch say about one cluster."""

    spec: ClusterSpec  # the cluster's files at the watched branch's head
    journal: Journal | None = None  # the cluster's current (or last) operation
    chart: Chart | None = None  # Git's chart version, for the images it defaults
    # Every recorded operation of the cluster (history, current, queued): what the bot
    # applied, pinned and left of the CRDs (core.drift_baseline). Empty: ``journal`` alone.
    journals: tuple[Journal, ...] = ()
    # The cluster's files at the commit of the operation the bot applied last or is applying,
    # and its chart, when Git's head holds a change not applied (None: not read).
    applied: ClusterSpec | None = None
    applied_chart: Chart | None = None

    def baseline(self) -> drift_baseline.Baseline:
        found = self.journals or ((self.journal,) if self.journal is not None else ())
        return drift_baseline.of(found)


def gather(
    spec: ClusterSpec,
    journals: Sequence[Journal],
    current: Journal | None,
    chart_for: Callable[[ClusterSpec], Chart | None],
    spec_at: Callable[[str, str], ClusterSpec | None] | None = None,
) -> DriftInputs:
    """The inputs of ``spec``'s check: with the applied operation's files when they differ
    from Git's head (``spec_at(sha, cluster)``; a commit that cannot be read leaves Git's
    head alone compared, as before)."""
    inputs = DriftInputs(spec, current, chart_for(spec), tuple(journals))
    sha = inputs.baseline().compared_sha()
    if spec_at is None or not sha:
        return inputs
    try:
        found = spec_at(sha, spec.name)
    except (GitOpsBotError, ValueError) as e:
        log.info("%s: drift: the cluster's files at %s not read: %s", spec.name, sha[:12], e)
        return inputs
    if found is None or found == spec:
        return inputs
    return replace(inputs, applied=found, applied_chart=chart_for(found))


def desired_state(
    spec: ClusterSpec,
    executor: Executor,
    inputs: DriftInputs,
    baseline: drift_baseline.Baseline | None = None,
) -> drift.DesiredState:
    """What the bot would deploy and pin from ``spec`` (Git's head, or the applied files),
    with what the bot recorded of its operations; ``inputs.chart`` is ``spec``'s chart."""
    base = baseline if baseline is not None else inputs.baseline()
    digests: dict[str, str] = {}
    unresolved: list[str] = []
    for ref in spec.credentials.secrets:
        try:
            resolved = executor.secrets.resolve_all([ref])
        except GitOpsBotError as e:
            log.info("%s: drift: secret at %s not resolved: %s", spec.name, ref.values_path, e)
            unresolved.append(ref.values_path)
            continue
        digests.update({p: drift.secret_digest(v) for p, v in resolved.items()})
    images = effective_images(spec.values, inputs.chart) if inputs.chart is not None else {}
    return drift.DesiredState(
        chart_version=spec.release.version,
        values=spec.values,
        secret_digests=digests,
        secret_paths=_secret_paths(spec),
        unresolved_secrets=tuple(unresolved),
        crd_digest=base.crd_digest,
        pool_policies={p.name: rolling_update_policy(p) for p in spec.rollout.pools},
        pins=base.pins,
        pinned_by=base.pinned_by(),
        images={k: v for k, v in images.items() if v},
    )


def _secret_paths(spec: ClusterSpec) -> tuple[str, ...]:
    refs = tuple(r.values_path for r in spec.credentials.secrets)
    return (*spec.credentials.secret_paths, *refs)


def observed_state(
    spec: ClusterSpec,
    executor: Executor,
    journal: Journal | None,
    applied: Journal | None = None,
) -> drift.ObservedState:
    """A snapshot of ``spec``'s cluster, read only. ``applied``: the operation that made the
    bot's last Helm revisions, when the current one (``journal``) applied nothing (held)."""
    helm, cluster, rel = executor.helm, executor.cluster, spec.release
    history = helm.history(rel.release_name, rel.namespace)
    latest = history[-1] if history else None
    if latest is None:
        return drift.ObservedState(chart_version="")
    values = helm.get_values(rel.release_name, rel.namespace)
    tfc = cluster.get(tf.TF, "TensorFusionCluster", None, tf.tfc_name(spec))
    tfc_policies = {
        str(entry.get("name")): dict(tf.rolling_policy(tfc or {}, str(entry.get("name"))))
        for entry in ((tfc or {}).get("spec") or {}).get("gpuPools") or []
    }
    gp_policies: dict[str, Mapping[str, Any] | None] = {}
    gp_names: dict[str, str] = {}
    for pool in spec.rollout.pools:
        name = tf.gpupool_name(spec, pool.name)
        gp_names[pool.name] = name
        gpupool = cluster.get(tf.TF, "GPUPool", None, name)
        if gpupool is not None:
            manager = (gpupool.get("spec") or {}).get("nodeManagerConfig") or {}
            gp_policies[pool.name] = dict(manager.get("nodePoolRollingUpdatePolicy") or {})
    return drift.ObservedState(
        chart_version=latest.chart_version,
        revision=latest.revision,
        values=drift.observed_values(values, _secret_paths(spec)),
        crd_digest=crd_digest(cluster),
        tfc_policies=tfc_policies,
        gpupool_policies=gp_policies,
        tfc_name=tf.tfc_name(spec),
        gpupool_names=gp_names,
        pool_images=pool_images(cluster, spec),
        controller_image=_controller_image(executor, spec),
        # A held change made no revision: a person's helm upgrade is newer than the applied
        # operation's, whatever the current one is.
        manual=manual_revision.detect(latest, applied or journal),
        operation_active=journal is not None and journal.active,
    )


def _controller_image(executor: Executor, spec: ClusterSpec) -> str:
    found = executor.cluster.get(
        "apps/v1", "Deployment", spec.release.namespace, tf.controller_name(spec)
    )
    containers = ((((found or {}).get("spec") or {}).get("template") or {}).get("spec") or {}).get(
        "containers"
    ) or []
    return str(containers[0].get("image") or "") if containers else ""


class _ReadOnly:
    """A port whose writes are refused: the drift check never changes the cluster. With
    ``before``, each read first calls it (``run`` gives way there to woken passes)."""

    def __init__(
        self, port: Any, reads: frozenset[str], before: Callable[[], None] | None = None
    ) -> None:
        self._port, self._reads, self._before = port, reads, before

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name not in self._reads:
            raise AttributeError(f"the drift check only reads: {name} is not allowed")
        found = getattr(self._port, name)
        before = self._before
        if before is None:
            return found

        def read(*args: Any, **kwargs: Any) -> Any:
            before()
            return found(*args, **kwargs)

        return read


_CLUSTER_READS = frozenset({"get", "list", "read_secret"})
_HELM_READS = frozenset({"status", "history", "get_values"})


def read_only(executor: Executor, before_read: Callable[[], None] | None = None) -> Executor:
    """``executor`` with ports that only read (a copy: the executor itself is shared);
    ``before_read`` is called before each read."""
    found = copy.copy(executor)
    found.cluster = _ReadOnly(executor.cluster, _CLUSTER_READS, before_read)
    found.helm = _ReadOnly(executor.helm, _HELM_READS, before_read)
    return found


def check(
    inputs: DriftInputs,
    executor_for: Callable[[ClusterSpec], Executor],
    before_read: Callable[[], None] | None = None,
) -> drift.DriftReport:
    """The drift of one cluster: read, then compare. Raises the adapters' errors (a cluster
    that cannot be reached is no verdict). ``before_read``: called before each read of the
    cluster or Helm (``bot.drift_watch`` gives way there)."""
    executor = read_only(executor_for(inputs.spec), before_read)
    base = inputs.baseline()
    observed = observed_state(inputs.spec, executor, inputs.journal, base.applied)
    desired = desired_state(inputs.spec, executor, inputs, base)
    applied = None
    if inputs.applied is not None:
        # The applied files' own chart: never Git's head's images for an older version.
        own = replace(inputs, chart=inputs.applied_chart)
        applied = desired_state(inputs.applied, executor, own, base)
    return drift.compare(
        inputs.spec.name, desired, observed, applied=applied, pending_why=base.pending_why()
    )


def status_line(store: JournalStore, cluster: str) -> str | None:
    """For ``status`` (Git only): the last drift ``run`` recorded for ``cluster``, or None."""
    found = store.drift(cluster)
    return None if found is None else found.describe()


def summary_lines(reports: Mapping[str, drift.DriftReport | str]) -> list[str]:
    """One line per cluster, of fresh reports: its drift summary, or why it was not checked."""
    out = []
    for name, found in sorted(reports.items()):
        out.append(found.summary() if isinstance(found, drift.DriftReport) else f"{name}: {found}")
    return out


def check_clusters(
    specs: Sequence[ClusterSpec],
    journal_for: Callable[[str], Journal | None],
    chart_for: Callable[[ClusterSpec], Chart | None],
    executor_for: Callable[[ClusterSpec], Executor],
    *,
    journals_for: Callable[[str], Sequence[Journal]] | None = None,
    spec_at: Callable[[str, str], ClusterSpec | None] | None = None,
    before_read: Callable[[], None] | None = None,
) -> dict[str, drift.DriftReport | str]:
    """Each cluster's report, or why it could not be checked (its cluster or Helm
    unavailable): one cluster's failure does not stop the others. ``journals_for``: every
    recorded operation of a cluster; ``spec_at``: a cluster's files at a watched-branch
    commit (``gather``); ``before_read``: called before each read of a cluster or Helm."""
    out: dict[str, drift.DriftReport | str] = {}
    for spec in specs:
        try:
            current = journal_for(spec.name)
            journals = journals_for(spec.name) if journals_for is not None else ()
            inputs = gather(spec, journals, current, chart_for, spec_at)
            out[spec.name] = check(inputs, executor_for, before_read)
        except GitOpsBotError as e:
            first = str(e).splitlines()[0] if str(e) else type(e).__name__
            out[spec.name] = f"not checked: {first}"[:300]
    return out
