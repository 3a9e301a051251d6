"""R8 Helm upgrade, with the secrets merged in at apply time only and the Git rollout policy
post-rendered (F1: every switch closed).

Recognises its own earlier effect: the revision carries the description
``gitopsbot op=<id> step=helm-upgrade``, so a restart after a kill finds it instead of
upgrading again. A release stuck in pending-* (a killed helm) is reported, never forced.
"""

from __future__ import annotations

from gitopsbot.bot.steps.outcome import SecretSource, StepOutcome
from gitopsbot.core import operation
from gitopsbot.core import secrets as secrets_mod
from gitopsbot.core.journal import Effect, Journal, StepState
from gitopsbot.core.model import ClusterSpec
from gitopsbot.errors import HelmReleaseLocked
from gitopsbot.ports.helm import ChartRef, Helm


def own_revision(helm: Helm, spec: ClusterSpec, description: str) -> int:
    for info in reversed(helm.history(spec.release.release_name, spec.release.namespace)):
        if info.description == description and not info.status.pending:
            return info.revision
    return 0


def refuse_locked(helm: Helm, spec: ClusterSpec) -> None:
    """R8: a release stuck in pending-* (a killed helm) is reported, never forced."""
    rel = spec.release
    latest = helm.status(rel.release_name, rel.namespace)
    if latest is not None and latest.status.pending:
        raise HelmReleaseLocked(
            f"release {rel.namespace}/{rel.release_name} revision {latest.revision} is "
            f"{latest.status} ({latest.description or 'no description'}); not forcing it"
        )


def helm_upgrade(
    helm: Helm,
    secrets: SecretSource,
    journal: Journal,
    spec: ClusterSpec,
    *,
    version: str | None = None,
) -> StepOutcome:
    rel = spec.release
    description = operation.helm_description(journal.op_id)
    done = own_revision(helm, spec, description)
    if done:  # a restart: this operation's upgrade already took effect
        return StepOutcome(
            StepState.SUCCEEDED,
            f"revision {done} already made by this operation",
            effect=Effect(helm_revision=done, description=description),
        )
    refuse_locked(helm, spec)
    resolved = secrets.resolve_all(list(spec.credentials.secrets))
    values = secrets_mod.merge_secrets(spec.values, resolved)  # secrets exist only here
    info = helm.upgrade(
        release=rel.release_name,
        namespace=rel.namespace,
        chart=ChartRef.of(rel),
        version=version or rel.version,
        values=values,
        description=description,
        post_render_policy=spec.rollout,  # F1: Git policy, every switch closed
    )
    return StepOutcome(
        StepState.SUCCEEDED,
        f"revision {info.revision}: chart {info.chart_version} (app {info.app_version})",
        effect=Effect(helm_revision=info.revision, description=description),
    )
