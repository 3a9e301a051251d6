"""Mermaid Gantt charts of a rollout, for pull request comments (GitHub, GitLab and Gitea
render a ```` ```mermaid ```` block as a picture; elsewhere it stays readable text).

``planned`` draws the plan's timeline: per pool (in rollout order, one after another) each
phase's canary and batches with the plan's estimates (``core.rollouts.timeline``), the maintenance
window's length from the pool's start, and its maxDuration as a milestone. ``actual`` draws
an operation as it happened: each step from its start to its end (a running one to "now"),
a pool phase's batches from the progress marks the bot recorded (``core.rollouts.phase_view``), and
what is left as the ETA predicts it.

Times are Unix milliseconds (``dateFormat x``: Mermaid reads a task's start in ``X`` as
milliseconds but its end as seconds, so seconds cannot be used); the plan has no date, so it
starts at 0 and the axis reads as elapsed time.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Sequence
from datetime import datetime

from gitopsbot.core.records.journal import Journal, PhaseState, StepState
from gitopsbot.core.rollouts import phase_view
from gitopsbot.core.rollouts.timeline import PoolTimeline

# A task name may not hold ":" (the field separator), "#" or ";" (comments, statement end).
_UNSAFE = re.compile(r"[:#;\n\r`]")
# Batches drawn per phase; a batchPercentage of 1 would make 100 bars that no one reads.
MAX_BARS = 12


def _span(start: int, end: int) -> str:
    """A task's start and end, given in seconds, as ``dateFormat x`` reads them."""
    return f"{start * 1000}, {end * 1000}"


def _name(text: str) -> str:
    return _UNSAFE.sub(" ", text).strip() or "step"


def _block(title: str, axis: str, body: Sequence[str]) -> str:
    return "\n".join(
        [
            "```mermaid",
            "gantt",
            f"    title {_name(title)}",
            "    dateFormat x",
            f"    axisFormat {axis}",
            *body,
            "```",
        ]
    )


def _bars(prefix: str, count: int, each: int, start: int, tag: str = "") -> tuple[list[str], int]:
    """``count`` bars of ``each`` seconds from ``start``, folded into one bar past MAX_BARS."""
    out: list[str] = []
    t = start
    tags = f"{tag}, " if tag else ""
    if count > MAX_BARS:
        out.append(f"    {prefix} batches 1-{count} :{tags}{_span(t, t + count * each)}")
        return out, t + count * each
    for i in range(1, count + 1):
        out.append(f"    {prefix} batch {i}/{count} :{tags}{_span(t, t + each)}")
        t += each
    return out, t


def planned(pools: Sequence[PoolTimeline]) -> str:
    """The plan's timeline: each phase's estimate (readiness and batch intervals included,
    ``core.rollouts.timeline``) split evenly over its batches."""
    body: list[str] = []
    t = 0
    for pool in pools:
        if not pool.phases:
            continue
        body.append(f"    section {_name(pool.pool)}")
        start = t
        for ph in pool.phases:
            steps = ph.batches + (1 if ph.canary_batch_size else 0)
            each = max(ph.estimate_seconds // steps, 1) if steps else 0
            if ph.canary_batch_size:
                body.append(f"    {ph.component.value} canary :active, {_span(t, t + each)}")
                t += each
            bars, t = _bars(ph.component.value, ph.batches, each, t)
            body.extend(bars)
        if pool.window_seconds is not None:
            body.append(
                f"    maintenance window length :done, {_span(start, start + pool.window_seconds)}"
            )
        if pool.max_duration_seconds is not None:
            at = start + pool.max_duration_seconds
            body.append(f"    maxDuration :milestone, crit, {_span(at, at)}")
    if not body:
        return ""
    return _block("planned rollout, estimates, pools one after another", "%H:%M:%S", body)


def actual(journal: Journal, now: datetime) -> str:
    """The operation as recorded, up to ``now``, with the ETA of what still rolls."""
    body: list[str] = []
    stamp = int(now.timestamp())
    plain = [s for s in journal.steps if not s.pool and s.started_at is not None]
    if plain:
        body.append("    section steps")
    for s in plain:
        assert s.started_at is not None
        end = int((s.finished_at or now).timestamp())
        start = int(s.started_at.timestamp())
        body.append(f"    {_name(s.name)} :{_tag(s.state)}{_span(start, max(end, start + 1))}")
    for s in journal.steps:
        phase = journal.phase(s.name)
        if not s.pool or phase.state is PhaseState.PENDING or phase.started_at is None:
            continue
        body.append(f"    section {_name(s.name)}")
        marks = list(phase.marks)
        shown = phase_view.view(phase, s, now)
        pairs = list(itertools.pairwise(marks))
        if len(pairs) > MAX_BARS:  # folded, as planned() folds: the chart stays readable
            a, b = marks[0], marks[-1]
            pairs = [(a, b)]
        for a, b in pairs:
            start, end = int(a.at.timestamp()), int(b.at.timestamp())
            body.append(f"    to {b.progress}% :done, {_span(start, max(end, start + 1))}")
        last = int((marks[-1].at if marks else phase.started_at).timestamp())
        until = max(stamp, last + 1)
        if phase.state is PhaseState.HALTED:
            body.append(f"    halted at {phase.progress}% :crit, {_span(last, until)}")
        elif phase.state is PhaseState.PAUSED:
            why = "held by a person" if phase.paused_by else "window closed"
            body.append(f"    paused, {why} :{_span(last, until)}")
        elif phase.state is PhaseState.CANARY_VERIFY:
            body.append(f"    verifying the canary :active, {_span(last, until)}")
        elif not shown.finished:
            body.append(f"    rolling now :active, {_span(last, until)}")
        if shown.eta_seconds and phase.state is not PhaseState.PAUSED:
            body.append(f"    ETA to 100% :{_span(stamp, stamp + shown.eta_seconds)}")
        if shown.window_closes_at is not None and not shown.finished:
            closes = int(shown.window_closes_at.timestamp())
            body.append(f"    window closes :milestone, {_span(closes, closes)}")
    if not body:
        return ""
    return _block(f"{journal.kind} {journal.op_id} as it happened", "%H:%M", body)


def _tag(state: StepState) -> str:
    return {
        StepState.SUCCEEDED: "done, ",
        StepState.RUNNING: "active, ",
        StepState.FAILED: "crit, ",
    }.get(state, "")
