"""The policy gate at apply time, through the ports: what is deployed (Helm), the charts (the
chart source), the rules (built-in plus the fleet's ``policies/`` at the operation's commit).

The judgement itself is ``core.planning.plan.make_plan`` (the evaluation a pull request gets) and
``core.policy.apply_gate`` (which rules judge which operation, and what a block records). See
docs/policies.md, "At apply time".

A chart source that cannot be reached raises ``ChartUnavailable`` (a TransientError): the
operation is then not started and the next pass judges it again. A chart version the source
does not have is not an error but the CHART-NOT-IN-INDEX deny, exactly as on the pull request.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from gitopsbot.bot import chart_reads
from gitopsbot.bot.reviewed_chart import ReviewedCharts
from gitopsbot.core.charts.chart import Chart, is_version, semver_key
from gitopsbot.core.charts.observed import DeployedState, HelmReleaseInfo
from gitopsbot.core.fleet import secrets as secrets_mod
from gitopsbot.core.fleet.model import ClusterSpec, CredentialsSpec
from gitopsbot.core.planning.plan import make_plan
from gitopsbot.core.policy import Verdict, apply_gate, load_rules
from gitopsbot.core.records.journal import Journal, OperationKind
from gitopsbot.errors import ChartInvalid, ChartNotFound, ConfigError
from gitopsbot.ports.charts import ChartSource

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Deployed:
    """The release as one pass reads it (``helm history --max 1`` and ``helm get values``):
    read once, used by the change's shape and by the gate."""

    info: HelmReleaseInfo | None
    values: Mapping[str, Any]  # user-supplied values, secrets included: never log these

    def state(self, spec: ClusterSpec, app_version: str) -> DeployedState | None:
        """The policy's baseline, with every secret masked (the desired values carry the
        same mask at the referenced paths, so a secret is never a difference)."""
        if self.info is None:
            return None
        masked = secrets_mod.mask(self.values, _secret_paths(spec))
        return DeployedState(
            chart_version=self.info.chart_version,
            app_version=app_version,
            values=masked,
            revision=self.info.revision,
        )


def _secret_paths(spec: ClusterSpec) -> list[str]:
    return [*spec.credentials.secret_paths, *(r.values_path for r in spec.credentials.secrets)]


class ApplyGate:
    """Judges an operation before its first step."""

    def __init__(
        self,
        charts: ChartSource,
        *,
        builtin_documents: Sequence[tuple[str, str]],
        policies_at: Callable[[str], Sequence[tuple[str, str]]],
        spec_at: Callable[[str, str], ClusterSpec] | None = None,
        reviewed: ReviewedCharts | None = None,
    ) -> None:
        self.charts = charts
        # The reviewed chart is the applied chart (bot.reviewed_chart): None, not checked.
        self.reviewed = reviewed
        self._builtin = tuple(builtin_documents)
        self._policies_at = policies_at
        self._spec_at = spec_at

    def _credentials_before(self, journal: Journal) -> CredentialsSpec | None:
        """credentials.yaml at the commit the operation's merge was made on (what a
        rotation is judged against, core.rotation); None when unknown or unreadable."""
        if self._spec_at is None or not journal.base_sha:
            return None
        try:
            return self._spec_at(journal.base_sha, journal.cluster).credentials
        except ConfigError:
            return None  # the cluster is new there, or its files did not load

    def judge(
        self,
        journal: Journal,
        spec: ClusterSpec,
        deployed: Deployed,
        extra: Sequence[Verdict] = (),
    ) -> Journal:
        """``journal`` with the gate's verdicts, ``extra`` ones (the waves', ``bot.waves``)
        among them: BLOCKED when they block. Raises
        ChartUnavailable (retry later) and ConfigError (the fleet's rules do not parse:
        recorded by the caller like any unreadable fleet)."""
        rel = spec.release
        target, problem = chart_reads.target_chart(self.charts, rel)
        before = deployed.info.chart_version if deployed.info is not None else ""
        deployed_chart: Chart | None = None
        if before:
            try:
                deployed_chart = self.charts.chart(rel.chart_repo_url, rel.chart_name, before)
            except (ChartNotFound, ChartInvalid):
                # Installed from elsewhere (a chart the repository no longer has): judged
                # without its defaults, as a pull request without a baseline chart is.
                deployed_chart = None
        downgrade = (
            is_version(before)
            and is_version(rel.version)
            and semver_key(rel.version) < semver_key(before)
        )
        rules = apply_gate.rules_for(
            journal.kind,
            load_rules([*self._builtin, *self._policies_at(journal.desired_sha)]),
            chart_downgrade=downgrade,
        )
        masked = {
            path: secrets_mod.MASK for path in (r.values_path for r in spec.credentials.secrets)
        }
        desired = replace(spec, values=secrets_mod.merge_secrets(spec.values, masked))
        index = None
        if journal.kind is not OperationKind.ROLLBACK:
            index = self.charts.index(rel.chart_repo_url, rel.chart_name)
        state = deployed.state(spec, deployed_chart.app_version if deployed_chart else "")
        if state is not None and journal.kind is not OperationKind.ROLLBACK:
            state = replace(state, credentials=self._credentials_before(journal))
        plan = make_plan(
            deployed=state,
            desired=desired,
            target_chart=target,
            deployed_chart=deployed_chart,
            index=index,
            rules=rules,
            chart_problem=problem,
        )
        result = apply_gate.judge((*plan.verdicts, *extra), spec)
        judged = apply_gate.admit(journal, result)
        if not result.allowed:
            log.warning("%s: %s", journal.cluster, judged.failure)
            return judged
        if self.reviewed is not None and target is not None:
            # Fetched once here: the archive admitted is the one the steps install.
            return self.reviewed.admit(judged, spec)
        return judged
