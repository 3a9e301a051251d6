"""Batch records and gate evidence (issue 18): kept in the journal across a restart, shown in
status and the pull request, and old journals keep their exact bytes."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from gitopsbot.bot import report
from gitopsbot.core.fleet.model import PoolPolicy, RolloutPolicy
from gitopsbot.core.operations import operation
from gitopsbot.core.records import batch_record, journal
from gitopsbot.core.records.batch_record import BatchRecord, GateNote
from gitopsbot.core.records.journal import OperationKind, PhaseState
from gitopsbot.core.rollouts import phase_view

T0 = datetime(2026, 12, 4, 2, 0, tzinfo=UTC)


def _journal() -> journal.Journal:
    policy = RolloutPolicy(pools=(PoolPolicy(name="a"),))
    return operation.new_operation(
        kind=OperationKind.UPGRADE,
        cluster="lab",
        desired_sha="a" * 40,
        created_at=T0,
        policy=policy,
    )


def _with_gates(j: journal.Journal) -> journal.Journal:
    step = "pool/a/hypervisor"
    record = BatchRecord(
        from_progress=40,
        started_at=T0 + timedelta(minutes=5),
        seconds=(120, 130),
        gates_passed=20,
        gates_passed_at=T0 + timedelta(minutes=3),
        gate_attempts=1,
        gates=(
            GateNote("error-rate", "pass", "sum(rate(errors[5m])) = 0.1 < 0.5"),
            GateNote("alerts", "inconclusive", "prometheus: HTTP 503 | try\nagain"),
        ),
        waiting="gate inconclusive (1/3): alerts: HTTP 503",
    )
    phase = replace(j.phase(step), state=PhaseState.BETWEEN, progress=40, batches=record)
    started = replace(j.step(step), state=journal.StepState.RUNNING, started_at=T0)
    return j.with_step(started).with_phase(phase)


def test_a_batch_record_survives_the_journal_round_trip() -> None:
    j = _with_gates(_journal())
    again = journal.loads(journal.dumps(j))
    assert again.phase("pool/a/hypervisor").batches == j.phase("pool/a/hypervisor").batches
    assert again == j


def test_a_journal_without_batches_keeps_its_bytes() -> None:
    j = _journal()
    assert "batches" not in journal.dumps(j)
    assert journal.dumps(journal.loads(journal.dumps(j))) == journal.dumps(j)


def test_malformed_batch_data_reads_as_unset_not_a_crash() -> None:
    assert batch_record.from_data("nonsense") == BatchRecord()
    bad = batch_record.from_data({"seconds": "x", "gates": 3, "gates_passed": "no"})
    assert bad.seconds == () and bad.gates == () and bad.gates_passed == -1


def test_a_boundary_records_the_batch_duration_and_starts_the_next() -> None:
    b = BatchRecord(from_progress=20, started_at=T0)
    after = b.finished(40, T0 + timedelta(seconds=95))
    assert (after.from_progress, after.started_at, after.seconds) == (
        40,
        T0 + timedelta(seconds=95),
        (95,),
    )


def test_gate_evidence_and_the_wait_show_in_status_and_the_pull_request() -> None:
    j = _with_gates(_journal())
    notes = phase_view.batch_notes(j.phase("pool/a/hypervisor"))
    assert notes[0].startswith("gates at 20%: error-rate pass (sum(rate(errors[5m])) = 0.1")
    assert "alerts inconclusive (prometheus: HTTP 503" in notes[0]
    assert notes[1] == "next batch waits: gate inconclusive (1/3): alerts: HTTP 503"
    text = "\n".join(report.lines(j, T0 + timedelta(minutes=6)))
    assert "next batch waits: gate inconclusive" in text
    md = report.markdown(j)
    row = next(line for line in md.splitlines() if "pool/a/hypervisor" in line)
    # One table row: the evidence's pipe is escaped, its newline flattened.
    assert "HTTP 503 \\| try again" in row
    assert row.count(" | ") == 3  # four cells


def test_a_finished_phase_no_longer_says_it_waits() -> None:
    j = _with_gates(_journal())
    phase = replace(j.phase("pool/a/hypervisor"), state=PhaseState.DONE)
    assert not any(n.startswith("next batch waits") for n in phase_view.batch_notes(phase))
