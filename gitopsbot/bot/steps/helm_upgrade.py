"""R8 Helm upgrade, with the secrets merged in at apply time only and the Git rollout policy
post-rendered (F1: every switch closed).

Crash-safe. The revision carries the description ``gitopsbot op=<id> step=helm-upgrade``, and
the step reads the release once (``helm history``) before it acts (in a pass: the pass's read,
``bot.release_reads``, never one made before a write such as marking a revision failed):

- a *deployed* (or since superseded) revision with this description: the upgrade already took
  effect before a restart; it is adopted, never repeated;
- the latest revision *pending* and this step's own (helm writes "Preparing upgrade" until it
  finishes, so: this step's chart version, written after the step started; ``started_by``)
  while a helm carrying this description still runs here: waited for (RUNNING), then
  adopted when it lands;
- the same, with no helm alive to finish it: left by a killed bot (helm itself was killed;
  a helm that gets SIGTERM when the bot dies cancels and records ``failed`` instead, see
  docs/helm.md). It is recovered deliberately, as
  Helm's own guidance for a stuck release and Flux's "unlock" do: the revision is marked
  ``failed`` (``Cluster.mark_helm_release_failed``), recorded in the step's detail, and the
  upgrade runs again. A revision helm itself marked failed when the bot's death cancelled it
  is not this operation's result either: the upgrade simply runs again;
- the latest revision pending with someone else's description (a person's helm, another
  tool): not ours to touch. The step waits (RUNNING) for ``LOCK_WAIT_SECONDS``, then the
  operation is *blocked*: nothing of it was applied, so there is nothing to roll back.

helm's errors mask the secrets resolved for this upgrade (passed as ``secret_values``) and the
values at secret paths, nothing else (docs/helm.md).

Only a real failure of the upgrade (helm ran against the cluster and the upgrade failed after
the adapter's retries of transient API errors) fails the step and counts toward
``onFailure``. A chart helm cannot fetch or refuses (``HelmChartUnusable``) blocks instead:
helm stopped before it touched the release.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from gitopsbot.bot.steps.outcome import RETRY, SecretSource, StepOutcome
from gitopsbot.core.charts.observed import HelmReleaseInfo, HelmReleaseStatus
from gitopsbot.core.fleet import secrets as secrets_mod
from gitopsbot.core.fleet.model import ClusterSpec
from gitopsbot.core.operations import operation
from gitopsbot.core.records.journal import Effect, Journal, Step, StepState
from gitopsbot.ports.cluster import Cluster
from gitopsbot.ports.helm import ChartRef, Helm, UpgradeRequest

# How long a release locked by someone else's helm is waited for before the operation blocks.
LOCK_WAIT_SECONDS = 900
BOT_PREFIX = operation.HELM_DESCRIPTION.split("{", 1)[0]  # "gitopsbot op="
_LANDED = (HelmReleaseStatus.DEPLOYED, HelmReleaseStatus.SUPERSEDED)


def landed(history: Sequence[HelmReleaseInfo], description: str) -> int:
    """The newest revision with ``description`` that took effect (deployed, or deployed and
    since superseded); 0 when none did. A failed or pending one is not a result."""
    for info in reversed(history):
        if info.description == description and info.status in _LANDED:
            return info.revision
    return 0


def own_revision(helm: Helm, spec: ClusterSpec, description: str) -> int:
    return landed(helm.history(spec.release.release_name, spec.release.namespace), description)


def started_by(
    latest: HelmReleaseInfo | None, step: Step | None, *, version: str, description: str
) -> bool:
    """Whether the pending ``latest`` is this step's own helm: it carries the step's
    description, or (helm shows "Preparing upgrade" until it finishes) it targets the step's
    chart version and was written after the step started."""
    if latest is None or not latest.status.pending:
        return False
    if latest.description == description:
        return True
    if step is None or step.started_at is None or latest.updated is None:
        return False
    # The step's start is recorded in Git before helm runs, by the same machine's clock that
    # stamps helm's revision: a revision of this step's helm is strictly later.
    return latest.updated > step.started_at and latest.chart_version == version


def settle_pending(
    helm: Helm,
    cluster: Cluster,
    spec: ClusterSpec,
    latest: HelmReleaseInfo | None,
    *,
    ours: bool,
    description: str,
    step: Step | None,
    now: datetime,
) -> StepOutcome | str:
    """What to do about a pending latest revision before acting on the release: an outcome
    to return now (wait, or blocked), or a note (possibly "") and go ahead. ``ours``: the
    revision is this step's own helm (``started_by``), carrying ``description``."""
    if latest is None or not latest.status.pending:
        return ""
    rel = spec.release
    where = f"release {rel.namespace}/{rel.release_name} revision {latest.revision}"
    if ours and helm.operation_alive(description):
        return StepOutcome(
            StepState.RUNNING,
            f"{where} is {latest.status}: its helm still runs here; waiting for it",
            retry_after=RETRY,
        )
    if ours:
        reason = "gitopsbot: left pending by a helm that died with the bot; marked failed"
        cluster.mark_helm_release_failed(rel.namespace, rel.release_name, latest.revision, reason)
        return f"recovered {where}, left {latest.status} by a killed bot (marked failed); "
    waited = step.waited(now) if step is not None else 0.0
    text = (
        f"{where} is {latest.status} ({latest.description or 'no description'}): another "
        "helm operation holds the release"
    )
    if waited >= LOCK_WAIT_SECONDS:
        return StepOutcome(
            StepState.FAILED,
            f"{text}; waited {int(waited)}s. Nothing of this operation was applied; resolve "
            "the release by hand (docs/helm.md), then push a new commit",
            blocked=True,
        )
    return StepOutcome(StepState.RUNNING, f"{text}; waiting", retry_after=RETRY)


