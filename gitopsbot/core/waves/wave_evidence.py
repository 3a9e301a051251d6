"""The waves' evidence kept small (#29): one digest per recorded operation, folded.

``core.waves.promotion_gate.evidence_from`` reads a cluster's whole journals; at 1,000 clusters
that is seconds per judged operation. What the fold needs from an operation is a dozen
values (``OpDigest``), so the state branch keeps them next to the journals, one file per
cluster (``clusters/<name>/evidence.json``, ``Summary``), rewritten in the same commit as
every record of the cluster's ``journal.yaml``, ``queued.yaml`` or ``history/`` (no extra
commit, no extra push). A judgement reads that file instead of the journals.

The summary mirrors the files it digests: the history's digests by file name, the current
and the queued operation's. ``fold`` over them is the same fold ``evidence_from`` makes
over the journals (``evidence_from`` is ``fold`` over ``digest``), so the two cannot drift
apart. ``fingerprint`` names what was digested (the bytes of ``journal.yaml`` and
``queued.yaml`` and the history's file names): a summary whose fingerprint is not the
branch's (written by an older bot, edited by hand) is stale, and the reader falls back to
the journals. Per cluster: one stale cluster costs its own full read, not the fleet's.

JSON, not YAML: a judgement parses one file per cluster, and JSON parses a hundred times
faster than the project's YAML reader. Pure: bytes and journals in, values out.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from gitopsbot.core.records.journal import (
    Journal,
    OperationKind,
    OperationStatus,
    PhaseState,
    StepKind,
    StepState,
)
from gitopsbot.core.waves.promotion import ClusterEvidence

FILE = "evidence.json"  # under clusters/<name>/
FORMAT = 1


@dataclass(frozen=True, slots=True)
class OpDigest:
    """What the waves' fold needs from one operation."""

    op_id: str
    created_at: datetime
    skipped: bool = False  # blocked or superseded: it changed nothing
    in_flight: bool = False  # queued or running
    took_effect: bool = False  # its release step succeeded (or it succeeded)
    version: str = ""  # the chart version its desired commit names ("" unreadable)
    rollback: bool = False
    reverts_op: str = ""
    rollback_point_version: str = ""  # its rollback point's chart version ("" none)
    trouble: str = ""  # "rolled back" | "halted" | "failed" | ""
    last_time: datetime | None = None  # the latest time the journal records
    verified_at: datetime | None = None


def digest(j: Journal, version: str) -> OpDigest:
    """``j`` as the fold needs it; ``version``: the chart version its desired commit names."""
    return OpDigest(
        op_id=j.op_id,
        created_at=j.created_at,
        skipped=j.status in (OperationStatus.BLOCKED, OperationStatus.SUPERSEDED),
        in_flight=j.status in (OperationStatus.QUEUED, OperationStatus.RUNNING),
        took_effect=_took_effect(j),
        version=version,
        rollback=j.kind is OperationKind.ROLLBACK,
        reverts_op=j.reverts_op,
        rollback_point_version=j.rollback_point.chart_version if j.rollback_point else "",
        trouble=_trouble(j),
        last_time=_last_time(j),
        verified_at=_verified_at(j),
    )


def fold(cluster: str, digests: Iterable[OpDigest]) -> ClusterEvidence:
    """The evidence of ``cluster``'s operations, oldest first (see ``core.waves.promotion_gate``);
    a later digest of the same operation replaces an earlier one."""
    ops = sorted({d.op_id: d for d in digests}.values(), key=lambda d: (d.created_at, d.op_id))
    by_id = {d.op_id: d for d in ops}
    e = ClusterEvidence(cluster)
    for d in ops:
        if d.skipped:
            continue
        if d.in_flight:
            e = replace(e, in_flight=True)
        if d.took_effect:
            version = d.version
            undone = by_id.get(d.reverts_op) if d.rollback else None
            if not version and undone is not None:
                # The rollback's commit unreadable here (a revert never pushed): it returned
                # to where the operation it undid started.
                version = undone.rollback_point_version
            if version != e.chart_version:
                e = replace(e, chart_version=version, verified_at=None)
        e = replace(e, op_id=d.op_id)
        if d.trouble:
            concerned = d.version
            if d.rollback:
                undone = by_id.get(d.reverts_op)
                concerned = undone.version if undone is not None else ""
                if not concerned:
                    concerned = d.rollback_point_version
            e = replace(
                e,
                trouble=d.trouble,
                trouble_at=d.last_time,
                trouble_version=concerned,
                verified_at=None,
            )
        if d.verified_at is not None and (e.trouble_at is None or d.verified_at >= e.trouble_at):
            e = replace(
                e, verified_at=e.verified_at or d.verified_at, last_verified_at=d.verified_at
            )
    return e


def _took_effect(j: Journal) -> bool:
    if j.status is OperationStatus.SUCCEEDED:
        return True
    release_steps = (StepKind.HELM_UPGRADE, StepKind.ROLLBACK)
    return any(s.kind in release_steps and s.state is StepState.SUCCEEDED for s in j.steps)


