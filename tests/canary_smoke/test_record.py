"""core.canary_record (#28 item 6): a judged GPU canary, passed as well as failed, keeps its
evidence (pod, node, phase, images, when) in the journal's phase, and ``status``, the
progress log and the pull-request comment show it."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

from gitopsbot.bot import report
from gitopsbot.core.fleet.model import Component
from gitopsbot.core.notices import happenings
from gitopsbot.core.records import canary_record
from gitopsbot.core.records import journal as J
from gitopsbot.core.rollouts.canary_smoke import CanaryEvidence, CanaryResult, CanaryVerdict

AT = datetime(2026, 12, 4, 18, 0, 5, tzinfo=UTC)
STEP = "pool/a/hypervisor"
EVIDENCE = CanaryEvidence(
    pod="gitopsbot-gpu-canary-a-0123456789",
    namespace="tensor-fusion-sys",
    node="n1",
    phase="Succeeded",
    hypervisor_image="hv:2",
    worker_image="wk:2",
    exit_message="GPU 0: ok",
)
SHOWN = (
    "GPU canary passed 2026-12-04 18:00:05 UTC: pod tensor-fusion-sys/"
    "gitopsbot-gpu-canary-a-0123456789 on node n1 Succeeded; hypervisor hv:2, worker wk:2; "
    "said: GPU 0: ok"
)


def _result(verdict: CanaryVerdict, evidence: CanaryEvidence = EVIDENCE) -> CanaryResult:
    return CanaryResult(verdict, "why", evidence)


def _journal(record: canary_record.CanaryRecord | None) -> J.Journal:
    step = J.Step(
        STEP, J.StepKind.POOL_PHASE, J.StepState.RUNNING, started_at=AT, pool="a",
        component=Component.HYPERVISOR,
    )  # fmt: skip
    phase = J.PhaseProgress(
        STEP, J.PhaseState.ROLLING, started_at=AT, progress=33, canary_done=True, canary=record
    )
    return J.Journal(
        "op-1", J.OperationKind.UPGRADE, "c1", "abc", AT, steps=(step,), phases=(phase,)
    )


def test_a_judged_canary_is_recorded_with_its_evidence_and_when() -> None:
    passed = canary_record.of(_result(CanaryVerdict.PASSED), AT)
    assert passed == canary_record.CanaryRecord(CanaryVerdict.PASSED, AT, EVIDENCE)
    failed = canary_record.of(_result(CanaryVerdict.FAILED), AT)
    assert failed is not None and failed.verdict is CanaryVerdict.FAILED
    assert canary_record.of(_result(CanaryVerdict.RUNNING), AT) is None  # nothing to keep yet
    long = replace(EVIDENCE, exit_message="x" * 5000)
    cut = canary_record.of(_result(CanaryVerdict.FAILED, long), AT)
    assert cut is not None and len(cut.evidence.exit_message) == canary_record.MAX_MESSAGE


def test_the_record_survives_the_journal_and_old_journals_keep_their_bytes() -> None:
    record = canary_record.of(_result(CanaryVerdict.PASSED), AT)
    j = _journal(record)
    text = J.dumps(j)
    assert "hypervisorImage: hv:2" in text and "verdict: passed" in text
    assert J.loads(text) == j
    assert "canary:" not in J.dumps(_journal(None)).replace("canary_done", "")
    # A hand-broken record drops the display record, not the journal.
    broken = text.replace("verdict: passed", "verdict: maybe")
    assert J.loads(broken).phase(STEP).canary is None


def test_status_log_and_pull_request_show_a_passing_canarys_evidence() -> None:
    j = _journal(canary_record.of(_result(CanaryVerdict.PASSED), AT))
    assert f"      {SHOWN}" in report.lines(j, AT)  # gitopsbot status
    assert any(SHOWN in line for line in report.change_lines(j, AT, {}))  # the progress log
    assert SHOWN in report.markdown(j)  # the pull-request comment
    assert not any("GPU canary" in line for line in report.lines(_journal(None), AT))


def test_the_log_line_of_the_change_that_judged_it_names_the_evidence_once() -> None:
    """The progress log of ``gitopsbot run`` (and the Kubernetes Event) is one line per
    happening: the one where the canary was judged carries its evidence, later ones not."""
    before = _journal(None)
    phase = before.phase(STEP)
    before = before.with_phase(replace(phase, state=J.PhaseState.CANARY_VERIFY, progress=25))
    after = _journal(canary_record.of(_result(CanaryVerdict.PASSED), AT))
    said = [h.summary() for h in happenings.changes(before, after)]
    assert sum(SHOWN in line for line in said) == 1, said
    moved = after.with_phase(replace(after.phase(STEP), progress=66))
    assert not any("GPU canary" in h.summary() for h in happenings.changes(after, moved))
