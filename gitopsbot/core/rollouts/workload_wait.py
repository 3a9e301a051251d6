"""Workload awareness for a pool's worker and client batches (#18): wait before a batch until
the workloads a selector names are idle, and size batches by the tenants they disrupt.

Pure: ``bot.workload_reads`` reads the cluster and hands the objects here.

**Waiting** (``WorkloadWait``, ``decide_wait``). Before the bot opens a pool's
``autoUpdateWorker``/``autoUpdateClient`` switch it can wait, up to ``timeout_seconds``,
until one of:

- ``no-active-session``: no *active GPU session* among the named workloads. An active GPU
  session is a TensorFusionConnection (namespaced, ``tensor-fusion.ai/v1``) whose
  ``status.phase`` is ``Running``: the connection controller sets Running only once the
  worker pod it selected (``status.workerName``) is Running, and sets Failed (clearing the
  worker name) when that pod stops; Pending while no worker is ready
  (NexusGPU/tensor-fusion v2.17.1, ``api/v1/tensorfusionconnection_types.go``: status
  ``phase`` is a WorkerPhase Pending|Running|Failed, ``workerName``, ``connectionURL``;
  ``internal/controller/tensorfusionconnection_controller.go``). The pod controller creates
  one connection per remote client pod, labelled ``tensor-fusion.ai/workload=<workload>``,
  ``spec.clientPod`` naming the pod (``internal/controller/pod_controller.go``). A local-GPU
  pod (component label ``worker``: the GPU is in the app pod itself, no connection) that
  is Running is an active session too: a batch deletes it with its GPU work.
- ``opt-out-gone``: no named pod carrying the opt-out annotation (default
  ``gitopsbot.io/no-disruption``, any value but ``"false"``) is still there; a pod is gone
  when deleted or finished (Succeeded/Failed).

The selector names the pool's TensorFusion app pods (``tensor-fusion.ai/enabled=true``,
``tensor-fusion.ai/gpupool=<pool>``), which carry their owners' labels; the workloads it
names are the TensorFusionWorkloads those pods use (the ``tensor-fusion.ai/workload`` label
of a local-GPU pod, the ``tensor-fusion.ai/selected-workload`` annotation of a remote
client, as the controller maps them: ``internal/utils/compose.go``), plus the pool's
TensorFusionWorkloads the selector matches directly (a person's own workloads carry labels;
the webhook's carry only the pool label).

When the wait times out, ``on_timeout`` decides: ``proceed`` (open the switch anyway),
``skip-window`` (leave the switch closed until the next maintenance window) or ``halt``.

**Sizing** (``Unit``, ``size_by_tenants``, ``tenant_batch_percentage``). The controller takes
``ceil(batchPercentage × total / 100)`` units per batch, the outdated ones oldest
``creationTimestamp`` first, then by name (facts §3.2; ``sandbox/simulator/rollout.py``).
The bot can only pin ``batchPercentage``: it picks the largest percentage not above the
one requested whose next batch (or, with ``scope="campaign"``, every batch left) touches at
most ``max_tenant_share_percent`` of the pool's distinct tenants, never fewer than one
tenant so the rollout progresses. A tenant is the owning workload, read from the unit
alone (``tenant_of``; no owner is read): the Deployment for a pod of its ReplicaSet
(``<deployment>-<pod-template-hash>``), else the unit's owner, the unit itself when it
has none.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from gitopsbot.core.fleet.workload_specs import ON_TIMEOUT as ON_TIMEOUT
from gitopsbot.core.fleet.workload_specs import OPT_OUT_ANNOTATION as OPT_OUT_ANNOTATION
from gitopsbot.core.fleet.workload_specs import UNTIL as UNTIL
from gitopsbot.core.fleet.workload_specs import OnTimeout as OnTimeout
from gitopsbot.core.fleet.workload_specs import Until as Until
from gitopsbot.core.fleet.workload_specs import WorkloadAwareness as WorkloadAwareness
from gitopsbot.core.fleet.workload_specs import WorkloadWait as WorkloadWait

WaitAction = Literal["proceed", "wait", "skip-window", "halt"]
SizingScope = Literal["next", "campaign"]


GROUP = "tensor-fusion.ai"
WORKLOAD_LABEL = f"{GROUP}/workload"
SELECTED_WORKLOAD_ANNOTATION = f"{GROUP}/selected-workload"
WORKER_NAME_LABEL = f"{GROUP}/worker-name"
COMPONENT_LABEL = f"{GROUP}/component"
# The connection's status.phase that means a client holds a running worker (WorkerRunning).
ACTIVE_CONNECTION_PHASE = "Running"
# Blockers a decision's reason names (the rest are counted).
_NAMED_BLOCKERS = 3
# Pod phases after which a pod holds no GPU and counts as gone.
_FINISHED = frozenset({"Succeeded", "Failed"})
# Kubernetes' own label (not tensor-fusion.ai/pod-template-hash): the Deployment controller
# puts it on a ReplicaSet's pods and ends the ReplicaSet's name with it.
POD_TEMPLATE_HASH_LABEL = "pod-template-hash"
EARLIEST = datetime.min.replace(tzinfo=UTC)


# -- configuration ---------------------------------------------------------------------------


# -- waiting ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class WorkloadSnapshot:
    """What the named workloads show now, for ``decide_wait``. Each entry is a short
    human-readable reference, used as a blocker in the decision."""

    workloads: tuple[str, ...] = ()  # "ns/name" of the TensorFusionWorkloads named
    sessions: tuple[str, ...] = ()  # active GPU sessions among them
    opt_outs: tuple[str, ...] = ()  # named pods carrying the opt-out annotation, not gone


@dataclass(frozen=True, slots=True)
class WaitDecision:
    action: WaitAction
    reason: str
    blockers: tuple[str, ...] = ()


def decide_wait(
    wait: WorkloadWait, snapshot: WorkloadSnapshot, waited_seconds: float
) -> WaitDecision:
    """Proceed when nothing blocks; wait while something does and the timeout has not
    passed; at ``waited_seconds >= timeout_seconds`` the ``on_timeout`` policy."""
    if wait.until == "no-active-session":
        blockers, what = snapshot.sessions, "active GPU session"
    else:
        blockers, what = snapshot.opt_outs, f"pod with {wait.opt_out_annotation}"
    scope = f"selector '{wait.selector or '(all)'}' in " + (
        f"namespace {wait.namespace}" if wait.namespace else "all namespaces"
    )
    if not blockers:
        return WaitDecision("proceed", f"no {what} ({scope})")
    named = ", ".join(blockers[:_NAMED_BLOCKERS])
    if len(blockers) > _NAMED_BLOCKERS:
        named += f" and {len(blockers) - _NAMED_BLOCKERS} more"
    count = f"{len(blockers)} {what}{'' if len(blockers) == 1 else 's'} ({scope}: {named})"
    waited = max(0, int(waited_seconds))
    if waited_seconds < wait.timeout_seconds:
        return WaitDecision(
            "wait", f"{count}; waited {waited}s of {wait.timeout_seconds}s", blockers
        )
    expired = f"{count} after the {wait.timeout_seconds}s timeout"
    if wait.on_timeout == "proceed":
        return WaitDecision("proceed", f"{expired}: proceeding (onTimeout: proceed)", blockers)
    if wait.on_timeout == "skip-window":
        return WaitDecision(
            "skip-window", f"{expired}: skipping this window (onTimeout: skip-window)", blockers
        )
    return WaitDecision("halt", f"{expired}: halting (onTimeout: halt)", blockers)


def is_active_session(connection: Mapping[str, Any]) -> bool:
    """A TensorFusionConnection whose client holds a running worker (module doc). One being
    deleted still counts: its worker serves until the client pod goes."""
    return (connection.get("status") or {}).get("phase") == ACTIVE_CONNECTION_PHASE


def is_local_gpu_session(pod: Mapping[str, Any]) -> bool:
    """A Running local-GPU app pod (component label ``worker``, its own GPU: no connection)."""
    return (
        labels(pod).get(COMPONENT_LABEL) == "worker"
        and (pod.get("status") or {}).get("phase") == "Running"
    )


def pod_workload(pod: Mapping[str, Any]) -> str | None:
    """The TensorFusionWorkload an app pod uses, as the controller records it: the
    ``workload`` label on a local-GPU pod, the ``selected-workload`` annotation on a remote
    client (``internal/utils/compose.go``); worker pods carry the label too."""
    meta = pod.get("metadata") or {}
    found = (meta.get("labels") or {}).get(WORKLOAD_LABEL) or (meta.get("annotations") or {}).get(
        SELECTED_WORKLOAD_ANNOTATION
    )
    return str(found) if found else None


def is_gone(pod: Mapping[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") in _FINISHED


def opts_out(pod: Mapping[str, Any], annotation: str) -> bool:
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    if annotation not in annotations:
        return False
    return str(annotations[annotation]).strip().lower() != "false"


def snapshot_of(
    wait: WorkloadWait,
    *,
    pods: Sequence[Mapping[str, Any]],
    workloads: Sequence[Mapping[str, Any]],
    connections: Sequence[Mapping[str, Any]],
) -> WorkloadSnapshot:
    """The snapshot from what the bot read: ``pods`` the pool's TensorFusion pods the
    selector names, ``workloads`` the pool's TensorFusionWorkloads the selector names
    directly, ``connections`` the TensorFusionConnections of the namespaces concerned.
    Only the blockers of ``wait.until`` are filled in."""
    named: set[tuple[str, str]] = {(namespace(w), name(w)) for w in workloads}
    sessions: list[str] = []
    opt_outs: list[str] = []
    for pod in pods:
        workload = pod_workload(pod)
        if workload:
            named.add((namespace(pod), workload))
        if wait.until == "no-active-session" and is_local_gpu_session(pod):
            sessions.append(f"local-GPU pod {ref(pod)} (workload {workload or '?'})")
        opting_out = wait.until == "opt-out-gone" and opts_out(pod, wait.opt_out_annotation)
        if opting_out and not is_gone(pod):
            opt_outs.append(f"pod {ref(pod)}")
    for conn in connections:
        workload = labels(conn).get(WORKLOAD_LABEL) or str(
            (conn.get("spec") or {}).get("workloadName") or ""
        )
        if (namespace(conn), workload) in named and is_active_session(conn):
            worker = (conn.get("status") or {}).get("workerName") or "?"
            sessions.append(f"connection {ref(conn)} (workload {workload}, worker {worker})")
    return WorkloadSnapshot(
        workloads=tuple(f"{ns}/{n}" for ns, n in sorted(named)),
        sessions=tuple(sorted(sessions)),
        opt_outs=tuple(sorted(opt_outs)),
    )


# -- tenants and batches ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Unit:
    """One thing a worker or client batch counts: a TensorFusionWorkload (worker) or an app
    pod (client). ``name`` is "namespace/name"; ``tenant`` the owning workload; ``nodes``
    the nodes its disruption touches (its worker pods' nodes, the client pod's own)."""

    name: str
    tenant: str
    outdated: bool
    created: datetime
    nodes: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Touched:
    """What a candidate batch disrupts: evidence for the plan and the PR."""

    units: tuple[str, ...]
    tenants: tuple[str, ...]
    nodes: tuple[str, ...]

    def summary(self) -> str:
        return (
            f"{len(self.units)} unit(s) of {len(self.tenants)} tenant(s) "
            f"[{', '.join(self.tenants)}] on {len(self.nodes)} node(s) [{', '.join(self.nodes)}]"
        )


@dataclass(frozen=True, slots=True)
class TenantSizing:
    percentage: int
    reason: str
    batch: Touched  # the next batch at ``percentage``
    allowed_tenants: int
    total_tenants: int


def controller_order(units: Sequence[Unit]) -> tuple[Unit, ...]:
    """The outdated units in the order the controller takes them: oldest creationTimestamp
    first, then by (object) name; the namespace breaks remaining ties as the API's list
    order (namespace, name) does under a stable sort."""

    def key(u: Unit) -> tuple[datetime, str, str]:
        return (u.created, u.name.rpartition("/")[2], u.name)

    return tuple(sorted((u for u in units if u.outdated), key=key))


def batches(
    units: Sequence[Unit], percentage: int, progress: int = 0
) -> Iterator[tuple[Unit, ...]]:
    """The batches the controller runs from here with ``batchPercentage`` = ``percentage``
    and the pool's current ``<component>UpdateProgress`` (facts §3.2
    calculateDesiredUpdatedDelta), assuming nothing else updates a unit meanwhile."""
    if percentage <= 0:
        return  # the controller divides by zero and stalls (facts §3.2)
    total = len(units)
    pending = list(controller_order(units))
    updated = total - len(pending)
    size = math.ceil(percentage * total / 100)
    if progress >= 100:
        progress = 0  # a finished campaign: the next one (a new hash) starts from 0
    while total > 0:
        index = progress // percentage
        delta = min((index + 1) * size, total) - updated
        if delta < 0:
            # More already updated than this step wants: the controller skips the step.
            # At 100 the next index already wants every unit, so this cannot loop forever.
            progress = min(progress + percentage, 100)
            continue
        if delta > 0 and pending:
            batch, pending = pending[:delta], pending[delta:]
            updated += len(batch)
            yield tuple(batch)
            continue
        # The batch is done (or nothing is left to take): the next step, or the end.
        progress = min((index + 1) * percentage, 100)
        if progress >= 100 or not pending:
            return


def next_batch(units: Sequence[Unit], percentage: int, progress: int = 0) -> tuple[Unit, ...]:
    return next(batches(units, percentage, progress), ())


def touched(batch: Sequence[Unit]) -> Touched:
    return Touched(
        units=tuple(u.name for u in batch),
        tenants=tuple(sorted({u.tenant for u in batch})),
        nodes=tuple(sorted({n for u in batch for n in u.nodes})),
    )


def size_by_tenants(
    units: Sequence[Unit],
    max_tenant_share_percent: int,
    requested_percentage: int,
    *,
    progress: int = 0,
    scope: SizingScope = "next",
) -> TenantSizing:
    """The largest batchPercentage ≤ ``requested_percentage`` whose next batch (``scope``
    "campaign": every batch left) touches at most ``max_tenant_share_percent`` of the pool's
    distinct tenants (at least one), with the reason and the next batch's evidence."""
    requested = max(1, min(100, requested_percentage))
    tenants = {u.tenant for u in units}
    allowed = max(1, math.floor(max_tenant_share_percent * len(tenants) / 100))

    def worst(pct: int) -> int:
        if scope == "next":
            return len({u.tenant for u in next_batch(units, pct, progress)})
        return max((len({u.tenant for u in b}) for b in batches(units, pct, progress)), default=0)

    limit = f"{max_tenant_share_percent}% of {len(tenants)} tenant(s) = {allowed}"
    which = "the next batch" if scope == "next" else "every batch left"
    if not controller_order(units):
        # Nothing outdated is seen (the rollout's end, or a moment where the old pod is gone
        # and its replacement not yet listed): the bound still holds for whatever the
        # controller takes next, at worst one tenant a unit (ceil of the share a batch).
        batch = touched(())
        pct = requested
        if len(tenants) > allowed:
            pct = min(requested, max(1, math.floor(100 * allowed / len(units))))
        how = "as requested" if pct == requested else f"lowered from {requested}%"
        return TenantSizing(
            pct,
            f"no outdated unit seen: {pct}% ({how}): a batch takes at most {allowed} unit(s) "
            f"(limit {limit})",
            batch,
            allowed,
            len(tenants),
        )
    for pct in range(requested, 0, -1):
        if worst(pct) <= allowed:
            batch = touched(next_batch(units, pct, progress))
            how = "as requested" if pct == requested else f"lowered from {requested}%"
            reason = (
                f"{pct}% ({how}): {which} touches at most {allowed} tenant(s) "
                f"(limit {limit}); next batch: {batch.summary()}"
            )
            return TenantSizing(pct, reason, batch, allowed, len(tenants))
    # Even 1% takes units of more tenants than allowed (more than 100 units, or a campaign
    # batch spanning tenants): the smallest batch still lets the rollout progress.
    batch = touched(next_batch(units, 1, progress))
    reason = (
        f"1% (lowered from {requested}%): no percentage keeps {which} within {limit}; "
        f"the smallest batch goes: {batch.summary()}"
    )
    return TenantSizing(1, reason, batch, allowed, len(tenants))