def _trouble(j: Journal) -> str:
    if j.kind is OperationKind.ROLLBACK:
        return "rolled back"
    if any(p.state is PhaseState.HALTED for p in j.phases):
        return "halted"
    if j.status is OperationStatus.FAILED:
        return "failed"
    return ""


def _verified_at(j: Journal) -> datetime | None:
    verify = [s for s in j.steps if s.kind is StepKind.VERIFY]
    if verify:
        done = [s.finished_at for s in verify if s.state is StepState.SUCCEEDED and s.finished_at]
        return max(done) if done and all(s.state is StepState.SUCCEEDED for s in verify) else None
    if j.status is OperationStatus.SUCCEEDED:
        ends = [s.finished_at for s in j.steps if s.finished_at is not None]
        return max(ends) if ends else j.created_at
    return None


def _last_time(j: Journal) -> datetime:
    times = [j.created_at]
    for s in j.steps:
        times.extend(t for t in (s.started_at, s.finished_at) if t is not None)
    for p in j.phases:
        times.extend(t for t in (p.started_at, p.last_progress_at) if t is not None)
    return max(times)


# -- the summary file -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Summary:
    """One cluster's ``evidence.json``: the digests of the files it mirrors."""

    fingerprint: str
    history: Mapping[str, OpDigest] = field(default_factory=dict)  # by file name
    current: OpDigest | None = None  # journal.yaml's
    queued: OpDigest | None = None  # queued.yaml's

    def digests(self) -> list[OpDigest]:
        """In the order the journals are read (history by name, current, queued): the fold
        keeps the last of one operation's digests, as ``evidence_from`` keeps the last
        journal."""
        found = [self.history[name] for name in sorted(self.history)]
        found.extend(d for d in (self.current, self.queued) if d is not None)
        return found

    def evidence(self, cluster: str) -> ClusterEvidence:
        return fold(cluster, self.digests())


def fingerprint(journal: bytes | None, queued: bytes | None, history: Iterable[str]) -> str:
    """What a summary digests: the current and queued files' bytes and the history's names
    (a history file's content is written only with its name, by the bot)."""
    h = hashlib.sha256()
    for part in (journal, queued):
        h.update(b"-" if part is None else hashlib.sha256(part).digest())
    for name in sorted(history):
        h.update(b"\0" + name.encode())
    return h.hexdigest()[:32]


def dumps(s: Summary) -> str:
    """One line per digest: a diff of the state branch shows which operation changed."""
    lines = [
        "{",
        f'"format": {FORMAT},',
        f'"fingerprint": {json.dumps(s.fingerprint)},',
        f'"current": {_dump_digest(s.current)},',
        f'"queued": {_dump_digest(s.queued)},',
        '"history": {',
    ]
    names = sorted(s.history)
    for i, name in enumerate(names):
        comma = "," if i < len(names) - 1 else ""
        lines.append(f"  {json.dumps(name)}: {_dump_digest(s.history[name])}{comma}")
    lines += ["}", "}"]
    return "\n".join(lines) + "\n"


def loads(text: str) -> Summary:
    """ValueError when the file is not a summary this bot writes (then: the journals)."""
    try:
        data = json.loads(text)
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise ValueError(f"not format {FORMAT}")
        history = data["history"]
        if not isinstance(history, dict):
            raise ValueError("history is not a mapping")
        return Summary(
            fingerprint=str(data["fingerprint"]),
            history={str(k): _load_digest(v) for k, v in history.items()},
            current=None if data["current"] is None else _load_digest(data["current"]),
            queued=None if data["queued"] is None else _load_digest(data["queued"]),
        )
    except (KeyError, TypeError, AttributeError, json.JSONDecodeError) as e:
        raise ValueError(f"{FILE}: {type(e).__name__}: {e}") from None


_FIELDS = (
    "op_id",
    "created_at",
    "skipped",
    "in_flight",
    "took_effect",
    "version",
    "rollback",
    "reverts_op",
    "rollback_point_version",
    "trouble",
    "last_time",
    "verified_at",
)
_TIMES = frozenset({"created_at", "last_time", "verified_at"})


def _dump_digest(d: OpDigest | None) -> str:
    if d is None:
        return "null"
    out: dict[str, Any] = {}
    for name in _FIELDS:
        value = getattr(d, name)
        out[name] = value.isoformat() if isinstance(value, datetime) else value
    return json.dumps(out, separators=(",", ":"))


def _load_digest(raw: Any) -> OpDigest:
    if not isinstance(raw, dict):
        raise ValueError("a digest is not a mapping")
    values: dict[str, Any] = {}
    for name in _FIELDS:
        value = raw[name]
        if name in _TIMES:
            value = None if value is None else datetime.fromisoformat(value)
        values[name] = value
    if not isinstance(values["created_at"], datetime):
        raise ValueError("a digest has no created_at")
    return OpDigest(**values)
