"""R7 / R16 CRDs: the target chart's ``crds/`` are server-side applied and must be
established before the Helm upgrade. Never downgraded (R16: an older target skips the step),
and refused when a version still in ``status.storedVersions`` would be dropped (R7)."""

from __future__ import annotations

import tempfile
from collections.abc import Mapping
from pathlib import Path

from gitopsbot.bot.steps.cluster_reads import CRD_API, crd_digest
from gitopsbot.bot.steps.outcome import StepOutcome
from gitopsbot.core.charts import chart as chart_mod
from gitopsbot.core.fleet.model import ClusterSpec
from gitopsbot.core.records import journal as journal_mod
from gitopsbot.core.records.journal import Effect, Journal, StepState
from gitopsbot.ports.cluster import Cluster
from gitopsbot.ports.helm import ChartRef, Helm


def crds(
    cluster: Cluster,
    helm: Helm,
    journal: Journal,
    spec: ClusterSpec,
    chart: ChartRef | None = None,
) -> StepOutcome:
    """``chart``: the archive the apply gate admitted (``Executor.chart_ref``); else the
    release's repository."""
    point = journal.rollback_point
    target = spec.release.version
    before = point.chart_version if point else ""
    if chart_mod.is_version(before) and (
        chart_mod.semver_key(target) < chart_mod.semver_key(before)
    ):
        return StepOutcome(
            StepState.SKIPPED,
            f"target {target} is older than {before}: CRDs are never downgraded (R16)",
        )
    with tempfile.TemporaryDirectory(prefix="gitopsbot-chart-") as tmp:
        chart_dir = helm.pull(chart or ChartRef.of(spec.release), target, Path(tmp))
        crd_dir = chart_dir / "crds"
        docs = {
            p.name: p.read_text(encoding="utf-8")
            for p in sorted(crd_dir.glob("*.y*ml"))
            if p.is_file()
        }
    if not docs:
        return StepOutcome(StepState.SKIPPED, f"chart {target} has no crds/")
    refused = _dropped_stored_versions(cluster, docs)
    if refused:
        return StepOutcome(StepState.FAILED, "refused (R7): " + "; ".join(refused))
    results = cluster.apply_crds(docs)
    bad = [f"{r.name}: {r.message or 'not established'}" for r in results if not r.ok]
    if bad:
        return StepOutcome(StepState.FAILED, "CRDs not applied: " + "; ".join(bad))
    return StepOutcome(
        StepState.SUCCEEDED,
        f"{len(results)} CRDs server-side applied and established",
        effect=Effect(description=crd_digest(cluster)),
    )


def _dropped_stored_versions(cluster: Cluster, docs: Mapping[str, str]) -> list[str]:
    problems = []
    for text in docs.values():
        for doc in journal_mod.load_all_yaml(text):
            if not isinstance(doc, Mapping) or doc.get("kind") != "CustomResourceDefinition":
                continue
            name = str((doc.get("metadata") or {}).get("name", ""))
            served = {str(v.get("name")) for v in (doc.get("spec") or {}).get("versions") or []}
            live = cluster.get(CRD_API, "CustomResourceDefinition", None, name)
            stored = ((live or {}).get("status") or {}).get("storedVersions") or []
            dropped = [v for v in stored if v not in served]
            if dropped:
                problems.append(
                    f"{name}: version(s) {', '.join(dropped)} still in status.storedVersions "
                    "would be dropped; migrate the stored objects first"
                )
    return problems
