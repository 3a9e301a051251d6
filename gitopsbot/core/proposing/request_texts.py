"""A proposal's file edits and its request's text: title, hidden marker, commit message and
body of a cluster's request and of a wave's (``proposals.groupBy: wave``), and the
``gitopsbot/policy`` status a plan's decision sets. Pure: ``core.proposing.proposals`` decides
what is proposed, this module writes it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from gitopsbot.core.charts.chart import ChartVersion, semver_key
from gitopsbot.core.fleet import located_yaml
from gitopsbot.core.fleet.commit_classes import ProposalId
from gitopsbot.core.fleet.model import UpgradeScope
from gitopsbot.core.fleet.yamledit import set_value
from gitopsbot.core.forge.forge_types import CommitState, CommitStatus
from gitopsbot.core.policy import Decision
from gitopsbot.core.proposing.proposals import ProposalDecision, Skipped
from gitopsbot.errors import FleetError

# Where the edits go (fleet layout, docs/fleet-repo.md) and what they set (R4).
RELEASE_VERSION_PATH = "chart.version"
HYPERVISOR_IMAGE_PATH = "cluster.hypervisorImage"


def proposal_edits(
    *, release_text: str, values_text: str, version: str, hypervisor_image: str
) -> tuple[str, str]:
    """``(release.yaml, values.yaml)`` texts bumping the chart and setting the hypervisor image
    explicitly (R4: it does not follow the chart), comments and layout kept. An empty
    ``hypervisor_image`` (the chart has no default) leaves values.yaml as it is."""
    release = set_value(release_text, RELEASE_VERSION_PATH, version)
    values = values_text
    if hypervisor_image:
        values = set_value(
            values_text if values_text.strip() else "{}\n", HYPERVISOR_IMAGE_PATH, hypervisor_image
        )
    return release, values


def marker(cluster: str, version: str) -> str:
    """The hidden marker of a proposal's pull-request body."""
    return f"proposal:{cluster}/{version}"


def title(cluster: str, chart: str, version: str) -> str:
    return f"Upgrade {cluster} to {chart} {version}"


def commit_message(cluster: str, chart: str, current: str, version: str, image: str) -> str:
    lines = [
        title(cluster, chart, version),
        "",
        f"Chart {chart} {current} → {version}.",
    ]
    if image:
        lines.append(f"Hypervisor image set explicitly to {image} (R4).")
    lines += ["", ProposalId(cluster, version).trailer, ""]
    return "\n".join(lines)


def _changes_lines(text: str) -> list[str]:
    """``artifacthub.io/changes`` (a YAML list of {kind, description} or of strings) as a
    Markdown list; anything else verbatim in a code block."""
    try:
        doc = located_yaml.load(text, "artifacthub.io/changes")
    except FleetError:
        doc = None
    if isinstance(doc, list) and doc:
        out: list[str] = []
        for item in doc:
            if isinstance(item, Mapping):
                kind = str(item.get("kind", "")).strip()
                desc = str(item.get("description", "")).strip()
                out.append(f"- {'**' + kind + '** ' if kind else ''}{desc}")
            else:
                out.append(f"- {item}")
        return out
    return ["```", text.rstrip(), "```"]


def changes_section(current: str, target: str, versions: Sequence[ChartVersion]) -> list[str]:
    """The chart's published changes for every version in (current, target], newest first."""
    lo, hi = semver_key(current), semver_key(target)
    out: list[str] = []
    for entry in sorted(versions, key=lambda v: semver_key(v.version), reverse=True):
        if lo < semver_key(entry.version) <= hi and entry.changes.strip():
            created = f" ({entry.created[:10]})" if entry.created else ""
            out += [f"#### {entry.version}{created}", "", *_changes_lines(entry.changes), ""]
    return out


def _not_proposed(skipped: Sequence[Skipped]) -> list[str]:
    """The newer versions skipped and why (R2, F5), for a request's body."""
    if not skipped:
        return []
    return [
        "Newer versions not proposed:",
        "",
        *[f"- {s.version}: {s.reason}" for s in skipped],
        "",
    ]


def _chart_changes(current: str, target: str, versions: Sequence[ChartVersion]) -> list[str]:
    """The body's section of the chart's changes from ``current`` to ``target`` (none: [])."""
    changes = changes_section(current, target, versions)
    return ["### Chart changes", "", *changes] if changes else []


