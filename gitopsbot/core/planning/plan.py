"""The upgrade plan, computed purely from (deployed state, desired state, chart metadata).

``make_plan`` returns a ``Plan``; the executor and the renderer rely on these names:

- ``Plan.steps``: ordered ``Step``s (``StepKind``: backup R6, crds R7, helm-upgrade R8,
  controller-ready R8, controller-restart R24, pool-rollout R10, verify R15), each with the
  procedure rule it follows and its impact on running work (R3's impact column);
- ``Plan.pool_phases``: per pool (rollout order), which components roll (``components``, in
  the pool's phase order), which changed but wait behind a closed switch (``waiting``, R12),
  why, and the pool's ``timeline`` (F4); ``admission``: the pool's issue-18 settings (gates,
  gate retries, maxUnavailable, windowFit, waitForWorkloads, maxTenantDisruption, the GPU
  canary smoke) as (key, description) pairs, empty for a pool without them, whose effect on
  the estimate is in ``timeline.admission_notes``;
- ``Plan.verdicts``: the policy verdicts (``core.policy.Verdict``); ``Plan.decision`` folds
  them (deny always wins);
- ``versions``, ``values_diff`` (secrets already masked), ``images``, ``crd_diff``,
  ``schema_problems``, ``notes``; ``baseline_secret_literals`` when a Git baseline still
  holds literal secrets (masked; a note says to remove and rotate them).

A component rolls in a pool when its configuration changes (its image, its pool
componentConfig, or for the hypervisor the vendor ProviderConfig) and the pool's switch for it
is on; a controller image change alone may also roll the hypervisor (F4). Nothing rolls on a
first install: the controller records hashes on first sight (tensorfusion-facts §3.2). A
hypervisor port change (R23) rolls the hypervisor and the worker (the worker's hash covers the
port), and a note says how the pool's workloads get rebuilt.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from gitopsbot.core.charts.chart import Chart, ChartIndex
from gitopsbot.core.charts.crd_diff import CrdDiff, diff_charts
from gitopsbot.core.charts.images import ImageChange, image_changes
from gitopsbot.core.charts.observed import DeployedState
from gitopsbot.core.charts.port_changes import DEFAULT_HYPERVISOR_PORT as DEFAULT_HYPERVISOR_PORT
from gitopsbot.core.charts.port_changes import HYPERVISOR_PORT_KEY as HYPERVISOR_PORT_KEY
from gitopsbot.core.charts.port_changes import PortChange as PortChange
from gitopsbot.core.charts.port_changes import hypervisor_port_changes as hypervisor_port_changes
from gitopsbot.core.charts.schema_check import check_values
from gitopsbot.core.charts.values_diff import ValuesDiff, diff_values
from gitopsbot.core.fleet.model import ClusterSpec, Component, Location, PoolPolicy
from gitopsbot.core.fleet.secrets import find_secret_literals
from gitopsbot.core.planning import reviewed_chart
from gitopsbot.core.planning.plan_admission import admission_settings as admission_settings
from gitopsbot.core.planning.plan_admission import describe_gate as describe_gate
from gitopsbot.core.policy import (
    Decision,
    PolicyInput,
    Rule,
    Verdict,
    decide,
    evaluate,
    restart_needed,
)
from gitopsbot.core.records.plan_steps import IMPACT as IMPACT
from gitopsbot.core.records.plan_steps import Step as Step
from gitopsbot.core.records.plan_steps import StepKind as StepKind
from gitopsbot.core.rollouts.canary_smoke import CanarySmoke
from gitopsbot.core.rollouts.timeline import PoolTimeline, pool_timeline
from gitopsbot.core.rotation import credentials as rotation
from gitopsbot.core.rotation.plan import rotation_alone, rotation_steps
from gitopsbot.errors import Problem

# R24's config keys whose change needs a controller restart.
RESTART_PREFIXES = ("dynamicConfig", "schedulerConfig")
# Values prefixes per component (besides its image): the pool template the chart renders, and
# for the hypervisor the NVIDIA ProviderConfig (R10: "vendor ProviderConfig changes").
COMPONENT_PREFIXES: Mapping[Component, tuple[str, ...]] = {
    Component.HYPERVISOR: ("cluster.pool.componentConfig.hypervisor", "providerConfigs"),
    Component.WORKER: ("cluster.pool.componentConfig.worker",),
    Component.CLIENT: ("cluster.pool.componentConfig.client",),
}
# The hypervisor also rolls when the NVIDIA ProviderConfig changes (R10), and that object carries
# the middleware, worker and client images.
COMPONENT_IMAGES: Mapping[Component, tuple[str, ...]] = {
    Component.HYPERVISOR: ("hypervisor", "middleware", "worker", "client"),
    Component.WORKER: ("worker",),
    Component.CLIENT: ("client",),
}


@dataclass(frozen=True, slots=True)
class PoolPhase:
    pool: str
    components: tuple[Component, ...]
    waiting: tuple[Component, ...]
    reasons: Mapping[Component, str]
    timeline: PoolTimeline
    admission: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class VersionChange:
    chart_before: str
    chart_after: str
    app_before: str
    app_after: str

    @property
    def chart_changed(self) -> bool:
        return self.chart_before != self.chart_after

    @property
    def app_changed(self) -> bool:
        return self.app_before != self.app_after


@dataclass(frozen=True, slots=True)
class Plan:
    cluster: str
    environment: str
    release: str  # namespace/name
    baseline: str  # "helm revision N", "git:<ref>" or "nothing deployed"
    versions: VersionChange
    steps: tuple[Step, ...]
    values_diff: ValuesDiff  # masked
    images: tuple[ImageChange, ...]
    crd_diff: CrdDiff
    pool_phases: tuple[PoolPhase, ...]
    verdicts: tuple[Verdict, ...]
    decision: Decision
    schema_problems: tuple[Problem, ...] = ()
    notes: tuple[str, ...] = field(default_factory=tuple)
    # Why the target chart could not be read ("" when it was): then there are no steps,
    # images, CRDs or schema checks, and CHART-NOT-IN-INDEX denies.
    chart_problem: str = ""
    # Secret-looking literals the Git baseline still holds (values path → where), masked.
    baseline_secret_literals: Mapping[str, Location] = field(default_factory=dict)
    # The target chart's archive and rendered manifests digests (``core.planning.reviewed_chart``),
    # set by whoever could fetch and render the chart (``bot.reviewed_chart``); None when not.
    chart_digests: reviewed_chart.ChartDigests | None = None

    @property
    def changes_anything(self) -> bool:
        return bool(self.steps)


def _values_file(desired: ClusterSpec) -> str:
    return next((f for f in desired.files if f.endswith("values.yaml")), "values.yaml")


def component_reasons(
    diff: ValuesDiff,
    images: tuple[ImageChange, ...],
    *,
    first_install: bool,
    ports: tuple[PortChange, ...] | None = None,
) -> dict[Component, str]:
    """Components whose configuration changes, with the reason. ``ports``: the diff's
    ``hypervisor_port_changes`` when the caller has them already."""
    if first_install:
        return {}
    by_name = {i.component: i for i in images}
    out: dict[Component, str] = {}
    for comp in Component:
        moved = [by_name[n] for n in COMPONENT_IMAGES[comp] if n in by_name and by_name[n].changed]
        if moved:
            out[comp] = "; ".join(f"{i.component} image {i.before} → {i.after}" for i in moved)
            continue
        touched = [p for p in COMPONENT_PREFIXES[comp] if diff.touches(p)]
        if touched:
            out[comp] = f"{', '.join(touched)} changed"
    ports = hypervisor_port_changes(diff) if ports is None else ports
    if ports:
        # The hypervisor pod spec and the worker's (HYPERVISOR_PORT) both carry the port, so
        # both hashes change (tensorfusion-facts §3.3): R23's rebuild of the workloads.
        where = ", ".join(p.path for p in ports)
        out.setdefault(Component.HYPERVISOR, f"{where} changed")
        out.setdefault(
            Component.WORKER, f"{where} changed: worker pods carry the hypervisor port (R23)"
        )
    controller = by_name.get("controller")
    if Component.HYPERVISOR not in out and controller is not None and controller.changed:
        out[Component.HYPERVISOR] = (
            "controller image changes: the pool hash covers code-level defaults, so the "
            "hypervisor may roll (F4)"
        )
    return out


def _pool_phase(
    pool: PoolPolicy,
    reasons: Mapping[Component, str],
    nodes: int,
    smoke: CanarySmoke | None = None,
) -> PoolPhase:
    order = [*pool.phases, *(c for c in Component if c not in pool.phases)]
    rolling = tuple(c for c in order if c in reasons and pool.switch(c))
    waiting = tuple(c for c in order if c in reasons and not pool.switch(c))
    return PoolPhase(
        pool=pool.name,
        components=rolling,
        waiting=waiting,
        reasons={c: reasons[c] for c in (*rolling, *waiting)},
        timeline=pool_timeline(pool, rolling, nodes=nodes),
        admission=admission_settings(pool, smoke),
    )


def _port_note(ports: tuple[PortChange, ...], phases: tuple[PoolPhase, ...]) -> str:
    """R23: what a port change does to running workloads, and how each pool rebuilds them."""
    what = ", ".join(f"`{p.path}` {p.before} → {p.after}" for p in ports)
    pools: list[str] = []
    for phase in phases:
        if phase.timeline.nodes <= 0:
            pools.append(f"pool {phase.pool} has no GPU nodes: nothing to rebuild")
        elif Component.WORKER in phase.components:
            pools.append(
                f"pool {phase.pool}: autoUpdateWorker is on, so this plan's worker rollout "
                "rebuilds each TensorFusionWorkload's worker pods in batches"
            )
        else:
            pools.append(
                f"pool {phase.pool}: autoUpdateWorker is off, so nothing rebuilds them: turn "
                "it on for the pool in rollout.yaml in this change, or, once the pool's "
                "hypervisors are replaced, delete its worker pods that still carry the old "
                "port (`kubectl get pods -A -l tensor-fusion.ai/component=worker` lists them; "
                "their workloads recreate them)"
            )
    how = "; ".join(pools) if pools else "no pool is in the rollout policy"
    return (
        f"R23: the hypervisor port changes ({what}). Running pods keep the port they were "
        "created with (worker pods carry it as HYPERVISOR_PORT) and lose their connection "
        "to the hypervisor once a node's new hypervisor listens on the new port, so the "
        f"pool's workloads must be rebuilt: {how}. Apps connected to a rebuilt worker lose "
        "their GPU session (R3); restart those that do not reconnect"
    )


def _literals_note(deployed: DeployedState, desired: ClusterSpec, baseline: str) -> str:
    """The baseline holds secret-looking literals: where, and what to do about them."""
    literals = sorted(deployed.secret_literals.items(), key=lambda i: (i[1].file, i[1].line))
    where = ", ".join(
        f"`{loc.file}:{loc.line}` (`{path}`)" if loc.line else f"`{loc.file}` (`{path}`)"
        for path, loc in literals
    )
    declared = [
        *desired.credentials.secret_paths,
        *(s.values_path for s in desired.credentials.secrets),
    ]
    kept = set(find_secret_literals(desired.values, declared)) & set(deployed.secret_literals)
    one = len(literals) == 1
    it, them = ("it", "it") if one else ("them", "each")
    action = (
        f"Remove {it} from values.yaml (leave the value empty and reference it in credentials.yaml)"
        if kept
        else f"This change removes {it} from values.yaml"
    )
    return (
        f"the baseline ({baseline}) holds {len(literals)} secret-looking "
        f"literal{'' if one else 's'} in values.yaml, masked in this plan: {where}. {action}; "
        f"rotate {them} at its source all the same: a secret committed once stays readable "
        "in the Git history (R17; R18 agent token, R19 cloud vendor keys, R20 GreptimeDB "
        "password)"
    )


def make_plan(
    *,
    deployed: DeployedState | None,
    desired: ClusterSpec,
    target_chart: Chart | None,
    deployed_chart: Chart | None,
    index: ChartIndex | None,
    rules: tuple[Rule, ...] = (),
    chart_source: str = "",
    chart_problem: str = "",
    canary_smoke: CanarySmoke | None = None,
) -> Plan:
    """The plan. ``target_chart`` None (with ``chart_problem`` saying why, e.g. the version is
    not in the index) still gives a plan: its verdicts carry the deny, its steps are empty —
    a pull request gets a verdict, not an error. ``chart_source`` names where charts were read
    (a --chart-dir path) for messages; "" means the release's repository. ``canary_smoke``:
    the cluster's ``canary-smoke.yaml`` (else the one ``desired`` carries, if any), listed
    with the pools it applies to."""
    canary_smoke = canary_smoke if canary_smoke is not None else desired.canary_smoke
    if target_chart is None:
        chart_problem = chart_problem or "the target chart could not be read"
    rel = desired.release
    values_file = _values_file(desired)
    base_values = deployed.values if deployed is not None else {}
    diff = diff_values(base_values, desired.values)
    images: tuple[ImageChange, ...] = ()
    crds = CrdDiff(())
    schema_problems: tuple[Problem, ...] = ()

    def locate(path: str) -> Location | None:
        return desired.values_locations.get(path)

    if target_chart is not None:
        images = image_changes(
            deployed_values=deployed.values if deployed is not None else None,
            deployed_chart=deployed_chart,
            desired_values=desired.values,
            target_chart=target_chart,
        )
        crds = diff_charts(deployed_chart, target_chart)
        schema_problems = check_values(
            desired.values, target_chart, file=values_file, locate=locate
        )
    versions = VersionChange(
        chart_before=deployed.chart_version if deployed else "",
        chart_after=target_chart.version if target_chart is not None else rel.version,
        app_before=deployed.app_version if deployed else "",
        app_after=target_chart.app_version if target_chart is not None else "",
    )
    verdicts = evaluate(
        rules,
        PolicyInput(
            cluster=desired,
            deployed=deployed,
            target_chart=target_chart,
            deployed_chart=deployed_chart,
            index=index,
            values_diff=diff,
            images=images,
            crd_diff=crds,
            schema_problems=schema_problems,
            chart_source=chart_source,
            chart_problem=chart_problem,
        ),
    )
    if target_chart is not None:
        pin = reviewed_chart.pin_verdict(
            rel.chart_digest,
            reviewed_chart.archive_digest(target_chart.digest),
            desired.locations.get("release.yaml:chart.digest"),
            chart_source,
        )
        verdicts = (*verdicts, pin) if pin is not None else verdicts
    rotated = rotation.rotated(
        deployed.credentials if deployed is not None else None, desired.credentials
    )
    if rotated:
        alone = rotation_alone(rotated, diff, desired, versions.chart_changed)
        if alone is not None:
            verdicts = (*verdicts, alone)
    first_install = deployed is None
    ports = hypervisor_port_changes(diff) if not first_install else ()
    reasons = component_reasons(diff, images, first_install=first_install, ports=ports)
    node_counts = deployed.pool_nodes if deployed else {}
    phases = tuple(
        _pool_phase(p, reasons, node_counts.get(p.name, p.nodes), canary_smoke)
        for p in desired.rollout.ordered_pools()
    )
    restart = restart_needed(diff, images, RESTART_PREFIXES)
    # Without the target chart nothing can be planned (its CRDs, defaults, images).
    upgrade = target_chart is not None and (first_install or versions.chart_changed or bool(diff))
    steps: list[Step] = []
    notes: list[str] = []
    release = f"{rel.namespace}/{rel.release_name}"
    rotating = bool(rotated) and not any(v.rule_id == rotation.ALONE_RULE for v in verdicts)
    if rotating and target_chart is not None:
        steps.extend(rotation_steps(desired, rotated))
        notes.append(
            f"rotation of the {rotation.describe(rotated)}: the bot reads the new value from "
            "the referenced source at apply time; change it at the vendor first (docs/rotation.md)"
        )
    elif upgrade and target_chart is not None:
        if deployed is not None:
            steps.append(
                Step(
                    StepKind.BACKUP,
                    f"Back up `helm get values {rel.release_name}` and the TensorFusion objects",
                    "R6",
                    IMPACT["backup"],
                )
            )
        changed_crds = len(crds.changes)
        steps.append(
            Step(
                StepKind.CRDS,
                f"Apply chart {rel.version}'s {len(target_chart.crd_defs)} CRD(s) "
                f"server-side ({changed_crds} change(s), {len(crds.breaking)} breaking)",
                "R7",
                IMPACT["crds"],
            )
        )
        verb = "install" if first_install else "upgrade"
        steps.append(
            Step(
                StepKind.HELM_UPGRADE,
                f"helm {verb} {rel.release_name} {rel.chart_name} --version {rel.version} "
                f"-n {rel.namespace} with the whole values file",
                "R8",
                IMPACT["controller"],
            )
        )
        steps.append(
            Step(
                StepKind.CONTROLLER_READY,
                f"Wait for deploy/{rel.release_name}-controller to be rolled out "
                f"(timeout {desired.rollout.controller_ready_timeout_seconds}s)",
                "R8",
                IMPACT["controller-ready"],
            )
        )
        if restart and not first_install:
            steps.append(
                Step(
                    StepKind.CONTROLLER_RESTART,
                    f"rollout restart deploy/{rel.release_name}-controller "
                    f"({', '.join(restart)} changed; helm upgrade alone does not restart it)",
                    "R24",
                    IMPACT["controller"],
                )
            )
        for phase in phases:
            # A pool without GPU nodes does not update (R14); the timeline notes it.
            for comp in phase.components if phase.timeline.nodes > 0 else ():
                tl = next(t for t in phase.timeline.phases if t.component == comp)
                steps.append(
                    Step(
                        StepKind.POOL_ROLLOUT,
                        f"Roll {comp.value} in pool {phase.pool}: {tl.batches} batch(es) of "
                        f"{tl.batch_size} node(s) at {tl.batch_percentage}%",
                        "R10",
                        IMPACT[comp],
                        pool=phase.pool,
                        components=(comp,),
                    )
                )
            for comp in phase.waiting:
                notes.append(
                    f"pool {phase.pool}: {comp.value} configuration changes but "
                    f"autoUpdate{comp.value.capitalize()} is off: it keeps its old version "
                    "and waits (R12)"
                )
        steps.append(
            Step(
                StepKind.VERIFY,
                "Verify the TensorFusionCluster, pools, nodes and one hypervisor per GPU node"
                + (", then run the smoke test" if desired.smoke_test else ""),
                "R15",
                IMPACT["verify"],
            )
        )
    if chart_problem:
        notes.append(
            f"no steps: the target chart {rel.chart_name} {rel.version} could not be read "
            f"({chart_problem})"
        )
    elif first_install:
        notes.append("nothing deployed: the controller records component hashes and rolls nothing")
    baseline = (
        "nothing deployed"
        if deployed is None
        else (
            f"helm revision {deployed.revision}" if deployed.source == "helm" else deployed.source
        )
    )
    # The notes a reviewer must not miss come first: literal secrets, then R23.
    if ports:
        notes.insert(0, _port_note(ports, phases))
    if deployed is not None and deployed.secret_literals:
        notes.insert(0, _literals_note(deployed, desired, baseline))
    return Plan(
        cluster=desired.name,
        environment=desired.environment.value,
        release=release,
        baseline=baseline,
        versions=versions,
        steps=tuple(steps),
        values_diff=diff.masked(desired.credentials.secret_paths),
        images=images,
        crd_diff=crds,
        pool_phases=phases,
        verdicts=verdicts,
        decision=decide(verdicts),
        schema_problems=schema_problems,
        notes=tuple(notes),
        chart_problem=chart_problem,
        baseline_secret_literals=dict(deployed.secret_literals) if deployed is not None else {},
    )
