"""R16 rollback to the revision recorded before the operation; CRDs are left untouched.

No rollback may let the controller roll components faster, in bigger batches or outside the
window than Git says (F1, R21). ``helm rollback`` re-applies the target revision's stored
manifest and cannot run the post-renderer, so it is used only when that manifest was
rendered by the bot (its description is the bot's, or it is itself a rollback to such a
revision): then it carries the Git policy with every switch closed. Any other target (the
release a person installed before the bot, with the chart's own policy: switches on, 20 %,
1 s, no window) is reached by a ``helm upgrade`` to the recorded chart version with the
values Git holds at the revert, through the post-renderer, exactly like an upgrade. The same
upgrade is used when the revision aged out of helm history. docs/executor.md, "Rollback".

Crash-safe like the upgrade (``helm_upgrade.settle_pending``): its own earlier effect is
adopted (helm's ``Rollback to <n>`` revision after the operation's start, or the upgrade's
revision with this operation's description), a pending revision a killed bot left is marked
failed and the rollback runs again.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from datetime import datetime

from gitopsbot.bot.steps.helm_upgrade import (
    BOT_PREFIX,
    helm_upgrade,
    landed,
    settle_pending,
    started_by,
)
from gitopsbot.bot.steps.outcome import SecretSource, StepOutcome
from gitopsbot.core.charts.observed import HelmReleaseInfo
from gitopsbot.core.fleet.model import ClusterSpec
from gitopsbot.core.operations import operation
from gitopsbot.core.records.journal import Effect, Journal, RollbackPoint, Step, StepState
from gitopsbot.ports.cluster import Cluster
from gitopsbot.ports.helm import ChartRef, Helm, RollbackRequest

_ROLLBACK_TO = re.compile(r"^Rollback to (\d+)$")


def rendered_by_bot(history: Sequence[HelmReleaseInfo], revision: int) -> bool:
    """Whether ``revision``'s stored manifest went through the bot's post-renderer."""
    by_number = {info.revision: info for info in history}
    seen: set[int] = set()
    while revision in by_number and revision not in seen:
        seen.add(revision)
        description = by_number[revision].description
        if description.startswith(BOT_PREFIX):
            return True
        match = _ROLLBACK_TO.match(description)
        if match is None:
            return False
        revision = int(match.group(1))
    return False


def rollback(
    helm: Helm,
    cluster: Cluster,
    secrets: SecretSource,
    journal: Journal,
    spec: ClusterSpec,
    point: RollbackPoint | None,
    *,
    now: datetime,
    step: Step | None = None,
    fallback_chart: Callable[[ClusterSpec, RollbackPoint], tuple[ChartRef | None, str]]
    | None = None,
) -> StepOutcome:
    """``fallback_chart``: the chart (and what was compared) the upgrade that replaces a
    ``helm rollback`` installs (``Executor.fallback_chart``); None: the release's
    repository, uncompared."""
    if point is None or point.helm_revision == 0:
        return StepOutcome(StepState.FAILED, "no recorded rollback point to return to")
    rel = spec.release
    history = helm.history(rel.release_name, rel.namespace)
    start = journal.rollback_point.helm_revision if journal.rollback_point else 0
    mine = f"Rollback to {point.helm_revision}"
    ours = operation.helm_description(journal.op_id)
    for info in history:
        if info.revision > start and info.description == mine and landed([info], mine):
            return StepOutcome(
                StepState.SUCCEEDED,
                f"revision {info.revision} already rolled back by this operation",
                effect=Effect(helm_revision=info.revision, description=mine),
            )
    upgraded = landed(history, ours)
    if upgraded:
        return StepOutcome(
            StepState.SUCCEEDED,
            f"revision {upgraded} already made by this operation",
            effect=Effect(helm_revision=upgraded, description=ours),
        )
    latest = history[-1] if history else None
    # Our own interrupted rollback or upgrade: after the operation started, and (a helm
    # rollback) described "Rollback to <n>" or (the upgrade) on the recorded chart version.
    own = (
        latest is not None
        and latest.revision > start
        and (
            latest.description == mine
            or started_by(latest, step, version=point.chart_version, description=ours)
        )
    )
    settled = settle_pending(
        helm, cluster, spec, latest, ours=own, description=ours, step=step, now=now
    )
    if isinstance(settled, StepOutcome):
        return settled
    if rendered_by_bot(history, point.helm_revision):
        info = helm.rollback(
            RollbackRequest(
                release=rel.release_name,
                namespace=rel.namespace,
                revision=point.helm_revision,
                description=ours,
            )
        )
        return StepOutcome(
            StepState.SUCCEEDED,
            f"{settled}helm rollback to revision {point.helm_revision} → revision "
            f"{info.revision}; CRDs untouched (R16)",
            effect=Effect(helm_revision=info.revision, description=info.description),
        )
    # Not rendered by the bot, or aged out of helm history: upgrade to the recorded version
    # with the values Git holds now (the revert restored them), through the post-renderer.
    why = (
        "was not rendered by the bot (helm rollback would restore the chart's own pool policy)"
        if any(i.revision == point.helm_revision for i in history)
        else "is gone from helm history"
    )
    chart, compared = fallback_chart(spec, point) if fallback_chart is not None else (None, "")
    outcome = helm_upgrade(
        helm, cluster, secrets, journal, spec, now=now, step=step, version=point.chart_version,
        chart=chart,
    )  # fmt: skip
    said = f" ({compared})" if compared else ""
    return StepOutcome(
        outcome.state,
        f"{settled}revision {point.helm_revision} {why}; upgraded to chart "
        f"{point.chart_version}{said} with the Git values and policy instead: {outcome.detail}",
        effect=outcome.effect,
        retry_after=outcome.retry_after,
        blocked=outcome.blocked,
    )
