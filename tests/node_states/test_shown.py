"""Where per-node state shows: the phase's node line (core.phase_view), `gitopsbot status`
as text (a line per node with its state, batch and since) and as JSON, the log-and-CI change
lines, the pull-request comment, and the gitopsbot_rollout_nodes gauge."""

from __future__ import annotations

import argparse
import io
import json
from contextlib import redirect_stdout
from dataclasses import dataclass, field, fields, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from gitopsbot.adapters.metrics import BotMetrics
from gitopsbot.bot import report
from gitopsbot.bot.gauges import PassGauges, node_counts
from gitopsbot.commands import status
from gitopsbot.core.fleet.model import Component
from gitopsbot.core.records.journal import (
    Journal,
    OperationKind,
    PhaseProgress,
    PhaseState,
    Step,
    StepKind,
    StepState,
)
from gitopsbot.core.records.node_states import NodeRecord, NodeState
from gitopsbot.core.rollouts import phase_view

T0 = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)
NOW = T0 + timedelta(minutes=10)
NAME = "pool/shared/hypervisor"
RECORDS = (
    NodeRecord("gpu-a", NodeState.VERIFIED, 1, T0 + timedelta(minutes=3)),
    NodeRecord("gpu-b", NodeState.IN_BATCH, 2, T0 + timedelta(minutes=8)),
    NodeRecord("gpu-c", NodeState.HELD, 0, T0 + timedelta(minutes=9), "paused by @alice"),
)


class _PhaseWithNodes(PhaseProgress):
    """A phase carrying ``nodes`` while the journal's PhaseProgress does not have the field
    yet (the integrator adds it; ``with_nodes`` then uses it)."""


def with_nodes(phase: PhaseProgress, records: tuple[NodeRecord, ...]) -> PhaseProgress:
    if "nodes" in {f.name for f in fields(PhaseProgress)}:
        return replace(phase, nodes=records)  # type: ignore[call-arg, unused-ignore]
    carrier = _PhaseWithNodes(**{f.name: getattr(phase, f.name) for f in fields(phase)})
    object.__setattr__(carrier, "nodes", records)  # frozen: set once, as a field would be
    return carrier


def journal(records: tuple[NodeRecord, ...] = RECORDS) -> Journal:
    step = Step(
        NAME,
        StepKind.POOL_PHASE,
        StepState.RUNNING,
        started_at=T0,
        pool="shared",
        component=Component.HYPERVISOR,
    )
    phase = PhaseProgress(
        NAME,
        PhaseState.ROLLING,
        started_at=T0,
        opened_at=T0,
        progress=50,
        last_progress_at=T0,
        batch_percentage=50,
        total=3,
    )
    j = Journal("20261204-120000-ab12", OperationKind.UPGRADE, "alpha", "a" * 40, T0)
    return replace(j, steps=(step,), phases=(with_nodes(phase, records),))


@dataclass
class _Store:
    """What ``status`` reads of the state branch."""

    journals: dict[str, Journal] = field(default_factory=dict)

    def clusters(self) -> list[str]:
        return sorted(self.journals)

    def current(self, cluster: str) -> Journal | None:
        return self.journals.get(cluster)

    def queued(self, cluster: str) -> Journal | None:
        return None

    def manual_revision(self, cluster: str) -> None:
        return None

    def drift(self, cluster: str) -> None:
        return None

    def pass_failure(self, cluster: str) -> None:
        return None

    def load_failure(self, cluster: str) -> None:
        return None

    def tools(self) -> None:
        return None

    def seen(self, cluster: str) -> str | None:
        return None


def test_the_node_line_under_a_phase() -> None:
    assert phase_view.phase_nodes(journal().phase(NAME)) == RECORDS
    assert phase_view.phase_nodes(PhaseProgress(NAME)) == ()  # none recorded: no line
    row = report.step_rows(journal(), NOW)[0]
    assert row.node_line == "nodes: 3 nodes: 1 verified, 1 in batch 2, 1 held"
    assert report.step_rows(journal(()), NOW)[0].node_line == ""


def test_status_lists_each_node_with_its_state_batch_and_since() -> None:
    text, code = status.render(_Store({"alpha": journal()}), "alpha", NOW)  # type: ignore[arg-type]
    assert code == 0
    lines = text.splitlines()
    at = lines.index("      nodes: 3 nodes: 1 verified, 1 in batch 2, 1 held")
    assert lines[at + 1 : at + 5] == [
        "        node   state      batch  since",
        "        gpu-a  verified       1  2026-12-04 12:03:00 (7m00s ago)",
        "        gpu-b  in-batch       2  2026-12-04 12:08:00 (2m00s ago)",
        "        gpu-c  held           -  2026-12-04 12:09:00 (1m00s ago)  paused by @alice",
    ]
    # Without records, nothing is added under the phase.
    plain, _ = status.render(_Store({"alpha": journal(())}), "alpha", NOW)  # type: ignore[arg-type]
    assert "nodes:" not in plain and "batch  since" not in plain


