"""Render a Plan as Markdown (the pull-request comment) and as JSON (``docs/plan.md``).

Deterministic: the same plan renders to the same bytes (golden tests). Values come from the
plan's already-masked diff; nothing here sees a secret.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from gitopsbot.core.charts.crd_diff import CrdChange, CrdChangeKind
from gitopsbot.core.charts.values_diff import ChangeKind
from gitopsbot.core.fleet.model import Location
from gitopsbot.core.planning import gantt
from gitopsbot.core.planning.plan import Plan
from gitopsbot.core.policy import RULES_DOC, Decision, Outcome
from gitopsbot.core.rollouts.timeline import format_duration

JSON_SCHEMA_VERSION = 1
MARKER = "<!-- gitopsbot:plan -->"
_HEADLINE = {
    Decision.ALLOWED: "✅ allowed",
    Decision.NEEDS_ACK: "✋ needs acknowledgement",
    Decision.DENIED: "⛔ denied",
}
_OUTCOME = {
    Outcome.DENIED: "⛔ denied",
    Outcome.NEEDS_ACK: "✋ needs acknowledgement",
    Outcome.ACKNOWLEDGED: "☑️ acknowledged",
    Outcome.WARNED: "⚠️ warning",
}
_MAX_VALUE = 80
_MAX_DIFF_LINES = 200


def _cell(text: object) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _line(text: object) -> str:
    return str(text).replace("\n", " ")


def _value(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)
    return text if len(text) <= _MAX_VALUE else text[: _MAX_VALUE - 1] + "…"


def _table(header: Iterable[str], rows: Iterable[Iterable[object]]) -> list[str]:
    head = list(header)
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    out += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return out


def _crd_line(c: CrdChange) -> str:
    mark = "**BREAKING** " if c.breaking else ""
    what = {
        CrdChangeKind.CRD_ADDED: "CRD added",
        CrdChangeKind.CRD_REMOVED: "CRD removed",
        CrdChangeKind.VERSION_ADDED: f"served version {c.version} added",
        CrdChangeKind.VERSION_REMOVED: f"served version {c.version} removed",
        CrdChangeKind.STORAGE_CHANGED: f"storage version {c.detail}",
        CrdChangeKind.FIELDS_REMOVED: f"{c.version}: {len(c.fields)} field(s) removed",
        CrdChangeKind.FIELDS_ADDED: f"{c.version}: {len(c.fields)} field(s) added",
    }[c.kind]
    line = f"- {mark}`{c.crd}`: {what}"
    if c.fields:
        shown = ", ".join(f"`{f}`" for f in c.fields[:6])
        more = f" and {len(c.fields) - 6} more" if len(c.fields) > 6 else ""
        line += f" ({shown}{more})"
    return line


def _where(loc: Location | None) -> str:
    if loc is None:
        return ""
    return f"{loc.file}:{loc.line}" if loc.line else loc.file


def render_markdown(plan: Plan) -> str:
    v = plan.versions
    out = [
        MARKER,
        f"## gitopsbot plan for `{plan.cluster}`: {_HEADLINE[plan.decision]}",
        "",
        f"Release `{plan.release}` ({plan.environment}); baseline: {plan.baseline}.",
        "",
        *_table(
            ("", "deployed", "target"),
            [
                ("chart", v.chart_before or "—", v.chart_after),
                ("app", v.app_before or "—", v.app_after),
            ],
        ),
        "",
        *_digest_lines(plan),
        "### Policy",
        "",
    ]
    if plan.verdicts:
        out += _table(
            ("verdict", "rule", "procedure", "finding"),
            [
                (
                    _OUTCOME[x.outcome],
                    f"`{x.label}`",
                    x.procedure,
                    x.message
                    + (f" (`{_where(x.location)}`)" if x.location else "")
                    + (f" ([guide]({x.link}))" if x.link else "")
                    + (f" — acknowledged: {x.ack_reason}" if x.ack_reason else ""),
                )
                for x in plan.verdicts
            ],
        )
        if any(x.doc for x in plan.verdicts):  # a path: a comment cannot know where docs are read
            out += [
                "",
                f"Each built-in rule is explained under its name in gitopsbot's `{RULES_DOC}`.",
            ]
        if any(x.outcome == Outcome.NEEDS_ACK for x in plan.verdicts):
            ids = sorted({x.rule_id for x in plan.verdicts if x.outcome == Outcome.NEEDS_ACK})
            out += [
                "",
                f"To acknowledge, add to `clusters/{plan.cluster}/rollout.yaml` "
                "(deny rules cannot be acknowledged):",
                "",
                "```yaml",
                "acknowledgements:",
                *(f'  {i}: "why this is safe here"' for i in ids),
                "```",
            ]
    else:
        out.append("No rule fired.")
    out += ["", "### Steps", ""]
    unread = (
        f"The target chart could not be read ({plan.chart_problem})" if plan.chart_problem else ""
    )
    if plan.steps:
        out += _table(
            ("#", "step", "rule", "impact on running work"),
            [(i, s.title, s.rule, s.impact) for i, s in enumerate(plan.steps, 1)],
        )
    elif unread:
        out.append(f"None: {unread[0].lower()}{unread[1:]}, so nothing can be applied.")
    else:
        out.append("Nothing to do: Git matches the baseline.")
    out += ["", "### Images", ""]
    if unread:
        out.append(f"{unread}: the target images are unknown.")
    else:
        out += _table(
            ("component", "deployed", "target", "change"),
            [
                (
                    i.component,
                    f"`{i.before}`" if i.before else "—",
                    f"`{i.after}`" if i.after else "—",
                    ("changes" if i.changed else "unchanged")
                    + ("" if i.explicit else " (chart default)")
                    + (" — chart default moved" if i.default_moved and not i.changed else ""),
                )
                for i in plan.images
            ],
        )
    out += ["", "### CRDs", ""]
    if unread:
        out.append(f"{unread}: its CRDs are unknown.")
    elif plan.crd_diff.changes:
        out += [_crd_line(c) for c in plan.crd_diff.changes]
    else:
        out.append("No CRD changes.")
    out += ["", "### Values", ""]
    if unread:
        out += [f"{unread}: its defaults and values.schema.json were not checked.", ""]
    changes = plan.values_diff.changes
    if changes:
        lines = []
        for c in changes[:_MAX_DIFF_LINES]:
            if c.kind == ChangeKind.ADDED:
                lines.append(f"+ {c.path}: {_value(c.after)}")
            elif c.kind == ChangeKind.REMOVED:
                lines.append(f"- {c.path}: {_value(c.before)}")
            else:
                lines.append(f"! {c.path}: {_value(c.before)} → {_value(c.after)}")
        if len(changes) > _MAX_DIFF_LINES:
            lines.append(f"… and {len(changes) - _MAX_DIFF_LINES} more")
        counts = {k: len(plan.values_diff.of_kind(k)) for k in ChangeKind}
        out += [
            f"{counts[ChangeKind.ADDED]} added, {counts[ChangeKind.REMOVED]} removed, "
            f"{counts[ChangeKind.CHANGED]} changed (secret values shown as `***`):",
            "",
            "```diff",
            *lines,
            "```",
        ]
    else:
        out.append("No values changes.")
    out += ["", "### Rollout timeline", ""]
    rows = []
    for p in plan.pool_phases:
        tl = p.timeline
        window = format_duration(tl.window_seconds) if tl.window_seconds is not None else "—"
        if not tl.phases:
            waiting = ", ".join(c.value for c in p.waiting)
            rows.append(
                (p.pool, tl.nodes, "—", "—", "—", window, f"waits: {waiting}" if waiting else "")
            )
        for i, ph in enumerate(tl.phases):
            canary = f"canary {ph.canary_batch_size} + " if ph.canary_batch_size else ""
            pct = f"{ph.batch_percentage}%"
            if ph.requested_percentage:
                pct = f"budget: {ph.requested_percentage}% → {ph.batch_percentage}%"
            rows.append(
                (
                    p.pool,
                    tl.nodes,
                    ph.component.value,
                    f"{canary}{ph.batches} × {ph.batch_size} ({pct})",
                    format_duration(ph.estimate_seconds),
                    window,
                    "; ".join(tl.notes) if i == 0 else "",
                )
            )
    if rows:
        out += _table(
            ("pool", "nodes", "component", "batches", "estimate", "window", "notes"), rows
        )
        chart = gantt.planned([p.timeline for p in plan.pool_phases])
        if chart:
            out += ["", chart]
    else:
        out.append("No pools in the rollout policy.")
    out += _admission_markdown(plan)
    if plan.schema_problems:
        out += ["", "### Schema", ""] + [f"- {p}" for p in plan.schema_problems]
    if plan.notes:
        out += ["", "### Notes", ""] + [f"- {n}" for n in plan.notes]
    return "\n".join(out) + "\n"


def _admission_markdown(plan: Plan) -> list[str]:
    """Gates, budgets and admission per pool (issue 18), and how they change the estimate;
    nothing when no pool sets them."""
    pools = [p for p in plan.pool_phases if p.admission]
    if not pools:
        return []
    out = ["", "### Gates and budgets", ""]
    for p in pools:
        out.append(f"**{p.pool}**")
        out.append("")
        out += [f"- {key}: {_line(text)}" for key, text in p.admission]
        out += [f"- estimate: {_line(n)}" for n in p.timeline.admission_notes]
        out.append("")
    return out[:-1]


def _digest_lines(plan: Plan) -> list[str]:
    """What the apply will hold the chart to (docs/plan.md, "Digests"); nothing when the
    plan's maker could not fetch the archive."""
    if plan.chart_digests is None:
        return []
    return [*(f"- {line}" for line in plan.chart_digests.lines()), ""]


