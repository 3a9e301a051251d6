"""The TensorFusion controller: wait until its Deployment rolled out, and restart it (R24).

The restart stamps the step's start time on the pod template: a repeat after a kill writes
the same annotation and starts no new rollout."""

from __future__ import annotations

from datetime import datetime

from gitopsbot.bot.steps.outcome import RETRY, StepOutcome
from gitopsbot.core import tf_objects as tf
from gitopsbot.core.journal import Step, StepState
from gitopsbot.core.model import ClusterSpec
from gitopsbot.ports.cluster import Cluster


def controller_ready(cluster: Cluster, step: Step, spec: ClusterSpec, now: datetime) -> StepOutcome:
    name = tf.controller_name(spec)
    ready = cluster.deployment_ready(spec.release.namespace, name)
    if ready:
        return StepOutcome(StepState.SUCCEEDED, f"deploy/{name} rolled out")
    waited = (now - (step.started_at or now)).total_seconds()
    limit = spec.rollout.controller_ready_timeout_seconds
    if waited >= limit:
        return StepOutcome(
            StepState.FAILED, f"deploy/{name} not ready after {limit}s: {ready.message}"
        )
    return StepOutcome(StepState.RUNNING, f"waiting for deploy/{name}", retry_after=RETRY)


def controller_restart(
    cluster: Cluster, step: Step, spec: ClusterSpec, now: datetime
) -> StepOutcome:
    # R24. The annotation value is the step's start: a repeat after a kill is a no-op.
    at = step.started_at or now
    cluster.restart_deployment(spec.release.namespace, tf.controller_name(spec), at=at)
    return StepOutcome(StepState.SUCCEEDED, f"restarted deploy/{tf.controller_name(spec)} (R24)")