def test_status_json_carries_the_nodes() -> None:
    doc, code = status.as_json(_Store({"alpha": journal()}), None, NOW)  # type: ignore[arg-type]
    assert code == 0
    (step,) = doc["clusters"]["alpha"]["operation"]["steps"]
    assert step["phase"]["progress"] == 50
    nodes = step["nodes"]
    assert nodes["summary"] == "3 nodes: 1 verified, 1 in batch 2, 1 held"
    assert nodes["counts"]["verified"] == 1 and nodes["counts"]["pending"] == 0
    assert nodes["records"][2] == {
        "name": "gpu-c",
        "state": "held",
        "batch": 0,
        "since": "2026-12-04T12:09:00+00:00",
        "detail": "paused by @alice",
    }
    missing, code = status.as_json(_Store({"alpha": journal()}), "beta", NOW)  # type: ignore[arg-type]
    assert code == 1 and "beta" in missing["error"]


def test_status_json_from_the_command() -> None:
    args = argparse.Namespace(cluster="alpha", watch=False, json=True, interval=5.0)
    out = io.StringIO()
    with redirect_stdout(out):
        code = status.show(_Store({"alpha": journal()}), args, "state: test")  # type: ignore[arg-type]
    assert code == 0
    doc = json.loads(out.getvalue())
    assert doc["source"] == "state: test"
    assert doc["clusters"]["alpha"]["operation"]["steps"][0]["nodes"]["records"][0]["name"] == (
        "gpu-a"
    )


def test_change_lines_and_the_comment_tell_the_nodes() -> None:
    seen: dict[str, str] = {}
    first = report.change_lines(journal(), NOW, seen)
    assert any("nodes: 3 nodes: 1 verified, 1 in batch 2, 1 held" in line for line in first)
    # A node moving on is a change; the clock alone is not.
    assert report.change_lines(journal(), NOW + timedelta(minutes=1), seen) == []
    moved = tuple(replace(r, state=NodeState.UPDATED) if r.name == "gpu-b" else r for r in RECORDS)
    again = report.change_lines(journal(moved), NOW, seen)
    assert len(again) == 1 and "1 verified, 1 updated, 1 held" in again[0]
    assert "nodes: 3 nodes: 1 verified, 1 in batch 2, 1 held" in report.markdown(journal())


def test_the_gauge_counts_nodes_per_state_and_forgets_old_phases() -> None:
    metrics = BotMetrics(_Clock())
    counts = node_counts(journal())
    assert list(counts) == [("shared", "hypervisor")]
    metrics.rollout_nodes("alpha", counts)

    def value(state: str, pool: str = "shared") -> float | None:
        labels = {"cluster": "alpha", "pool": pool, "component": "hypervisor", "state": state}
        return metrics.registry.get_sample_value("gitopsbot_rollout_nodes", labels)

    assert (value("verified"), value("in-batch"), value("held"), value("pending")) == (1, 1, 1, 0)
    metrics.rollout_nodes("alpha", {("other", "hypervisor"): {NodeState.PENDING: 4}})
    assert value("verified") is None  # the earlier phase's series are gone
    assert value("pending", pool="other") == 4
    assert node_counts(None) == {} and node_counts(journal(())) == {}


def test_an_ended_operations_gauge_keeps_only_the_states_nodes_are_in() -> None:
    """#29: at 1,000 idle clusters the zeros of ended operations were most of a scrape."""
    metrics = BotMetrics(_Clock())
    labels = {"cluster": "alpha", "pool": "shared", "component": "hypervisor"}

    def value(state: str) -> float | None:
        sample = {**labels, "state": state}
        return metrics.registry.get_sample_value("gitopsbot_rollout_nodes", sample)

    metrics.rollout_nodes("alpha", {("shared", "hypervisor"): {NodeState.PENDING: 3}})
    assert (value("pending"), value("verified")) == (3, 0)  # running: every state
    ended = {("shared", "hypervisor"): {NodeState.VERIFIED: 3}}
    metrics.rollout_nodes("alpha", ended, zeros=False)
    assert (value("verified"), value("pending"), value("failed")) == (3, None, None)


def test_pass_gauges_set_the_node_gauge_from_the_current_journal() -> None:
    metrics = BotMetrics(_Clock())
    rec = _Rec(_Store({"alpha": journal()}))
    PassGauges(rec, metrics).pass_finished(  # type: ignore[arg-type]
        "alpha", action="step", detail="", error="", seconds=0.1
    )
    labels = {"cluster": "alpha", "pool": "shared", "component": "hypervisor", "state": "held"}
    assert metrics.registry.get_sample_value("gitopsbot_rollout_nodes", labels) == 1


@dataclass
class _Clock:
    t: datetime = NOW

    def now(self) -> datetime:
        return self.t

    def sleep(self, seconds: float) -> None:
        pass

    def monotonic(self) -> float:
        return self.t.timestamp()


@dataclass
class _Rec:
    """What ``PassGauges`` reads of the reconciler; the windows are not this test's."""

    store: _Store
    clock: _Clock = field(default_factory=_Clock)

    def spec_at(self, sha: str, cluster: str) -> Any:
        return None
