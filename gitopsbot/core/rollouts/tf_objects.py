"""Pure judgments on TensorFusion objects: names the chart and the controller derive, what a
pool's pods and nodes run, and what a check reports per mode (R15).

The executor's steps (``bot.steps``) read the cluster through its port and hand the objects
here; nothing in this module does I/O.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Collection, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Literal

from gitopsbot.core.fleet.model import ClusterSpec, Component
from gitopsbot.core.records.journal import Journal, StepKind, StepState
from gitopsbot.core.rollouts.canary_smoke import SMOKE_LABEL

GROUP = "tensor-fusion.ai"
# Pods of the client component, as the controller counts them (facts §3.6).
CLIENT_SELECTOR = f"{GROUP}/enabled=true"
WORKER_SELECTOR = f"{GROUP}/component=worker"
TF = f"{GROUP}/v1"
CheckMode = Literal["verify", "images", "canary", "running"]
# Put before a problem that predates the operation (a pod Pending since before it began): the
# canary verify reports it and does not count it (core.verify_wait, docs/executor.md).
PRE_EXISTING = "pre-existing: "


def tfc_name(spec: ClusterSpec) -> str:
    """The chart renders the TensorFusionCluster as ``cluster.name`` (default tensor-fusion)."""
    cluster = spec.values.get("cluster")
    name = cluster.get("name") if isinstance(cluster, Mapping) else None
    return str(name or "tensor-fusion")


def gpupool_name(spec: ClusterSpec, pool: str) -> str:
    """The controller derives GPUPool ``<tfc>-<pool>`` from the TFC template (R11)."""
    return f"{tfc_name(spec)}-{pool}"


def controller_name(spec: ClusterSpec) -> str:
    return f"{spec.release.release_name}-controller"


def digest(data: Any) -> str:
    text = json.dumps(data, sort_keys=True, separators=(",", ":"), default=str)
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def strip(obj: Mapping[str, Any]) -> dict[str, Any]:
    meta = {k: v for k, v in (obj.get("metadata") or {}).items() if k != "managedFields"}
    return {**obj, "metadata": meta}


def rolled(journal: Journal) -> dict[str, frozenset[Component]]:
    """Pool → components this operation rolled: its POOL_PHASE steps (the plan has one only
    for a component whose switch the policy turns on, F3)."""
    out: dict[str, set[Component]] = {}
    for step in journal.steps:
        rolls = step.kind is StepKind.POOL_PHASE and step.state is not StepState.SKIPPED
        if rolls and step.component is not None:
            out.setdefault(step.pool, set()).add(step.component)
    return {pool: frozenset(components) for pool, components in out.items()}


def canary_component(gpupool: Mapping[str, Any]) -> Component:
    """The component whose canary batch just ran, when the caller does not say: the first
    one with R14 progress strictly between 0 and 100 (phases of a pool run one at a time,
    hypervisor first, and a canary pause leaves the progress at the canary batch's share);
    the hypervisor when none is."""
    status = (gpupool.get("status") or {}).get("componentStatus") or {}
    for component in Component:
        progress = status.get(f"{component}UpdateProgress")
        if isinstance(progress, int | float) and 0 < progress < 100:
            return component
    return Component.HYPERVISOR


def check_modes(
    pool: str,
    *,
    canary: bool,
    component: Component | None,
    rolled: Mapping[str, Collection[Component]] | None,
) -> dict[Component, CheckMode]:
    """How each component of ``pool`` is checked (see ``bot.steps.verify.check``)."""
    if canary:
        # Only the component whose canary batch ran is judged on images; the final VERIFY
        # step checks the others.
        first = component or Component.HYPERVISOR
        return {c: "canary" if c is first else "running" for c in Component}
    done = rolled.get(pool, ()) if rolled is not None else ()
    return {
        # R15 names the hypervisor's image: it is always compared, as before.
        Component.HYPERVISOR: "verify",
        # F3: worker and client roll only when the bot turns them on. A component this
        # operation did not roll keeps its old image legitimately, so its pods are checked
        # for Running (R15) but kept out of the image check.
        Component.WORKER: "verify" if Component.WORKER in done else "running",
        Component.CLIENT: "verify" if Component.CLIENT in done else "running",
    }


def worker_pods(
    gp_name: str, workloads: Sequence[Mapping[str, Any]], pods: Sequence[Mapping[str, Any]]
) -> list[Mapping[str, Any]]:
    """Worker pods of the GPUPool ``gp_name``: a TensorFusionWorkload names its pool in
    ``spec.poolName`` (the rollout counts it by its ``gpupool`` label, facts §3.5: either
    will do), its pods carry ``tensor-fusion.ai/workload=<name>`` in its namespace."""
    mine = {
        (str(w["metadata"].get("namespace") or ""), str(w["metadata"]["name"]))
        for w in workloads
        if gp_name in ((w.get("spec") or {}).get("poolName"), labels(w).get(f"{GROUP}/gpupool"))
    }
    return [
        p
        for p in pods
        if (str(p["metadata"].get("namespace") or ""), labels(p).get(f"{GROUP}/workload")) in mine
    ]


def pod_images(component: Component, pod: Mapping[str, Any]) -> list[str]:
    """Images that show the pod's version: the worker's main container (``containers[0]``,
    where the controller puts ``componentConfig.worker.image``); for a client-injected app
    pod, the webhook's init container from ``componentConfig.client.image`` (facts §3.3,
    §3.6), listed first, then the app's own containers."""
    spec = pod.get("spec") or {}
    containers = list(spec.get("containers") or [])
    if component is Component.WORKER:
        containers = containers[:1]
    else:
        containers = list(spec.get("initContainers") or []) + containers
    return [str(c.get("image") or "") for c in containers]


