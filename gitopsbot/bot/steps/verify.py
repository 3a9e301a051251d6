"""R15 verification: the TensorFusionCluster, its GPUPools, GPU nodes and their hypervisor
pods, and the worker and client pods of every pool are Running on the images Git names;
then the optional smoke test pod.

``check`` lists the problems (the pure judgments are in ``core.rollouts.tf_objects``); ``verify`` is
the step, which waits up to VERIFY_TIMEOUT_SECONDS for the problems to clear: between two
looks it follows the Pods' watch (a slice of at most WAIT_SLICE_SECONDS), and looks again
shortly after a pod changed instead of a fixed RETRY later."""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Mapping, Sequence
from datetime import datetime

from gitopsbot.bot.steps.cluster_reads import pool_images
from gitopsbot.bot.steps.outcome import (
    RETRY,
    RETRY_AFTER_WAIT,
    VERIFY_TIMEOUT_SECONDS,
    WAIT_SLICE_SECONDS,
    StepOutcome,
    retry_after_wait,
    wait_budget,
)
from gitopsbot.core.fleet.model import ClusterSpec, Component
from gitopsbot.core.records.journal import Step, StepState
from gitopsbot.core.rollouts import tf_objects as tf
from gitopsbot.ports.cluster import Cluster

# After a pod changed, the next look comes this much later: the pods of a pool change
# together, and each look lists every pod, so one look per settled burst, not per pod.
SETTLE_SECONDS = 0.5


def check(
    cluster: Cluster,
    spec: ClusterSpec,
    pools: Sequence[str] | None = None,
    *,
    canary: bool = False,
    component: Component | None = None,
    rolled: Mapping[str, Collection[Component]] | None = None,
    predates: datetime | None = None,
) -> list[str]:
    """Problems found (empty: verified). ``pools`` limits the check.

    ``canary``: after a canary batch of ``component`` (None: the one the GPUPool shows
    mid-rollout, see ``tf_objects.canary_component``): most of its pods are still on the old
    image and the pool may be Updating; the other components are only checked for Running.
    ``rolled``: pool → components this operation rolled (its POOL_PHASE steps, see
    ``tf_objects.rolled``); None when not known. ``predates``: when the operation began; a
    worker or client pod Pending since before it is marked ``tf.PRE_EXISTING``."""
    problems: list[str] = []
    name = tf.tfc_name(spec)
    tfc = cluster.get(tf.TF, "TensorFusionCluster", None, name)
    if tfc is None:
        return [f"TensorFusionCluster {name} not found"]
    if pools is None and (tfc.get("status") or {}).get("phase") != "Running":
        problems.append(f"TensorFusionCluster {name} is {tf.phase(tfc)}")
    wanted = pools if pools is not None else [p.name for p in spec.rollout.pools]
    images = pool_images(cluster, spec)
    # Listed once for every pool: worker and client pods live in the apps' namespaces.
    workloads = cluster.list(tf.TF, "TensorFusionWorkload")
    workers = cluster.list("v1", "Pod", None, label_selector=tf.WORKER_SELECTOR)
    clients = cluster.list("v1", "Pod", None, label_selector=tf.CLIENT_SELECTOR)
    for pool in wanted:
        gp_name = tf.gpupool_name(spec, pool)
        gp = cluster.get(tf.TF, "GPUPool", None, gp_name)
        if gp is None:
            problems.append(f"GPUPool {gp_name} not found")
            continue
        phase = (gp.get("status") or {}).get("phase")
        if phase != "Running" and not (canary and phase == "Updating"):
            problems.append(f"GPUPool {gp_name} is {tf.phase(gp)}")
        modes = tf.check_modes(
            pool,
            canary=canary,
            component=component or (tf.canary_component(gp) if canary else None),
            rolled=rolled,
        )
        images_of_pool = images.get(pool, {})
        problems += check_nodes(
            cluster,
            spec,
            pool,
            images_of_pool.get("hypervisor"),
            mode=modes[Component.HYPERVISOR],
        )
        problems += tf.check_pods(
            Component.WORKER,
            pool,
            tf.worker_pods(gp_name, workloads, workers),
            images_of_pool.get("worker"),
            mode=modes[Component.WORKER],
            predates=predates,
        )
        problems += tf.check_pods(
            Component.CLIENT,
            pool,
            tf.client_pods(gp_name, clients),
            images_of_pool.get("client"),
            mode=modes[Component.CLIENT],
            template_hash=tf.status_hash(gp, Component.CLIENT),
            predates=predates,
        )
    return problems