def helm_upgrade(
    helm: Helm,
    cluster: Cluster,
    secrets: SecretSource,
    journal: Journal,
    spec: ClusterSpec,
    *,
    now: datetime,
    step: Step | None = None,
    version: str | None = None,
    chart: ChartRef | None = None,
) -> StepOutcome:
    """``chart``: the archive the apply gate admitted (``Executor.chart_ref``); else the
    release's repository."""
    rel = spec.release
    description = operation.helm_description(journal.op_id)
    history = helm.history(rel.release_name, rel.namespace)
    done = landed(history, description)
    if done:  # a restart: this operation's upgrade already took effect
        return StepOutcome(
            StepState.SUCCEEDED,
            f"revision {done} already made by this operation",
            effect=Effect(helm_revision=done, description=description),
        )
    latest = history[-1] if history else None
    target = version or rel.version
    settled = settle_pending(
        helm,
        cluster,
        spec,
        latest,
        ours=started_by(latest, step, version=target, description=description),
        description=description,
        step=step,
        now=now,
    )
    if isinstance(settled, StepOutcome):
        return settled
    resolved = secrets.resolve_all(list(spec.credentials.secrets))
    values = secrets_mod.merge_secrets(spec.values, resolved)  # secrets exist only here
    # What helm's errors must not show: every secret resolved here (wherever the values hold
    # it) and what sits at a declared secret path; every other value stays readable.
    hidden = [
        *resolved.values(),
        *secrets_mod.secret_strings(values, spec.credentials.secret_paths),
    ]
    info = helm.upgrade(
        UpgradeRequest(
            release=rel.release_name,
            namespace=rel.namespace,
            chart=chart or ChartRef.of(rel),
            version=target,
            values=values,
            description=description,
            post_render_policy=spec.rollout,  # F1: Git policy, every switch closed
            secret_values=hidden,
        )
    )
    retries = helm.last_retries
    retried = f" after {retries} retr{'y' if retries == 1 else 'ies'}" if retries else ""
    return StepOutcome(
        StepState.SUCCEEDED,
        f"{settled}revision {info.revision}: chart {info.chart_version} "
        f"(app {info.app_version}){retried}",
        effect=Effect(helm_revision=info.revision, description=description),
    )