def proposal_body(
    decision: ProposalDecision,
    *,
    chart: str,
    scope: UpgradeScope,
    plan_markdown: str,
    versions: Sequence[ChartVersion],
    image: str,
) -> str:
    """The pull-request body: what is proposed and why, the chart's changes, then the plan.
    ``image``: the hypervisor image the proposal writes into values.yaml; empty when values.yaml
    is not edited (the body lists only real edits)."""
    assert decision.target is not None
    target = decision.target
    ((cluster, current),) = decision.current
    out = [
        f"gitopsbot proposes chart `{chart}` **{current} → {target.version}** "
        f"(appVersion {target.app_version}) for cluster `{cluster}` "
        f"(scope `{scope}`).",
        "",
        f"- `release.yaml`: `{RELEASE_VERSION_PATH}` → `{target.version}`",
    ]
    if image:
        out.append(f"- `values.yaml`: `{HYPERVISOR_IMAGE_PATH}` → `{image}` (set explicitly, R4)")
    out.append("")
    out += _not_proposed(decision.skipped)
    out += _chart_changes(current, target.version, versions)
    out += [plan_markdown.rstrip(), ""]
    return "\n".join(out)


def policy_status(decision: Decision) -> CommitStatus:
    """The ``gitopsbot/policy`` commit status for a plan's decision (a deny fails)."""
    state, description = {
        Decision.ALLOWED: (CommitState.SUCCESS, "policy: allowed"),
        Decision.NEEDS_ACK: (CommitState.PENDING, "policy: needs acknowledgement"),
        Decision.DENIED: (CommitState.FAILURE, "policy: denied"),
    }[decision]
    return CommitStatus(state, description)


# -- a wave's request ----------------------------------------------------------------------


def wave_marker(wave: str, version: str) -> str:
    """The hidden marker of a wave request's body."""
    return f"proposal:wave/{wave}/{version}"


def wave_title(wave: str, chart: str, version: str) -> str:
    return f"Upgrade wave {wave} to {chart} {version}"


def wave_commit_message(
    wave: str,
    chart: str,
    version: str,
    current: Sequence[tuple[str, str]],
    images: Mapping[str, str],
) -> str:
    """The wave commit's message: one ``Gitopsbot-Proposal`` trailer per cluster, so a merge
    (squash too) is recognised per cluster as a proposal's."""
    lines = [wave_title(wave, chart, version), ""]
    for cluster, was in current:
        image = images.get(cluster, "")
        pin = f"; hypervisor image set explicitly to {image} (R4)" if image else ""
        lines.append(f"{cluster}: chart {chart} {was} → {version}{pin}.")
    lines.append("")
    lines += [ProposalId(cluster, version).trailer for cluster, _ in current]
    return "\n".join(lines) + "\n"


def wave_body(
    d: ProposalDecision,
    *,
    chart: str,
    versions: Sequence[ChartVersion],
    images: Mapping[str, str],
    plans: Sequence[tuple[str, str]],
    evidence: str,
) -> str:
    """The wave request's body: the clusters it bumps (and what each edit is), the ones left
    out, the earlier waves' evidence, the chart's changes, then each cluster's plan."""
    assert d.target is not None
    target = d.target
    out = [
        f"gitopsbot proposes chart `{chart}` **{target.version}** (appVersion "
        f"{target.app_version}) for wave `{d.wave}`: {len(d.clusters)} cluster(s).",
        "",
        "| cluster | from | edits |",
        "|---|---|---|",
    ]
    for cluster, was in d.current:
        edits = f"`release.yaml`: `{RELEASE_VERSION_PATH}` → `{target.version}`"
        if images.get(cluster):
            edits += f"; `values.yaml`: `{HYPERVISOR_IMAGE_PATH}` → `{images[cluster]}` (R4)"
        out.append(f"| `{cluster}` | {was} | {edits} |")
    out.append("")
    if d.notes:
        out += ["Notes:", "", *[f"- {n}" for n in d.notes], ""]
    out += _not_proposed(d.skipped)
    if evidence:
        out += [evidence.rstrip(), ""]
    lowest = min((was for _, was in d.current), key=semver_key, default=target.version)
    out += _chart_changes(lowest, target.version, versions)
    for cluster, plan in plans:
        out += [f"## `{cluster}`", "", plan.rstrip(), ""]
    return "\n".join(out)