def check_nodes(
    cluster: Cluster,
    spec: ClusterSpec,
    pool: str,
    image: str | None,
    *,
    mode: tf.CheckMode = "verify",
) -> list[str]:
    """R15 per GPU node of ``pool``. ``mode``: "verify" reports everything; "images" only
    hypervisor pods on another image than ``image``; "canary" everything except pods
    still on the old image, and requires at least one on the new image; "running"
    everything except the image."""
    problems: list[str] = []
    stale: list[str] = []
    moved = 0
    label = f"{tf.GROUP}/pool-{tf.gpupool_name(spec, pool)}=true"
    nodes = cluster.list(tf.TF, "GPUNode", label_selector=label)
    pods = cluster.list(
        "v1", "Pod", spec.release.namespace, label_selector=f"{tf.GROUP}/component=hypervisor"
    )
    legacy = {p["metadata"]["name"] for p in cluster.list("v1", "Pod", spec.release.namespace)}
    for node in nodes:
        n = node["metadata"]["name"]
        if (node.get("status") or {}).get("phase") != "Running":
            problems.append(f"GPUNode {n} is {tf.phase(node)}")
        on_node = [p for p in pods if (p.get("spec") or {}).get("nodeName") == n]
        if f"tf-hypervisor-{n}" in legacy:
            on_node += [{"metadata": {"name": f"tf-hypervisor-{n}"}}]
        names = sorted({p["metadata"]["name"] for p in on_node})
        if len(names) != 1:
            why = (
                " (F6: a tf-hypervisor-<node> pod from 2.0-2.13 is left)"
                if any(x.startswith("tf-hypervisor-") for x in names)
                else ""
            )
            problems.append(f"node {n}: {len(names)} hypervisor pods {names}{why}")
            continue
        pod = on_node[0]
        if (pod.get("status") or {}).get("phase") != "Running":
            problems.append(f"hypervisor pod {names[0]} is {tf.phase(pod)}")
        running = [c.get("image") for c in (pod.get("spec") or {}).get("containers") or []]
        if image and image not in running:
            stale.append(f"hypervisor pod {names[0]} runs {running}, expected {image}")
        else:
            moved += 1
    return tf.by_mode(
        mode,
        problems,
        stale,
        none_moved=bool(nodes) and not moved,
        what=(f"pool {pool}: no hypervisor on {image} after the canary batch"),
    )


def verify(
    cluster: Cluster,
    step: Step,
    spec: ClusterSpec,
    now: datetime,
    *,
    rolled: Mapping[str, Collection[Component]] | None = None,
    predates: datetime | None = None,
    wait_slice: float = WAIT_SLICE_SECONDS,
    monotonic: Callable[[], float] = time.monotonic,
) -> StepOutcome:
    """The step. ``predates``: when the operation began; a pod Pending since before it is
    named in the outcome as pre-existing and does not fail the step (docs/executor.md)."""
    found = check(cluster, spec, rolled=rolled, predates=predates)
    problems, known = tf.split_pre_existing(found)
    if not problems and spec.smoke_test is not None:
        return _smoke_test(cluster, step, spec, now, wait_slice=wait_slice, monotonic=monotonic)
    if not problems:
        # Wording kept: docs/sandbox.md and docs/demo.md quote it.
        note = tf.pre_existing_note(known)
        done = "TFC, pools, nodes and hypervisors Running" + (f"; {note}" if note else "")
        return StepOutcome(StepState.SUCCEEDED, done)
    waited = step.waited(now)
    if waited >= VERIFY_TIMEOUT_SECONDS:
        return StepOutcome(StepState.FAILED, "verification failed (R15): " + "; ".join(problems))
    # A pod that changes between check() and the watch is seen a slice later at worst.
    began = monotonic()
    budget = wait_budget(wait_slice, VERIFY_TIMEOUT_SECONDS, waited)
    changed = cluster.wait_for_change("v1", "Pod", None, timeout=budget)
    pause = SETTLE_SECONDS if changed else retry_after_wait(monotonic() - began)
    return StepOutcome(StepState.RUNNING, "; ".join(problems), retry_after=pause)


def _smoke_test(
    cluster: Cluster,
    step: Step,
    spec: ClusterSpec,
    now: datetime,
    *,
    wait_slice: float = WAIT_SLICE_SECONDS,
    monotonic: Callable[[], float] = time.monotonic,
) -> StepOutcome:
    assert spec.smoke_test is not None
    manifest = dict(spec.smoke_test.manifest)
    meta = dict(manifest.get("metadata") or {})
    meta.setdefault("namespace", spec.release.namespace)
    manifest["metadata"] = meta
    pod = cluster.get("v1", "Pod", meta["namespace"], str(meta.get("name")))
    if pod is None:
        cluster.create(manifest)
        return StepOutcome(StepState.RUNNING, "smoke test started", retry_after=RETRY)
    phase = (pod.get("status") or {}).get("phase", "Pending")
    if phase == "Succeeded":
        cluster.delete("v1", "Pod", meta["namespace"], str(meta.get("name")))
        return StepOutcome(StepState.SUCCEEDED, "verified; smoke test succeeded (R15)")
    waited = step.waited(now)
    if phase == "Failed" or waited >= spec.smoke_test.timeout_seconds:
        # Removed so the next operation's test starts fresh; the result is in the journal.
        cluster.delete("v1", "Pod", meta["namespace"], str(meta.get("name")))
        return StepOutcome(StepState.FAILED, f"smoke test {phase} after {int(waited)}s")
    # The pod as read: any change after this read ends the wait (nothing is missed).
    name = str(meta.get("name"))
    began = monotonic()
    changed = cluster.wait_for_change(
        "v1",
        "Pod",
        meta["namespace"],
        since={name: str(pod["metadata"].get("resourceVersion") or "")},
        timeout=wait_budget(wait_slice, spec.smoke_test.timeout_seconds, waited),
    )
    pause = RETRY_AFTER_WAIT if changed else retry_after_wait(monotonic() - began)
    return StepOutcome(StepState.RUNNING, f"smoke test {phase}", retry_after=pause)
