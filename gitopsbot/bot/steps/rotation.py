"""A rotation's own steps (core.rotation): the vendor Secret (R19), the agent's reconnect check
(R18) and the hypervisor restart of pools with the vector sidecar on (R20).

Secret material passes through here only on its way to the API server: resolved from the
referenced source in memory (``SecretSource``, which also tells the log mask), written
server-side, and dropped. No outcome, error or log line carries it: an API error while the
Secret is written is reduced to its class (a 422 may echo a field of the request).
"""

from __future__ import annotations

import base64
import logging
from collections.abc import Mapping
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from gitopsbot.bot.steps.outcome import RETRY, SecretSource, StepOutcome
from gitopsbot.core.fleet.model import ClusterSpec
from gitopsbot.core.records.journal import Step, StepState
from gitopsbot.core.rollouts import agent_reconnect, hypervisor_restart, windows, workload_wait
from gitopsbot.core.rollouts import tf_objects as tf
from gitopsbot.core.rotation import credentials as rotation
from gitopsbot.errors import KubeError, KubeInvalid, KubeNotFound, TransientError
from gitopsbot.ports.cluster import Cluster

log = logging.getLogger(__name__)


def vendor_secret(cluster: Cluster, secrets: SecretSource, spec: ClusterSpec) -> StepOutcome:
    """R19: replace ``tf-cloud-vendor-credentials`` (``ak``, ``sk``) server-side from the
    referenced sources. Idempotent: a repeat after a kill writes the same data."""
    refs = [r for r in spec.credentials.secrets if r.values_path in rotation.VENDOR_SECRET_KEYS]
    if len(refs) != len(rotation.VENDOR_SECRET_KEYS):
        return StepOutcome(
            StepState.FAILED,
            "credentials.yaml must reference both cloudVendorCredentials.accessKey and "
            "cloudVendorCredentials.secretKey",
        )
    values = secrets.resolve_all(refs)  # SecretUnavailable names the reference only
    namespace = spec.release.namespace
    data = {
        rotation.VENDOR_SECRET_KEYS[path]: base64.b64encode(value.encode()).decode()
        for path, value in values.items()
    }
    obj = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": rotation.VENDOR_SECRET,
            "namespace": namespace,
            # As the chart writes it: helm never deletes it.
            "annotations": {"helm.sh/resource-policy": "keep"},
        },
        "type": "Opaque",
        "data": data,
    }
    where = f"Secret {namespace}/{rotation.VENDOR_SECRET}"
    try:
        # force: the chart (helm's field manager) created it; the bot takes the data over.
        cluster.apply(obj, force=True)
    except KubeError as e:
        message = f"{where}: the API server refused the write ({type(e).__name__})"
        if isinstance(e, TransientError):
            raise type(e)(message, retry_after=e.retry_after) from None
        raise type(e)(message) from None
    finally:
        values.clear()
        data.clear()
    return StepOutcome(StepState.SUCCEEDED, f"replaced {where} (keys ak, sk) from its source")


def _container_ready(pod: Mapping[str, Any], name: str) -> bool:
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    return any(s.get("name") == name and s.get("ready") for s in statuses)


def _has_container(pod: Mapping[str, Any], name: str) -> bool:
    return any(c.get("name") == name for c in (pod.get("spec") or {}).get("containers") or [])


