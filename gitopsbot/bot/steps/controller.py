"""The TensorFusion controller: wait until its Deployment rolled out, and restart it (R24).

The restart stamps the step's start time on the pod template: a repeat after a kill writes
the same annotation and starts no new rollout."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime

from gitopsbot.bot.steps.outcome import (
    WAIT_SLICE_SECONDS,
    StepOutcome,
    retry_after_wait,
    wait_budget,
)
from gitopsbot.core.fleet.model import ClusterSpec
from gitopsbot.core.records.journal import Step, StepState
from gitopsbot.core.rollouts import tf_objects as tf
from gitopsbot.ports.cluster import Cluster


def controller_ready(
    cluster: Cluster,
    step: Step,
    spec: ClusterSpec,
    now: datetime,
    *,
    wait_slice: float = WAIT_SLICE_SECONDS,
    monotonic: Callable[[], float] = time.monotonic,
) -> StepOutcome:
    """Ready → SUCCEEDED. Otherwise the step follows the Deployment's watch for up to
    ``wait_slice`` seconds (never past controller_ready_timeout_seconds, as ``now`` sees
    it), so it sees "ready" as soon as the API server does rather than a poll later;
    still not ready → RUNNING, back at once if the wait took RETRY, FAILED past the limit."""
    name = tf.controller_name(spec)
    waited = step.waited(now)
    limit = spec.rollout.controller_ready_timeout_seconds
    began = monotonic()
    ready = cluster.wait_deployment_ready(
        spec.release.namespace, name, timeout=wait_budget(wait_slice, limit, waited)
    )
    if ready:
        return StepOutcome(StepState.SUCCEEDED, f"deploy/{name} rolled out")
    if waited >= limit:
        return StepOutcome(
            StepState.FAILED, f"deploy/{name} not ready after {limit}s: {ready.message}"
        )
    return StepOutcome(
        StepState.RUNNING,
        f"waiting for deploy/{name}",
        retry_after=retry_after_wait(monotonic() - began),
    )


def controller_restart(
    cluster: Cluster, step: Step, spec: ClusterSpec, now: datetime
) -> StepOutcome:
    # R24. The annotation value is the step's start: a repeat after a kill is a no-op.
    at = step.started_at or now
    cluster.restart_deployment(spec.release.namespace, tf.controller_name(spec), at=at)
    # R24 after a config change, R18-R20 in a rotation: the journal names the operation.
    return StepOutcome(StepState.SUCCEEDED, f"restarted deploy/{tf.controller_name(spec)}")
