"""The fleet page's view model (core.fleet_view, docs/fleet-page.md): pure, from the records
``status`` reads. Aspects: clusters grouped by wave with deployed and desired versions;
holds with their reasons and until when (a person's pause, a window, a wave); one cluster's
phases with batch k/n, units, ETA and deadline, its nodes and its Gantt bars; links on each
forge; an unknown cluster and an absent state branch said in place."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from gitopsbot.core.fleet.model import Component, ForgeSettings
from gitopsbot.core.records.batch_record import BatchRecord
from gitopsbot.core.records.journal import (
    OperationStatus,
    PhaseProgress,
    PhaseState,
    QueueState,
    Step,
    StepKind,
)
from gitopsbot.core.records.node_states import NodeRecord, NodeState
from gitopsbot.core.views import fleet_view
from gitopsbot.core.views.fleet_view import ClusterRecords, FleetSnapshot
from gitopsbot.core.waves.promotion import ClusterEvidence
from tests.test_live_view import POOL_STEP, journal_at

T0 = datetime(2026, 3, 1, 2, 0, tzinfo=UTC)
NOW = T0 + timedelta(seconds=50)


def snap(*records: ClusterRecords, head: str | None = "ab12") -> FleetSnapshot:
    return FleetSnapshot("state: test", "gitopsbot/state", head, records)


def test_a_rolling_pool_shows_its_batch_units_eta_and_deadline() -> None:
    view = fleet_view.operation_page(
        snap(ClusterRecords("alpha", journal_at(50, T0))), "alpha", NOW
    )
    assert view.found and not view.problem
    (phase,) = view.phases
    assert (phase.pool, phase.state, phase.batch, phase.units) == (
        "shared", "rolling", "batch 2/2", "2/3 nodes done",
    )  # fmt: skip
    assert phase.eta == "20s" and phase.deadline_left == "59m20s" and phase.elapsed == "40s"
    assert [s.state for s in view.steps] == ["succeeded", "running"]
    assert view.steps[0].took == "8s" and view.steps[0].started == "2026-03-01 02:00:00Z"
    assert view.gantt is not None
    kinds = {(b.row, b.kind) for b in view.gantt.bars}
    assert ("helm-upgrade", "done") in kinds
    assert {(POOL_STEP, "planned"), (POOL_STEP, "running"), (POOL_STEP, "eta")} <= kinds
    assert [b.label for b in view.gantt.bars if b.kind == "mark"] == ["50%"]


def test_the_batch_line_moves_with_the_journal() -> None:
    early = fleet_view.operation_page(
        snap(ClusterRecords("alpha", journal_at(0, T0))), "alpha", NOW
    )
    done = fleet_view.operation_page(
        snap(ClusterRecords("alpha", journal_at(100, T0))), "alpha", NOW
    )
    assert early.phases[0].batch == "batch 1/2" and early.phases[0].units == "0/3 nodes done"
    assert done.phases[0].batch == "batch 2/2" and done.phases[0].units == "3/3 nodes done"
    assert done.phases[0].eta == "" and done.row is not None and done.row.status == "succeeded"


def test_holds_say_why_and_until_when() -> None:
    j = journal_at(50, T0)
    held = replace(j.phases[0], state=PhaseState.PAUSED, paused_by="/gitopsbot pause by ana")
    paused = replace(j, phases=(held,))
    row = fleet_view.cluster_row(ClusterRecords("alpha", paused), snap(), NOW)
    assert [(h.kind, h.reason) for h in row.holds] == [
        ("pause", f"{POOL_STEP}: /gitopsbot pause by ana")
    ]
    closes = T0 + timedelta(hours=1)
    window = replace(j.phases[0], state=PhaseState.PAUSED, window_closes_at=closes)
    row = fleet_view.cluster_row(ClusterRecords("alpha", replace(j, phases=(window,))), snap(), NOW)
    assert [(h.kind, h.until) for h in row.holds] == [("window", "2026-03-01 03:00:00Z")]
    until = T0 + timedelta(hours=5)
    queued = replace(j, op_id="op-2", status=OperationStatus.QUEUED, queue=QueueState(until))
    row = fleet_view.cluster_row(ClusterRecords("alpha", queued=queued), snap(), NOW)
    assert [(h.kind, h.until) for h in row.holds] == [("window", "2026-03-01 07:00:00Z")]
    waits = replace(j.phases[0], batches=BatchRecord(waiting="approval of the next batch"))
    row = fleet_view.cluster_row(ClusterRecords("alpha", replace(j, phases=(waits,))), snap(), NOW)
    assert [h.kind for h in row.holds] == ["approval"]
    verdict = (
        "clusters/alpha/release.yaml:3: WAVES promotion-follows-waves denied: "
        "wave prod waits for canary's soak"
    )
    blocked = replace(j, status=OperationStatus.BLOCKED, verdicts=(verdict,), phases=())
    row = fleet_view.cluster_row(ClusterRecords("alpha", blocked), snap(), NOW)
    assert [(h.kind, h.reason) for h in row.holds] == [
        ("wave", "wave prod waits for canary's soak")
    ]
    mark = "GPU canary failed on lab pool a (op-1, 2026-03-01 01:00 UTC): smoke failed [...]"
    marked = replace(
        blocked, verdicts=(verdict.replace("wave prod waits for canary's soak", mark),)
    )
    row = fleet_view.cluster_row(ClusterRecords("alpha", marked), snap(), NOW)
    assert [h.kind for h in row.holds] == ["canary mark"]


def test_nodes_are_listed_with_state_batch_and_since() -> None:
    j = journal_at(50, T0)
    nodes = (
        NodeRecord("n1", NodeState.VERIFIED, 1, T0 + timedelta(seconds=30)),
        NodeRecord("n2", NodeState.PENDING, 0, T0),
    )
    phase = replace(j.phases[0], nodes=nodes)
    view = fleet_view.operation_page(
        snap(ClusterRecords("alpha", replace(j, phases=(phase,)))), "alpha", NOW
    )
    rows = [(n.name, n.state, n.batch) for n in view.phases[0].nodes]
    assert rows == [("n1", "verified", "1"), ("n2", "pending", "-")]
    assert view.phases[0].nodes[0].since == "2026-03-01 02:00:30Z (20s ago)"


def test_versions_come_from_the_evidence_and_the_fleet_at_head() -> None:
    s = replace(snap(ClusterRecords("alpha", journal_at(100, T0))), evidence={
        "alpha": ClusterEvidence("alpha", chart_version="1.8.7"),
    })  # fmt: skip
    row = fleet_view.fleet_page(s, NOW).waves[0].clusters[0]
    assert (row.name, row.deployed, row.desired) == ("alpha", "1.8.7", "")


def test_links_on_each_forge() -> None:
    j = replace(journal_at(100, T0), pr_number=7)
    sha = j.desired_sha
    gh = fleet_view.links(ForgeSettings("github", repository="o/fleet"), "gitopsbot/state", j)
    assert gh == fleet_view.Links(
        "https://github.com/o/fleet/pull/7",
        f"https://github.com/o/fleet/commit/{sha}",
        "https://github.com/o/fleet/blob/gitopsbot/state/clusters/alpha/journal.yaml",
    )
    gl = fleet_view.links(
        ForgeSettings("gitlab", url="https://gl.example/api/v4", repository="g/fleet"), "st", j
    )
    assert gl.merge_commit == f"https://gl.example/g/fleet/-/commit/{sha}"
    assert gl.journal == "https://gl.example/g/fleet/-/blob/st/clusters/alpha/journal.yaml"
    gitea = fleet_view.links(
        ForgeSettings("gitea", url="https://tea.example/api/v1", repository="o/f"), "st", j
    )
    assert gitea.pull_request == "https://tea.example/o/f/pulls/7"
    assert gitea.journal == "https://tea.example/o/f/src/branch/st/clusters/alpha/journal.yaml"
    assert fleet_view.links(ForgeSettings(), "st", j) == fleet_view.Links()
    script = ForgeSettings("gitea", url="javascript:alert(1)//", repository="o/f")
    assert fleet_view.links(script, "st", j) == fleet_view.Links()


def test_an_unknown_cluster_and_an_absent_branch_are_said_in_place() -> None:
    view = fleet_view.operation_page(snap(ClusterRecords("alpha")), "beta", NOW)
    assert not view.found and view.problem == "no record on the state branch (known: alpha)"
    page = fleet_view.fleet_page(snap(head=None), NOW)
    assert page.problem == "no gitopsbot/state branch yet: the bot has recorded nothing"
    assert page.waves == ()


def test_warnings_and_a_record_that_cannot_be_read() -> None:
    row = fleet_view.cluster_row(ClusterRecords("alpha", error="journal.yaml: bad"), snap(), NOW)
    assert row.warnings == ("the records cannot be read: journal.yaml: bad",)
    assert row.operation == "" and row.holds == ()


def test_the_step_of_an_operation_waiting_on_a_held_pool_is_the_held_one() -> None:
    j = journal_at(100, T0)
    held_step = "pool/pool-2/hypervisor"
    steps = (*j.steps, Step(held_step, StepKind.POOL_PHASE, pool="pool-2",
                            component=Component.HYPERVISOR))  # fmt: skip
    phases = (*j.phases, PhaseProgress(step=held_step, paused_by="paused in Git"))
    running = replace(j, status=OperationStatus.RUNNING, steps=steps, phases=phases)
    row = fleet_view.cluster_row(ClusterRecords("alpha", running), snap(), NOW)
    assert row.step == f"{held_step} pending (held: see holds)"
    done = fleet_view.cluster_row(ClusterRecords("alpha", j), snap(), NOW)
    assert done.step.startswith(f"{POOL_STEP} succeeded · batch 2/2")


def test_a_pool_phase_not_started_is_drawn_as_the_plan_estimates_it() -> None:
    """Plan against what happened (#32): a later pool's phase, not started yet, gets its
    planned bar (``rollouts.timeline``'s estimate from the watched branch's rollout.yaml),
    after what happened; without the fleet's policy it is left out, as before."""
    from gitopsbot.core.fleet.model import (
        BotSettings,
        ClusterSpec,
        Environment,
        Fleet,
        ReleaseSpec,
        RolloutPolicy,
    )
    from gitopsbot.core.fleet.model import PoolPolicy as Pool
    from gitopsbot.core.records.journal import Step, StepKind, StepState
    from gitopsbot.core.rollouts import timeline

    later = Step(
        "pool-later-hypervisor", StepKind.POOL_PHASE, StepState.PENDING,
        pool="later", component=Component.HYPERVISOR,
    )  # fmt: skip
    current = journal_at(50, T0)
    current = replace(current, steps=(*current.steps, later))
    pool = Pool("later", nodes=4, batch_percentage=50, batch_interval_seconds=60)
    release = ReleaseSpec("https://charts.example", "tensor-fusion", "1.8.7", "tf", "tf")
    spec = ClusterSpec("alpha", Environment("staging"), release, {}, RolloutPolicy(pools=(pool,)))
    fleet = Fleet(settings=BotSettings(), clusters={"alpha": spec})
    with_fleet = replace(snap(ClusterRecords("alpha", current)), fleet=fleet)

    view = fleet_view.operation_page(with_fleet, "alpha", NOW)
    assert view.gantt is not None
    (bar,) = [b for b in view.gantt.bars if b.row == "pool-later-hypervisor"]
    expected = timeline.phase_timeline(
        pool,
        Component.HYPERVISOR,
        4,
        readiness_seconds=timeline.DEFAULT_READINESS_SECONDS[Component.HYPERVISOR],
    ).estimate_seconds
    assert bar.kind == "planned" and bar.end - bar.start == expected
    assert bar.start >= max(b.end for b in view.gantt.bars if b.row != bar.row)
    assert "pool-later-hypervisor" in view.gantt.rows

    without = fleet_view.operation_page(snap(ClusterRecords("alpha", current)), "alpha", NOW)
    assert without.gantt is not None
    assert all(b.row != "pool-later-hypervisor" for b in without.gantt.bars)