def client_pods(gp_name: str, enabled: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The client component's pods of the GPUPool ``gp_name``, as the controller counts them
    (facts §3.6): ``tensor-fusion.ai/enabled=true`` pods labelled with the pool, which include
    local-GPU app pods (their component label is ``worker``). The bot's own GPU canary smoke
    pod (``core.rollouts.canary_smoke``) carries the same labels but is judged by the GPU canary,
    not as a client: left out."""
    return [
        p
        for p in enabled
        if labels(p).get(f"{GROUP}/gpupool") == gp_name and SMOKE_LABEL not in labels(p)
    ]


def status_hash(gpupool: Mapping[str, Any], component: Component) -> str | None:
    status = (gpupool.get("status") or {}).get("componentStatus") or {}
    found = status.get(str(component))
    return str(found) if found else None


def check_pods(
    component: Component,
    pool: str,
    pods: Sequence[Mapping[str, Any]],
    image: str | None,
    *,
    mode: CheckMode,
    template_hash: str | None = None,
    predates: datetime | None = None,
) -> list[str]:
    """R15 for the worker or client pods of ``pool``, in the modes of
    ``bot.steps.verify.check_nodes``. Pods being deleted (the rollout replaces them) and
    finished ones are not judged. ``predates``: when the operation began; a pod Pending since
    before then is reported marked ``PRE_EXISTING`` (``pre_existing``)."""
    problems: list[str] = []
    stale: list[str] = []
    moved = 0
    for pod in pods:
        meta = pod.get("metadata") or {}
        pod_phase = (pod.get("status") or {}).get("phase")
        if meta.get("deletionTimestamp") or pod_phase == "Succeeded":
            continue
        ref = f"{meta.get('namespace')}/{meta.get('name')}"
        before = pre_existing(pod, predates)
        if before is not None:
            problems.append(
                f"{PRE_EXISTING}{component} pod {ref} Pending since "
                f"{before.astimezone(UTC):%Y-%m-%d %H:%M:%S}Z "
                "(it was Pending before the operation began)"
            )
        elif pod_phase != "Running":
            problems.append(f"{component} pod {ref} is {phase(pod)}")
        carried = pod_images(component, pod)
        local_gpu = (
            component is Component.CLIENT and labels(pod).get(f"{GROUP}/component") == "worker"
        )
        hashed = labels(pod).get(f"{GROUP}/pod-template-hash")
        if image and not local_gpu and image not in carried:
            # A local-GPU pod runs no injected client image: the hash below judges it.
            stale.append(
                f"{component} pod {ref} runs {', '.join(carried) or 'no image'}, expected {image}"
            )
        elif template_hash and hashed != template_hash:
            # The controller's own outdated test (facts §3.6): the webhook stamps the
            # pool's client hash on every pod it injects, local-GPU ones included.
            stale.append(
                f"{component} pod {ref} has template hash {hashed or 'none'}, "
                f"expected {template_hash}"
            )
        else:
            moved += 1
    return by_mode(
        mode,
        problems,
        stale,
        none_moved=bool(stale) and not moved,
        what=(f"pool {pool}: no {component} pod on {image} after the canary batch"),
    )


def created(obj: Mapping[str, Any]) -> datetime | None:
    """``metadata.creationTimestamp`` (UTC), None when absent or unreadable."""
    stamp = (obj.get("metadata") or {}).get("creationTimestamp")
    if not isinstance(stamp, str):
        return None
    try:
        at = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except ValueError:
        return None
    return at if at.tzinfo is not None else at.replace(tzinfo=UTC)


def pre_existing(pod: Mapping[str, Any], predates: datetime | None) -> datetime | None:
    """When a Pending pod was created, if that was before ``predates`` (the operation's
    start): a pod never goes back to Pending, so it has been Pending since before the
    operation, and being older it is not one a batch of it replaced. None otherwise. Only
    Pending: a Failed or Unknown pod may have turned so during the operation."""
    if predates is None or (pod.get("status") or {}).get("phase") != "Pending":
        return None
    at = created(pod)
    return at if at is not None and at < predates else None


def split_pre_existing(problems: Sequence[str]) -> tuple[list[str], list[str]]:
    """The problems that count, and those that predate the operation (marker removed)."""
    counted = [p for p in problems if not p.startswith(PRE_EXISTING)]
    known = [p.removeprefix(PRE_EXISTING) for p in problems if p.startswith(PRE_EXISTING)]
    return counted, known


def pre_existing_note(known: Sequence[str]) -> str:
    """How problems that predate the operation are named wherever the bot reports them."""
    return "pre-existing, not counted: " + "; ".join(known) if known else ""


def by_mode(
    mode: CheckMode, problems: list[str], stale: list[str], *, none_moved: bool, what: str
) -> list[str]:
    """What a check reports, per mode: "images" only the pods on another image; "canary"
    everything but those, plus ``what`` when no pod moved to the new image; "running"
    everything but the image; "verify" everything."""
    if mode == "images":
        return stale
    if mode == "canary":
        return [*problems, what] if none_moved else problems
    if mode == "running":
        return problems
    return problems + stale


def labels(obj: Mapping[str, Any]) -> Mapping[str, str]:
    found: Mapping[str, str] = (obj.get("metadata") or {}).get("labels") or {}
    return found


def rolling_policy(tfc: Mapping[str, Any], pool: str) -> Mapping[str, Any]:
    for entry in (tfc.get("spec") or {}).get("gpuPools") or []:
        if entry.get("name") == pool:
            template = entry.get("specTemplate") or {}
            manager = template.get("nodeManagerConfig") or {}
            found: Mapping[str, Any] = manager.get("nodePoolRollingUpdatePolicy") or {}
            return found
    return {}


def phase(obj: Mapping[str, Any]) -> str:
    return str((obj.get("status") or {}).get("phase") or "without a phase")


def node_out_of_service(node: Mapping[str, Any] | None) -> bool:
    """A core Node that cannot serve GPU work: missing, NotReady (its Ready condition is not
    True) or cordoned (``spec.unschedulable``)."""
    if node is None:
        return True
    if (node.get("spec") or {}).get("unschedulable"):
        return True
    conditions = (node.get("status") or {}).get("conditions") or []
    ready = next((c for c in conditions if c.get("type") == "Ready"), None)
    return ready is None or ready.get("status") != "True"
