"""``gitopsbot rehearse``'s sandbox: one cluster's upgrade played on a virtual clock.

The cluster is built from its own spec: its pools with their node counts (declared in
rollout.yaml, or read from a live cluster by the caller), the TensorFusionCluster the target
chart renders (real ``helm template`` with the cluster's values), the chart's CRDs, all in the
API emulator's Store with the controller simulator on a ``ManualClock``. The rehearsal then
does what the bot does with the pools' switches (R10–R12): pools in the bot's order
(``RolloutPolicy.rollout_order``: ``canaryPool`` first, then ``order``), one at a time;
each waits for its maintenance window; the canary batch at ``canaryBatchPercentage``, a
pause for its checks, then the rest at ``batchPercentage``; phases one after another; the
switch closed at the window's end and opened again at the next opening; the pool stopped
when its ``maxDuration`` runs out (switch-open time of each phase, as the bot measures it),
which fails the operation as ``onFailure`` says.

The clock never waits: after each settle it jumps to the simulator's next due time (a pod
ready, a batch interval over), to a window's end or opening, or to a deadline, whichever
comes first, so hours of windows and batch intervals take milliseconds to seconds of real
time. Pods become ready after the plan's readiness assumptions (core/rollouts/timeline.py), so the
comparison with the plan's estimate measures the rollout mechanics (batches, intervals,
canary, windows), not the assumptions.

Not played (docs/rehearsal.md says so): window-fit's "does the next batch fit" (the switch
closes at the window's end instead), gates, the availability budget, parallel pools
(``maxParallelPools`` > 1 rolls them one at a time here), stall timeouts, real pod failures.
"""

from __future__ import annotations

import copy
import subprocess
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

from ruamel.yaml import YAML

from gitopsbot.core import rehearsal as rh
from gitopsbot.core.fleet.model import ClusterSpec, Component, PoolPolicy
from gitopsbot.core.planning.plan import Plan
from gitopsbot.core.rollouts import timeline, windows
from gitopsbot.errors import GitOpsBotError
from gitopsbot.sandbox.apiserver.store import Store
from gitopsbot.sandbox.simulator import ControllerSim, ManualClock, SimConfig, WorkloadSpec

TF = "tensor-fusion.ai/v1"
Obj = dict[str, Any]
BASELINE_TAG = "rehearsal-baseline"  # the images the sandbox starts from
MAX_TICKS = 20_000  # a runaway guard: a 1000-node pool at 1% takes ~400 ticks


class RehearsalError(GitOpsBotError):
    """The rehearsal could not be set up (chart not rendered, no TensorFusionCluster)."""


@dataclass(frozen=True, slots=True)
class ChartRef:
    """Where ``helm template`` finds the target chart: a local directory or archive, or
    the release's repository (``--repo``)."""

    name: str
    version: str
    path: Path | None = None
    repo_url: str = ""

    def args(self) -> list[str]:
        if self.path is not None:
            return [str(self.path)]
        return [self.name, "--repo", self.repo_url, "--version", self.version]


def find_chart(chart_dirs: list[Path], name: str, version: str, repo_url: str) -> ChartRef:
    """The chart in the first of ``chart_dirs`` that has it (``<name>-<version>.tgz``, a
    directory of that name, or a chart directory of that name and version), else the
    repository."""
    for d in chart_dirs:
        candidates = [d, d / f"{name}-{version}", d / f"{name}-{version}.tgz"]
        for c in candidates:
            if c.suffix == ".tgz" and c.is_file():
                return ChartRef(name, version, path=c)
            meta = c / "Chart.yaml"
            if meta.is_file():
                doc = YAML(typ="safe").load(meta.read_text()) or {}
                if doc.get("name") == name and str(doc.get("version")) == version:
                    return ChartRef(name, version, path=c)
    return ChartRef(name, version, repo_url=repo_url)