def agent_reconnect_check(
    cluster: Cluster, step: Step, spec: ClusterSpec, now: datetime
) -> StepOutcome:
    """R18: the cluster-agent container of every controller pod logged a connection."""
    namespace = spec.release.namespace
    name = tf.controller_name(spec)
    deployment = cluster.get("apps/v1", "Deployment", namespace, name)
    if deployment is None:
        return StepOutcome(StepState.FAILED, f"deploy/{name} not found")
    match = ((deployment.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
    selector = ",".join(f"{k}={v}" for k, v in sorted(match.items()))
    pods = []
    for pod in cluster.list("v1", "Pod", namespace, label_selector=selector or None):
        if not _has_container(pod, rotation.AGENT_CONTAINER):
            continue
        meta = pod.get("metadata") or {}
        try:
            text = cluster.container_log(namespace, meta["name"], rotation.AGENT_CONTAINER)
        except (KubeNotFound, KubeInvalid):
            text = ""  # gone, or the container has not started yet
        pods.append(
            agent_reconnect.AgentPod(
                name=meta["name"],
                ready=_container_ready(pod, rotation.AGENT_CONTAINER),
                log=text,
                deleting=bool(meta.get("deletionTimestamp")),
            )
        )
    judged = agent_reconnect.judge(
        pods,
        started_at=step.started_at or now,
        now=now,
        timeout_seconds=spec.credentials.agent_reconnect_timeout_seconds,
    )
    if judged.verdict is agent_reconnect.Verdict.CONNECTED:
        return StepOutcome(StepState.SUCCEEDED, judged.detail)
    if judged.verdict is agent_reconnect.Verdict.FAILED:
        return StepOutcome(StepState.FAILED, judged.detail)
    return StepOutcome(StepState.RUNNING, judged.detail, retry_after=RETRY)


def _window(spec: ClusterSpec, pool: str) -> windows.Window | None:
    policy = next((p for p in spec.rollout.pools if p.name == pool), None)
    mw = policy.maintenance_window if policy is not None else None
    if mw is None:
        return None
    try:
        tz = ZoneInfo(mw.timezone)
    except (ZoneInfoNotFoundError, ValueError):
        tz = ZoneInfo("UTC")  # validated at load; a host without that zone falls back
    return windows.Window.of(mw, tz)


def _hypervisor(pod: Mapping[str, Any]) -> hypervisor_restart.HypervisorPod:
    meta = pod.get("metadata") or {}
    conditions = (pod.get("status") or {}).get("conditions") or []
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)
    return hypervisor_restart.HypervisorPod(
        name=meta["name"],
        node=str((pod.get("spec") or {}).get("nodeName") or ""),
        created_at=workload_wait.created_at(pod),
        ready=ready,
        deleting=bool(meta.get("deletionTimestamp")),
    )


def vector_on(gpupool: Mapping[str, Any] | None) -> bool:
    """The pool's hypervisors run the vector sidecar (GPUPool ``componentConfig.hypervisor
    .enableVector``; the CRD's default and the chart's is off)."""
    spec = (gpupool or {}).get("spec") or {}
    hypervisor = (spec.get("componentConfig") or {}).get("hypervisor") or {}
    return bool(hypervisor.get("enableVector"))


def hypervisor_restart_step(
    cluster: Cluster, step: Step, spec: ClusterSpec, now: datetime
) -> StepOutcome:
    """R20: one look at the pool's hypervisor pods; deletes the next batch when it is due."""
    pool = step.pool
    policy = next((p for p in spec.rollout.pools if p.name == pool), None)
    if policy is None:
        return StepOutcome(StepState.SKIPPED, f"pool {pool} is no longer in rollout.yaml")
    gp_name = tf.gpupool_name(spec, pool)
    gpupool = cluster.get(tf.TF, "GPUPool", None, gp_name)
    selector = f"{tf.GROUP}/component=hypervisor,{tf.GROUP}/pool-{gp_name}=true"
    pods = [_hypervisor(p) for p in cluster.list("v1", "Pod", None, label_selector=selector)]
    nodes = cluster.list(tf.TF, "GPUNode", label_selector=f"{tf.GROUP}/pool-{gp_name}=true")
    window = _window(spec, pool)
    decision = hypervisor_restart.decide(
        pods,
        pool=pool,
        vector_on=vector_on(gpupool),
        started_at=step.started_at or now,
        now=now,
        batch_percentage=policy.batch_percentage,
        batch_interval_seconds=policy.batch_interval_seconds,
        window_open=windows.is_open(window, now),
        window_opens_at=windows.next_open(window, now) if window is not None else None,
        max_duration_seconds=policy.max_duration_seconds,
        expected=len(nodes),
    )
    action = hypervisor_restart.Action
    if decision.action is action.SKIP:
        return StepOutcome(StepState.SKIPPED, decision.reason)
    if decision.action is action.DONE:
        return StepOutcome(StepState.SUCCEEDED, decision.reason)
    if decision.action is action.FAIL:
        return StepOutcome(StepState.FAILED, decision.reason)
    if decision.action is action.DELETE:
        namespaces = {
            p["metadata"]["name"]: p["metadata"].get("namespace") or spec.release.namespace
            for p in cluster.list("v1", "Pod", None, label_selector=selector)
        }
        for name in decision.delete:
            # A pod already gone (a repeat after a kill) is no error: False, not raised.
            cluster.delete("v1", "Pod", namespaces.get(name, spec.release.namespace), name)
        log.info("%s: %s", spec.name, decision.reason)
        return StepOutcome(StepState.RUNNING, decision.reason, retry_after=RETRY)
    wait = RETRY
    if decision.until is not None:
        wait = max(RETRY, min((decision.until - now).total_seconds(), 300.0))
    return StepOutcome(StepState.RUNNING, decision.reason, retry_after=wait)
