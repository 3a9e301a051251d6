"""A budget's "used up" reason does not outlive the node that used it up (#28 item 9): when
the window closes or a person pauses the pool, the admission reason is dropped, so `status`
does not keep telling of a node that has since been uncordoned (``core.rollouts.rollout``)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from gitopsbot.core.fleet.model import Component, MaintenanceWindow, PoolPolicy, Share
from gitopsbot.core.records.journal import PhaseProgress
from gitopsbot.core.rollouts import phase_view, rollout, windows
from gitopsbot.core.rollouts.rollout import PhaseAction, PhaseDecision, PoolObservation

T0 = datetime(2026, 6, 10, 2, 10, tzinfo=UTC)  # inside the 02:00-03:00 UTC window
WINDOW = windows.Window.of(MaintenanceWindow("0 2 * * *", 3600), UTC)
POOL = PoolPolicy("a", batch_percentage=40, max_unavailable=Share(1))


def decide(phase: PhaseProgress, now: datetime, *down: str, held: str = "") -> PhaseDecision:
    observed = PoolObservation(0, False, False, nodes=5, out_of_service=down)
    return rollout.decide_phase(
        policy=POOL,
        component=Component.HYPERVISOR,
        observed=observed,
        phase=phase,
        now=now,
        window=WINDOW,
        held=held,
    )


def used_up() -> PhaseProgress:
    d = decide(PhaseProgress("pool/a/hypervisor"), T0, "gpu-3")
    assert d.action is PhaseAction.WAIT
    assert d.phase.batches.waiting.startswith("availability budget: maxUnavailable 1 of 5")
    return d.phase


def test_the_window_closing_after_the_node_is_uncordoned_drops_the_budget_reason() -> None:
    later = T0 + timedelta(hours=2)  # the window closed; gpu-3 was uncordoned meanwhile
    d = decide(used_up(), later)
    assert d.action is PhaseAction.WAIT and d.reason == "outside the maintenance window"
    assert d.phase.batches.waiting == ""
    assert not any("availability budget" in n for n in phase_view.batch_notes(d.phase))


def test_a_pause_after_the_node_is_uncordoned_drops_the_budget_reason() -> None:
    d = decide(used_up(), T0 + timedelta(minutes=5), held="paused in Git")
    assert d.phase.paused_by == "paused in Git"
    assert d.phase.batches.waiting == ""