def render_tfc(helm: Path, chart: ChartRef, spec: ClusterSpec, workdir: Path) -> Obj:
    """The TensorFusionCluster the target chart renders with the cluster's values."""
    workdir.mkdir(parents=True, exist_ok=True)
    values = workdir / "values.yaml"
    with values.open("w") as f:
        YAML(typ="safe").dump(dict(_plain(spec.values)), f)
    rel = spec.release
    done = subprocess.run(
        [
            str(helm),
            "template",
            rel.release_name,
            *chart.args(),
            "-n",
            rel.namespace,
            "-f",
            str(values),
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    if done.returncode != 0:
        raise RehearsalError(f"helm template {' '.join(chart.args())}: {done.stderr.strip()}")
    docs = [d for d in YAML(typ="safe").load_all(done.stdout) if isinstance(d, dict)]
    found = [d for d in docs if d.get("kind") == "TensorFusionCluster"]
    if not found or not found[0].get("spec", {}).get("gpuPools"):
        raise RehearsalError(f"{chart.name} {chart.version} renders no TensorFusionCluster pool")
    return dict(found[0])


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


@dataclass
class _Pool:
    policy: PoolPolicy
    nodes: int
    components: tuple[Component, ...]
    window: windows.Window | None


@dataclass
class Sandbox:
    """The Store, the simulator on a manual clock, and the moments seen."""

    store: Store
    sim: ControllerSim
    clock: ManualClock
    tfc_name: str
    moments: list[rh.Moment] = field(default_factory=list)

    def now(self) -> datetime:
        return self.clock.now()

    def say(self, pool: str, what: str) -> None:
        self.moments.append(rh.Moment(self.now(), pool, what))

    def jump(self, when: datetime) -> None:
        ahead = (when - self.now()).total_seconds()
        if ahead > 0:
            self.clock.advance(ahead)

    def edit_pool(self, pool: str, change: Callable[[Obj], None]) -> None:
        """Change the pool's specTemplate in the TensorFusionCluster, as the bot does."""
        tfc = self.store.get(TF, "TensorFusionCluster", None, self.tfc_name)
        assert tfc is not None
        for p in tfc["spec"]["gpuPools"]:
            if p["name"] == pool:
                change(p["specTemplate"])
        self.store.update(tfc)

    def status(self, pool: str) -> Obj:
        obj = self.store.get(TF, "GPUPool", None, f"{self.tfc_name}-{pool}")
        comp: Obj = ((obj or {}).get("status") or {}).get("componentStatus") or {}
        return comp


def _rolling(template: Obj) -> Obj:
    nmc: Obj = template.setdefault("nodeManagerConfig", {})
    policy: Obj = nmc.setdefault("nodePoolRollingUpdatePolicy", {})
    return policy


def _switch(component: Component) -> str:
    return f"autoUpdate{component.value.capitalize()}"


def build(
    tfc: Obj,
    crds: Mapping[str, str],
    pools: list[_Pool],
    start: datetime,
    readiness: Mapping[Component, int],
) -> Sandbox:
    """The Store with the chart's CRDs and a TFC of the cluster's pools on baseline images,
    every switch closed, settled (the simulator has seen the baseline)."""
    store = Store()
    for text in crds.values():
        for doc in YAML(typ="safe").load_all(text):
            if isinstance(doc, dict):
                store.create(doc)
    template = tfc["spec"]["gpuPools"][0]["specTemplate"]
    target = copy.deepcopy(tfc)
    target["spec"]["gpuPools"] = []
    for p in pools:
        spec = copy.deepcopy(template)
        for comp in spec.get("componentConfig", {}).values():
            if isinstance(comp, dict) and comp.get("image"):
                comp["image"] = f"{str(comp['image']).rsplit(':', 1)[0]}:{BASELINE_TAG}"
        policy = _rolling(spec)
        policy.clear()  # the bot owns these (R10); the chart's hard-coded ones are replaced
        policy.update({"batchPercentage": p.policy.batch_percentage, "batchInterval": "1s"})
        target["spec"]["gpuPools"].append({"name": p.policy.name, "specTemplate": spec})
    store.create(target)
    config = SimConfig(
        pool_nodes={p.policy.name: p.nodes for p in pools},
        hypervisor_ready_delay=float(readiness.get(Component.HYPERVISOR, 90)),
        worker_ready_delay=float(readiness.get(Component.WORKER, 60)),
        client_ready_delay=float(readiness.get(Component.CLIENT, 60)),
        min_batch_requeue=float(timeline.MIN_STEP_SECONDS),
        # A workload per node so that a worker rollout has as many units as the pool nodes.
        workloads=tuple(
            WorkloadSpec(f"rehearsal-{p.policy.name}-{i}", p.policy.name, clients=0)
            for p in pools
            if Component.WORKER in p.components or Component.CLIENT in p.components
            for i in range(p.nodes)
        ),
    )
    clock = ManualClock(start)
    sim = ControllerSim(store, config, clock=clock)
    box = Sandbox(store, sim, clock, str(tfc["metadata"]["name"]))
    _settle_until_quiet(box)
    # The helm upgrade: the target chart's images in every pool, switches still closed.
    target_images = {
        k: v.get("image")
        for k, v in template.get("componentConfig", {}).items()
        if isinstance(v, dict) and v.get("image")
    }
    for p in pools:

        def upgrade(spec: Obj) -> None:
            for k, image in target_images.items():
                spec["componentConfig"][k]["image"] = image

        box.edit_pool(p.policy.name, upgrade)
    box.sim.settle(max_steps=1000)
    return box


def _settle_until_quiet(box: Sandbox) -> None:
    """Let the baseline come up: pods ready, first sight recorded."""
    for _ in range(MAX_TICKS):
        box.sim.settle(max_steps=1000)
        due = box.sim.next_wake
        if due is None:
            return
        box.jump(due)
    raise RehearsalError("the baseline never settled")


def _phase(box: Sandbox, pool: _Pool, comp: Component, canary: bool) -> tuple[str, int, int]:
    """Roll one component of one pool; returns (outcome, batches, window-wait seconds)."""
    name = pool.policy.name
    key_progress, key_synced = f"{comp.value}UpdateProgress", f"{comp.value}ConfigSynced"
    interval = f"{pool.policy.batch_interval_seconds}s"
    pct = pool.policy.canary_batch_percentage if canary else pool.policy.batch_percentage

    def open_switch(percentage: int) -> None:
        def change(spec: Obj) -> None:
            policy = _rolling(spec)
            policy.update({"batchPercentage": percentage, "batchInterval": interval})
            policy[_switch(comp)] = True

        box.edit_pool(name, change)

    def close_switch() -> None:
        box.edit_pool(name, lambda spec: _rolling(spec).__setitem__(_switch(comp), False))

    open_switch(pct)
    batches, waited, last = 0, 0, -1
    # maxDuration is measured on switch-open time, per phase (core.phase_clock.active_seconds):
    # the deadline moves by every wait for a window.
    limit = pool.policy.max_duration_seconds
    deadline = box.now() + timedelta(seconds=limit) if limit else None
    for _ in range(MAX_TICKS):
        box.sim.settle(max_steps=1000)
        status = box.status(name)
        progress = int(status.get(key_progress) or 0)
        if progress != last and last >= 0:
            batches += 1
            box.say(name, f"{comp.value} batch {batches} finished: progress {progress}%")
            if canary and batches == 1:
                close_switch()
                box.say(name, f"{comp.value} canary batch done: switch closed for its checks")
                canary = False
                open_switch(pool.policy.batch_percentage)
                box.say(name, f"{comp.value}: switch open at {pool.policy.batch_percentage}%")
        last = progress
        if status.get(key_synced) and progress >= 100:
            close_switch()
            return rh.Outcome.DONE, batches, waited
        due = box.sim.next_wake
        closes = windows.closes_at(pool.window, box.now())
        if deadline is not None and (due is None or due >= deadline):
            box.jump(deadline)
            close_switch()
            box.say(
                name,
                f"MAXDURATION HIT: maxDuration {_dur(pool.policy.max_duration_seconds or 0)} ran "
                f"out at {comp.value} progress {progress}%: the pool stops here",
            )
            return rh.Outcome.MAX_DURATION, batches, waited
        if closes is not None and (due is None or due >= closes):
            box.jump(closes)
            close_switch()
            box.say(
                name,
                f"maintenance window closed at {comp.value} progress {progress}%: switch closed",
            )
            opens = windows.next_open(pool.window, box.now())
            wait = opens - box.now()
            waited += int(wait.total_seconds())
            deadline = deadline + wait if deadline is not None else None
            box.jump(opens)
            box.say(name, "maintenance window open again: switch open")
            open_switch(pool.policy.batch_percentage)
            continue
        if due is None:
            return rh.Outcome.STALLED, batches, waited
        box.jump(due)
    return rh.Outcome.STALLED, batches, waited


@dataclass(frozen=True, slots=True)
class Options:
    helm: Path
    workdir: Path
    start: datetime
    chart: ChartRef
    nodes: Mapping[str, int] = field(default_factory=dict)  # read live; else rollout.yaml
    readiness: Mapping[Component, int] = field(
        default_factory=lambda: dict(timeline.DEFAULT_READINESS_SECONDS)
    )
    desired_sha: str = ""


def pool_components(plan: Plan, spec: ClusterSpec) -> dict[str, tuple[Component, ...]]:
    """What rolls per pool: the plan's components, or, when the plan rolls nothing (a first
    install, or no image change against the baseline), every phase the pool declares."""
    planned = {ph.pool: tuple(ph.components) for ph in plan.pool_phases if ph.components}
    if planned:
        return planned
    return {p.name: tuple(p.phases) for p in spec.rollout.pools}


def _dur(seconds: int) -> str:
    return timeline.format_duration(seconds)


def _roll_pool(box: Sandbox, p: _Pool, estimate: int) -> rh.PoolRun:
    """One pool: wait for its window, then its phases in order."""
    name, policy = p.policy.name, p.policy
    names = tuple(c.value for c in p.components)
    opens = windows.next_open(p.window, box.now())
    if opens > box.now() and policy.maintenance_window is not None:
        box.say(
            name,
            f"waits for its maintenance window ({policy.maintenance_window.cron}, "
            f"{policy.maintenance_window.timezone}) until {opens.astimezone(UTC):%a %H:%M} UTC",
        )
        box.jump(opens)
    started = box.now()
    box.say(name, f"starts ({p.nodes} nodes: {', '.join(names)})")
    outcome, batches, waited = rh.Outcome.DONE, 0, 0
    for comp in p.components:
        first = policy.canary_batch_percentage or policy.batch_percentage
        box.say(
            name,
            f"{comp.value} phase: switch open at {first}%, batchInterval "
            f"{_dur(policy.batch_interval_seconds)}",
        )
        outcome, n, w = _phase(box, p, comp, canary=bool(policy.canary_batch_percentage))
        batches += n
        waited += w
        if outcome != rh.Outcome.DONE:
            break
        box.say(name, f"{comp.value} phase done: every {comp.value} on the new image")
    return rh.PoolRun(name, p.nodes, names, outcome, started, box.now(), waited, batches, estimate)


def rehearse(spec: ClusterSpec, plan: Plan, crds: Mapping[str, str], opts: Options) -> rh.Rehearsal:
    t0 = time.monotonic()
    rollout = spec.rollout
    comps = pool_components(plan, spec)
    pools = [
        _Pool(
            p,
            opts.nodes.get(p.name, p.nodes),
            comps.get(p.name, ()),
            windows.Window.of(p.maintenance_window, ZoneInfo(p.maintenance_window.timezone))
            if p.maintenance_window
            else None,
        )
        for p in rollout.rollout_order()  # the bot's order: canaryPool first
    ]
    tfc = render_tfc(opts.helm, opts.chart, spec, opts.workdir)
    # The baseline comes up a day before the rehearsal starts (a few readiness delays).
    box = build(tfc, crds, pools, opts.start - timedelta(days=1), opts.readiness)
    if box.now() > opts.start:
        raise RehearsalError("the baseline took longer than a day to come up")
    box.jump(opts.start)
    box.say(
        "",
        f"CRDs applied, helm upgrade to {opts.chart.name} {opts.chart.version}, controller ready",
    )
    runs: list[rh.PoolRun] = []
    failed = False
    smoke_pools = spec.canary_smoke.pools if spec.canary_smoke is not None else ()
    for p in pools:
        names = tuple(c.value for c in p.components)
        est = (
            timeline.pool_timeline(
                p.policy, p.components, nodes=p.nodes, readiness=dict(opts.readiness)
            ).estimate_seconds
            if p.components
            else 0
        )
        if failed:
            runs.append(
                rh.PoolRun(
                    p.policy.name, p.nodes, names, rh.Outcome.NOT_STARTED, estimate_seconds=est
                )
            )
            box.say(p.policy.name, "not started: an earlier pool failed")
            continue
        if not p.components or p.nodes <= 0:
            runs.append(
                rh.PoolRun(p.policy.name, p.nodes, names, rh.Outcome.DONE, estimate_seconds=est)
            )
            box.say(p.policy.name, "nothing to roll")
            continue
        run = _roll_pool(box, p, est)
        runs.append(run)
        outcome = run.outcome
        if outcome != rh.Outcome.DONE:
            failed = True
            box.say(
                p.policy.name, f"the operation fails ({outcome}); onFailure: {rollout.on_failure}"
            )
        else:
            box.say(p.policy.name, "finished")
    if not failed:
        box.say("", "verification: TensorFusionCluster, pools, nodes and hypervisors checked")
    canary_pools = [
        p.policy.name for p in pools if p.policy.canary_batch_percentage and p.components
    ]
    notes = [
        "maxDuration counts each phase's switch-open time, as the bot does (window waits "
        "not included)",
        "window-fit, gates, the availability budget and stall timeouts are not played; "
        "at a window's end the switch closes",
        "pods become ready after "
        + ", ".join(f"{c.value} {s}s" for c, s in opts.readiness.items())
        + " (the plan's readiness assumption)",
    ]
    if rollout.max_parallel_pools > 1:
        notes.append(f"maxParallelPools {rollout.max_parallel_pools}: rehearsed one pool at a time")
    if not any(ph.components for ph in plan.pool_phases):
        notes.append(
            "the plan rolls no pool (first install or same images): every declared phase rehearsed"
        )
    return rh.Rehearsal(
        cluster=spec.name,
        chart=f"{opts.chart.name} {opts.chart.version}",
        desired_sha=opts.desired_sha,
        started_at=opts.start,
        finished_at=box.now(),
        pools=tuple(runs),
        moments=tuple(box.moments),
        verification=rh.verification_steps(plan, canary_pools, smoke_pools),
        rollback=rh.rollback_steps(runs, rollout.on_failure),
        on_failure=rollout.on_failure,
        notes=tuple(notes),
        wall_seconds=time.monotonic() - t0,
    )