def tenant_batch_percentage(
    units: Sequence[Unit], max_tenant_share_percent: int, requested_percentage: int
) -> int:
    """``size_by_tenants(...).percentage`` for the next batch (its ``reason`` explains it)."""
    return size_by_tenants(units, max_tenant_share_percent, requested_percentage).percentage


# -- owners, client pods, workers and nodes --------------------------------------------------


def owner_ref(obj: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The controlling ownerReference (``controller: true``), else the first one."""
    refs = [r for r in (obj.get("metadata") or {}).get("ownerReferences") or [] if r.get("name")]
    for r in refs:
        if r.get("controller"):
            return dict(r)
    return dict(refs[0]) if refs else None


def tenant_of(obj: Mapping[str, Any]) -> str:
    """ "namespace/Kind/name" of the workload ``obj`` belongs to, from ``obj`` alone (the bot
    reads no owner: its RBAC grants no ``get`` on ReplicaSets or Deployments):

    - owned by a ReplicaSet named ``<rest>-<obj's pod-template-hash label>``: the Deployment
      ``<rest>`` (the Deployment controller names its ReplicaSets so and stamps the hash on
      their pods);
    - owned by anything else (a Job, StatefulSet, DaemonSet, a ReplicaSet not so named, an
      operator's resource): that owner;
    - no owner (a bare pod): ``obj`` itself."""
    ns = namespace(obj)
    parent = owner_ref(obj)
    if parent is None:
        return f"{ns}/{obj.get('kind') or 'Object'}/{name(obj)}"
    kind, owner = str(parent.get("kind") or ""), str(parent.get("name") or "")
    template_hash = labels(obj).get(POD_TEMPLATE_HASH_LABEL)
    if kind == "ReplicaSet" and template_hash and owner.endswith(f"-{template_hash}"):
        deployment = owner.removesuffix(f"-{template_hash}")
        if deployment:
            return f"{ns}/Deployment/{deployment}"
    return f"{ns}/{kind}/{owner}"


@dataclass(frozen=True, slots=True)
class ClientLink:
    """A client app pod with the workload, worker pods and nodes it uses."""

    pod: str
    workload: str | None
    workers: tuple[str, ...]
    nodes: tuple[str, ...]


def client_links(
    pods: Sequence[Mapping[str, Any]],
    connections: Sequence[Mapping[str, Any]],
    worker_pods: Sequence[Mapping[str, Any]],
) -> dict[str, ClientLink]:
    """Each client pod ("ns/name") mapped, as the controller maps it, to its workload
    (``pod_workload``), the worker pods serving it (its TensorFusionConnection: same
    namespace, ``spec.clientPod`` the pod, ``status.workerName`` or the ``worker-name``
    label; a local-GPU pod is its own worker) and the nodes they and it run on."""
    node_of = {(namespace(p), name(p)): _node(p) for p in worker_pods}
    served: dict[tuple[str, str], set[str]] = {}
    for conn in connections:
        client = str((conn.get("spec") or {}).get("clientPod") or "")
        worker = str(
            (conn.get("status") or {}).get("workerName")
            or labels(conn).get(WORKER_NAME_LABEL)
            or ""
        )
        if client and worker:
            served.setdefault((namespace(conn), client), set()).add(worker)
    out: dict[str, ClientLink] = {}
    for pod in pods:
        key = (namespace(pod), name(pod))
        workers = sorted(served.get(key, set()))
        nodes = {node_of.get((key[0], w), "") for w in workers}
        if labels(pod).get(COMPONENT_LABEL) == "worker":
            workers = [key[1]]  # local GPU: the app pod runs its own worker
        nodes.add(_node(pod))
        out[ref(pod)] = ClientLink(
            ref(pod),
            pod_workload(pod),
            tuple(f"{key[0]}/{w}" for w in workers),
            tuple(sorted(n for n in nodes if n)),
        )
    return out


def worker_nodes(
    workload: Mapping[str, Any], worker_pods: Sequence[Mapping[str, Any]]
) -> tuple[str, ...]:
    """Nodes of a TensorFusionWorkload's worker pods (label ``tensor-fusion.ai/workload``)."""
    ns, wl = namespace(workload), name(workload)
    return tuple(
        sorted(
            {
                _node(p)
                for p in worker_pods
                if namespace(p) == ns and labels(p).get(WORKLOAD_LABEL) == wl and _node(p)
            }
        )
    )


def created_at(obj: Mapping[str, Any]) -> datetime:
    """metadata.creationTimestamp; the earliest instant when absent or unreadable (the
    controller's sort puts an empty timestamp first too)."""
    text = str((obj.get("metadata") or {}).get("creationTimestamp") or "")
    try:
        found = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return EARLIEST
    return found if found.tzinfo else found.replace(tzinfo=UTC)


# -- small readers ---------------------------------------------------------------------------


def labels(obj: Mapping[str, Any]) -> Mapping[str, str]:
    return (obj.get("metadata") or {}).get("labels") or {}


def namespace(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("namespace") or "")


def name(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name") or "")


def ref(obj: Mapping[str, Any]) -> str:
    return f"{namespace(obj)}/{name(obj)}"


def _node(pod: Mapping[str, Any]) -> str:
    return str((pod.get("spec") or {}).get("nodeName") or "")
