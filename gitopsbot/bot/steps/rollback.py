"""R16 rollback: ``helm rollback`` to the revision recorded before the operation; CRDs are
left untouched. Recognises its own earlier effect by helm's ``Rollback to <n>`` description.
When the revision aged out of helm history, it upgrades to the recorded chart version with
the values Git holds now (the revert restored them)."""

from __future__ import annotations

from gitopsbot.bot.steps.helm_upgrade import helm_upgrade, refuse_locked
from gitopsbot.bot.steps.outcome import SecretSource, StepOutcome
from gitopsbot.core import operation
from gitopsbot.core.journal import Effect, Journal, RollbackPoint, StepState
from gitopsbot.core.model import ClusterSpec
from gitopsbot.ports.helm import Helm


def rollback(
    helm: Helm,
    secrets: SecretSource,
    journal: Journal,
    spec: ClusterSpec,
    point: RollbackPoint | None,
) -> StepOutcome:
    if point is None or point.helm_revision == 0:
        return StepOutcome(StepState.FAILED, "no recorded rollback point to return to")
    rel = spec.release
    history = helm.history(rel.release_name, rel.namespace)
    start = journal.rollback_point.helm_revision if journal.rollback_point else 0
    mine = f"Rollback to {point.helm_revision}"
    for info in history:
        if info.revision > start and info.description == mine and not info.status.pending:
            return StepOutcome(
                StepState.SUCCEEDED,
                f"revision {info.revision} already rolled back by this operation",
                effect=Effect(helm_revision=info.revision, description=mine),
            )
    refuse_locked(helm, spec)
    if any(i.revision == point.helm_revision for i in history):
        info = helm.rollback(
            release=rel.release_name,
            namespace=rel.namespace,
            revision=point.helm_revision,
            description=operation.helm_description(journal.op_id),
        )
        return StepOutcome(
            StepState.SUCCEEDED,
            f"helm rollback to revision {point.helm_revision} → revision {info.revision}; "
            "CRDs untouched (R16)",
            effect=Effect(helm_revision=info.revision, description=info.description),
        )
    # The revision aged out of helm history: upgrade to the recorded version with the
    # values Git holds now (the revert restored them).
    outcome = helm_upgrade(helm, secrets, journal, spec, version=point.chart_version)
    return StepOutcome(
        outcome.state,
        f"revision {point.helm_revision} is gone; upgraded to chart {point.chart_version} "
        f"instead: {outcome.detail}",
        effect=outcome.effect,
    )
