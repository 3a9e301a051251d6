"""Each GPU node's state in a pool's hypervisor rollout (issue #18): pending, in batch N,
updated, verified, failed, held by a gate, or cordoned by a person.

Pure: the bot observes the pool's nodes (``bot.node_reads.node_snapshots``) and hands them
here with the batch running now; the records are kept with the phase in the journal
(``to_data`` / ``from_data``), so a rollout that spans windows or a bot restart resumes
knowing which batch took each node and which were verified.

Only the hypervisor phase has per-node state. The worker's unit is a TensorFusionWorkload
and the client's an application pod (facts §3.5, §3.6): the controller replaces them
wherever they are scheduled, so they map to no node in a way worth recording.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from gitopsbot.core.records.times import read_time


class NodeState(StrEnum):
    PENDING = "pending"  # not taken by a batch yet
    IN_BATCH = "in-batch"  # taken: its hypervisor is being replaced, or not Ready yet
    UPDATED = "updated"  # runs the target hypervisor, Ready
    VERIFIED = "verified"  # updated, and a check after its batch passed
    FAILED = "failed"  # a check failed on it; stays until a later check passes
    HELD = "held"  # not taken, and a gate (window, pause, approval) holds the pool
    CORDONED = "cordoned"  # a person cordoned it: never counted as done (availability budget)


# The order states are listed in (summary, gauges): done first, then what is left.
ORDER = (
    NodeState.VERIFIED,
    NodeState.UPDATED,
    NodeState.IN_BATCH,
    NodeState.FAILED,
    NodeState.HELD,
    NodeState.PENDING,
    NodeState.CORDONED,
)
DONE = frozenset({NodeState.UPDATED, NodeState.VERIFIED})


@dataclass(frozen=True, slots=True)
class NodeRecord:
    name: str
    state: NodeState
    batch: int  # the 1-based batch that took the node; 0: not taken (yet)
    since: datetime  # when it entered ``state``
    detail: str = ""


@dataclass(frozen=True, slots=True)
class NodeSnapshot:
    """One node as the bot observed it for the hypervisor rollout."""

    name: str
    updated: bool  # its hypervisor runs the target image
    ready: bool  # the Kubernetes Node is Ready and its hypervisor pod Running and Ready
    cordoned: bool  # spec.unschedulable: a person took it out
    in_progress: bool  # being replaced now (GPUNode Pending, hypervisor pod not Running/Ready)


def advance(
    previous: tuple[NodeRecord, ...],
    snapshots: Sequence[NodeSnapshot],
    *,
    batch: int,
    gate_hold: str,
    now: datetime,
) -> tuple[NodeRecord, ...]:
    """The records after one observation. ``batch``: the batch running now (1-based, as
    ``core.rollouts.phase_view`` shows it; 0 before the first). ``gate_hold``: why the pool is held
    ("" when it is not). Nodes gone from the pool are dropped (the pool's membership now is
    what its total counts); a node keeps its ``since`` while its state does not change."""
    before = {r.name: r for r in previous}
    out: list[NodeRecord] = []
    for snap in sorted({s.name: s for s in snapshots}.values(), key=lambda s: s.name):
        prev = before.get(snap.name)
        taken = prev.batch if prev is not None and prev.batch else 0
        if not taken and (snap.in_progress or snap.updated) and batch > 0:
            taken = batch  # newly seen moving: the batch running now took it
        state, detail = _judge(prev, snap, taken, gate_hold)
        since = prev.since if prev is not None and prev.state is state else now
        out.append(NodeRecord(snap.name, state, taken, since, detail))
    return tuple(out)


def _judge(
    prev: NodeRecord | None, snap: NodeSnapshot, taken: int, gate_hold: str
) -> tuple[NodeState, str]:
    if prev is not None and prev.state is NodeState.FAILED:
        return NodeState.FAILED, prev.detail  # a failure stays visible until a check passes
    if snap.cordoned:
        return NodeState.CORDONED, "cordoned (spec.unschedulable)"
    if snap.updated and snap.ready and not snap.in_progress:
        if prev is not None and prev.state is NodeState.VERIFIED:
            return NodeState.VERIFIED, prev.detail
        return NodeState.UPDATED, ""
    if taken:
        # Taken and not back yet: the replacement runs, or the new pod is not Ready.
        return NodeState.IN_BATCH, "" if snap.ready or snap.in_progress else "not Ready"
    if gate_hold:
        return NodeState.HELD, gate_hold
    if snap.in_progress:
        # Before the first batch: the controller replaces a crashed or mismatched
        # hypervisor on its own (facts §3.4); no batch took the node.
        return NodeState.PENDING, "hypervisor not Running/Ready"
    return NodeState.PENDING, "" if snap.ready else "not Ready"


def verified(
    records: tuple[NodeRecord, ...], names: Iterable[str], now: datetime
) -> tuple[NodeRecord, ...]:
    """After a check passed on ``names`` (a canary or verification pass): those updated (or
    failed before) are verified. Cordoned, pending or in-batch nodes are left as they are:
    a check proves nothing about a node that does not run the new hypervisor."""
    wanted = set(names)
    eligible = (NodeState.UPDATED, NodeState.FAILED)
    return tuple(
        replace(r, state=NodeState.VERIFIED, since=now, detail="")
        if r.name in wanted and r.state in eligible
        else r
        for r in records
    )


def failed(
    records: tuple[NodeRecord, ...], names: Iterable[str], detail: str, now: datetime
) -> tuple[NodeRecord, ...]:
    """After a check failed on ``names``: they are failed with ``detail`` (one line)."""
    wanted = set(names)
    line = " ".join(detail.split())
    return tuple(
        replace(
            r,
            state=NodeState.FAILED,
            since=r.since if r.state is NodeState.FAILED else now,
            detail=line,
        )
        if r.name in wanted
        else r
        for r in records
    )


def halted(records: tuple[NodeRecord, ...], detail: str, now: datetime) -> tuple[NodeRecord, ...]:
    """After the pool halted (a gate, a GPU canary, a deadline, a stall): the nodes a batch
    took and that were not verified since (in batch, or updated: the halt's check is the one
    that judged them) are failed with ``detail``. A node no batch took stays as it is
    (pending, held, cordoned; a hypervisor the controller replaced on its own before the
    first batch, facts §3.4, is not the operation's doing: issue 28 item 8), and so does a
    node verified before."""
    judged = (NodeState.IN_BATCH, NodeState.UPDATED)
    taken = (r.name for r in records if r.batch > 0 and r.state in judged)
    return failed(records, taken, detail, now)


def names_in(records: Iterable[NodeRecord], *states: NodeState) -> tuple[str, ...]:
    """The names of the nodes in any of ``states``, e.g. the updated ones to verify."""
    return tuple(r.name for r in records if r.state in states)


def counts(records: Iterable[NodeRecord]) -> Mapping[NodeState, int]:
    """Nodes per state, every state present (0 too), in ``ORDER``."""
    found = dict.fromkeys(ORDER, 0)
    for r in records:
        found[r.state] += 1
    return found


def summary(records: Sequence[NodeRecord]) -> str:
    """One line, e.g. ``8 nodes: 3 verified, 2 in batch 3, 3 pending``; "" with no record."""
    if not records:
        return ""
    parts: list[str] = []
    for state, n in counts(records).items():
        if not n:
            continue
        if state is NodeState.IN_BATCH:
            by_batch: dict[int, int] = {}
            for r in records:
                if r.state is NodeState.IN_BATCH:
                    by_batch[r.batch] = by_batch.get(r.batch, 0) + 1
            parts += [f"{k} in batch {b}" for b, k in sorted(by_batch.items())]
        else:
            parts.append(f"{n} {state}")
    total = len(records)
    return f"{total} node{'' if total == 1 else 's'}: " + ", ".join(parts)


# -- the journal ------------------------------------------------------------------------------


def to_data(records: Iterable[NodeRecord]) -> list[dict[str, Any]]:
    """Plain data for the journal, keys in a fixed order; ``detail`` only when set."""
    out: list[dict[str, Any]] = []
    for r in records:
        entry: dict[str, Any] = {
            "name": r.name,
            "state": str(r.state),
            "batch": r.batch,
            "since": r.since.astimezone(UTC).isoformat(),
        }
        if r.detail:
            entry["detail"] = r.detail
        out.append(entry)
    return out


def from_data(data: Any) -> tuple[NodeRecord, ...]:
    """Inverse of ``to_data``. Missing or old data is no record; a malformed entry is
    skipped (a hand edit of the journal costs that node's state, not the journal)."""
    if not isinstance(data, list):
        return ()
    found: dict[str, NodeRecord] = {}
    for entry in data:
        record = _record(entry)
        if record is not None and record.name not in found:
            found[record.name] = record
    return tuple(sorted(found.values(), key=lambda r: r.name))


def _record(entry: Any) -> NodeRecord | None:
    if not isinstance(entry, Mapping):
        return None
    name, state, batch = entry.get("name"), entry.get("state"), entry.get("batch", 0)
    if not isinstance(name, str) or not name or state not in set(NodeState):
        return None
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 0:
        return None
    since = _time(entry.get("since"))
    if since is None:
        return None
    detail = entry.get("detail", "")
    return NodeRecord(
        name, NodeState(state), batch, since, detail if isinstance(detail, str) else ""
    )


def _time(value: Any) -> datetime | None:
    parsed = read_time(value)
    return None if parsed is None else parsed.astimezone(UTC)