def plan_to_json(plan: Plan) -> dict[str, Any]:
    """The plan as JSON-ready data; ``schema_version`` bumps on incompatible changes."""
    return {
        "schema_version": JSON_SCHEMA_VERSION,
        "cluster": plan.cluster,
        "environment": plan.environment,
        "release": plan.release,
        "baseline": plan.baseline,
        "decision": plan.decision.value,
        "versions": {
            "chart": {"from": plan.versions.chart_before, "to": plan.versions.chart_after},
            "app": {"from": plan.versions.app_before, "to": plan.versions.app_after},
        },
        "verdicts": [
            {
                "rule": x.rule_id,
                "name": x.name,
                "doc": x.doc,
                "severity": x.severity.value,
                "outcome": x.outcome.value,
                "procedure": x.procedure,
                "message": x.message,
                "link": x.link,
                "acknowledged_because": x.ack_reason,
                "location": _where(x.location),
                "blocking": x.blocking,
            }
            for x in plan.verdicts
        ],
        "steps": [
            {
                "kind": s.kind.value,
                "title": s.title,
                "rule": s.rule,
                "impact": s.impact,
                "pool": s.pool,
                "components": [c.value for c in s.components],
            }
            for s in plan.steps
        ],
        "images": [
            {
                "component": i.component,
                "from": i.before,
                "to": i.after,
                "changed": i.changed,
                "explicit": i.explicit,
                "chart_default_moved": i.default_moved,
            }
            for i in plan.images
        ],
        "crds": [
            {
                "kind": c.kind.value,
                "crd": c.crd,
                "version": c.version,
                "detail": c.detail,
                "fields": list(c.fields),
                "breaking": c.breaking,
            }
            for c in plan.crd_diff.changes
        ],
        "values": [
            {"op": c.kind.value, "path": c.path, "from": c.before, "to": c.after}
            for c in plan.values_diff.changes
        ],
        "pools": [
            {
                "pool": p.pool,
                "rolls": [c.value for c in p.components],
                "waits": [c.value for c in p.waiting],
                "reasons": {c.value: r for c, r in p.reasons.items()},
                "nodes": p.timeline.nodes,
                "estimate_seconds": p.timeline.estimate_seconds,
                "window_seconds": p.timeline.window_seconds,
                "max_duration_seconds": p.timeline.max_duration_seconds,
                "phases": [
                    {
                        "component": ph.component.value,
                        "batch_percentage": ph.batch_percentage,
                        "batch_size": ph.batch_size,
                        "batches": ph.batches,
                        "canary_batch_size": ph.canary_batch_size,
                        "estimate_seconds": ph.estimate_seconds,
                        **(
                            {"requested_percentage": ph.requested_percentage}
                            if ph.requested_percentage
                            else {}
                        ),
                        **({"gate_judgements": ph.gate_judgements} if ph.gate_judgements else {}),
                    }
                    for ph in p.timeline.phases
                ],
                "notes": list(p.timeline.notes),
                # Only present for a pool with issue 18's settings (gates, budgets, ...).
                **(
                    {
                        "admission": [{"key": k, "text": t} for k, t in p.admission],
                        "admission_notes": list(p.timeline.admission_notes),
                    }
                    if p.admission
                    else {}
                ),
            }
            for p in plan.pool_phases
        ],
        "schema_problems": [str(p) for p in plan.schema_problems],
        "notes": list(plan.notes),
        # Only present when the plan's maker fetched the target chart's archive.
        **(
            {"chart_digests": plan.chart_digests.to_json()}
            if plan.chart_digests is not None
            else {}
        ),
        # Only present when the target chart could not be read (no images, CRDs, steps).
        **({"target_chart_problem": plan.chart_problem} if plan.chart_problem else {}),
        # Only present when the Git baseline holds secret-looking literals (never the value).
        **(
            {
                "baseline_secret_literals": [
                    {"path": path, "location": _where(loc)}
                    for path, loc in sorted(
                        plan.baseline_secret_literals.items(), key=lambda i: (i[1].file, i[1].line)
                    )
                ]
            }
            if plan.baseline_secret_literals
            else {}
        ),
    }


def render_json(plan: Plan) -> str:
    return json.dumps(plan_to_json(plan), indent=2, sort_keys=True, default=str) + "\n"
