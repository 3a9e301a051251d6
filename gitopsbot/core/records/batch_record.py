"""What the bot records about a phase's batches (issue 18): where the current batch started,
how long the finished ones took, the gates judged between them and why the next one waits.

Kept in the journal with the phase (``PhaseProgress.batches``) so a rollout that spans
windows, or a restart, resumes knowing which batch boundary it stood at and whether its gates
had passed there. Written only when set: journals of phases without gates or boundaries keep
their exact bytes. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from gitopsbot.core.records.times import read_time

# Finished batch durations kept per phase (admission uses the latest few).
MAX_DURATIONS = 32
# Evidence kept per gate result: a query's values or a list of pods can be long.
MAX_EVIDENCE = 400


@dataclass(frozen=True, slots=True)
class GateNote:
    """One gate's result as recorded: its name, pass / fail / inconclusive, the evidence."""

    gate: str
    outcome: str
    evidence: str = ""


@dataclass(frozen=True, slots=True)
class BatchRecord:
    """``from_progress``/``started_at``: where and when the batch in flight (or the next)
    started; ``seconds``: finished batches' durations; ``gates_passed``: the progress at which
    the gates last passed (-1: never), at ``gates_passed_at``; ``gate_attempts``: inconclusive
    judgements in a row at this boundary, ``gates_retry_at``: when the next judgement after an
    inconclusive one is due (gateRetryInterval; a pass before then does not judge again);
    ``gates``: the last judgement; ``waiting``: why the next batch does not open (admission),
    "" when it may; ``wait_since``: when a workload wait began. ``waiting_since``,
    ``waiting_until``, ``waiting_limit``: for a wait the bot bounds (the canary verify,
    core.verify_wait), when ``waiting`` was first recorded with its text, when the wait ends
    at the latest and which limit ends it then (the verify timeout, maxDuration, the window's
    close); recorded once per change of ``waiting``, not per look."""

    from_progress: int = 0
    started_at: datetime | None = None
    seconds: tuple[int, ...] = ()
    gates_passed: int = -1
    gates_passed_at: datetime | None = None
    gate_attempts: int = 0
    gates_retry_at: datetime | None = None
    gates: tuple[GateNote, ...] = ()
    waiting: str = ""
    wait_since: datetime | None = None
    waiting_since: datetime | None = None
    waiting_until: datetime | None = None
    waiting_limit: str = ""

    def finished(self, progress: int, now: datetime) -> BatchRecord:
        """A batch boundary at ``progress``: its duration recorded, the next batch starts."""
        took = () if self.started_at is None else (int((now - self.started_at).total_seconds()),)
        kept = (*self.seconds, *took)[-MAX_DURATIONS:]
        return BatchRecord(
            from_progress=progress,
            started_at=now,
            seconds=kept,
            gates_passed=self.gates_passed,
            gates_passed_at=self.gates_passed_at,
            gates=self.gates,
        )


def _time(value: datetime | None) -> str | None:
    return None if value is None else value.astimezone(UTC).isoformat()


def to_data(b: BatchRecord) -> dict[str, Any]:
    """The record as plain data; empty when nothing is set."""
    if b == BatchRecord():
        return {}
    out: dict[str, Any] = {"from_progress": b.from_progress}
    if b.started_at is not None:
        out["started_at"] = _time(b.started_at)
    if b.seconds:
        out["seconds"] = list(b.seconds)
    if b.gates_passed >= 0:
        out["gates_passed"] = b.gates_passed
        out["gates_passed_at"] = _time(b.gates_passed_at)
    if b.gate_attempts:
        out["gate_attempts"] = b.gate_attempts
    if b.gates_retry_at is not None:
        out["gates_retry_at"] = _time(b.gates_retry_at)
    if b.gates:
        out["gates"] = [
            {"gate": g.gate, "outcome": g.outcome, "evidence": g.evidence[:MAX_EVIDENCE]}
            for g in b.gates
        ]
    if b.waiting:
        out["waiting"] = b.waiting
    if b.wait_since is not None:
        out["wait_since"] = _time(b.wait_since)
    if b.waiting_since is not None:
        out["waiting_since"] = _time(b.waiting_since)
    if b.waiting_until is not None:
        out["waiting_until"] = _time(b.waiting_until)
    if b.waiting_limit:
        out["waiting_limit"] = b.waiting_limit
    return out


def _int(value: Any, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def from_data(data: Any) -> BatchRecord:
    """Read back what ``to_data`` wrote; anything missing or malformed reads as unset."""
    if not isinstance(data, Mapping):
        return BatchRecord()
    seconds = data.get("seconds")
    gates = data.get("gates")
    return BatchRecord(
        from_progress=_int(data.get("from_progress"), 0),
        started_at=read_time(data.get("started_at")),
        seconds=tuple(s for s in seconds if _int(s, -1) >= 0)
        if isinstance(seconds, Sequence) and not isinstance(seconds, str)
        else (),
        gates_passed=_int(data.get("gates_passed"), -1),
        gates_passed_at=read_time(data.get("gates_passed_at")),
        gate_attempts=_int(data.get("gate_attempts"), 0),
        gates_retry_at=read_time(data.get("gates_retry_at")),
        gates=tuple(
            GateNote(str(g.get("gate", "")), str(g.get("outcome", "")), str(g.get("evidence", "")))
            for g in gates
            if isinstance(g, Mapping)
        )
        if isinstance(gates, Sequence) and not isinstance(gates, str)
        else (),
        waiting=str(data.get("waiting") or ""),
        wait_since=read_time(data.get("wait_since")),
        waiting_since=read_time(data.get("waiting_since")),
        waiting_until=read_time(data.get("waiting_until")),
        waiting_limit=str(data.get("waiting_limit") or ""),
    )
