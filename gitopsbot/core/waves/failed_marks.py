"""After a rollback in a wave, propose marking the version failed (issue 14).

A rollback in wave N leaves a chart version that failed there. The bot proposes (a pull
request, reviewed like any change) a ``failedVersions:`` entry for that version from wave N
on; a person merges it, or closes the request. Until it is merged, the rollback itself holds
the later waves (``core.waves.promotion``: "a halt or rollback since").

Decided here: which rollbacks call for an entry (one per version, at the earliest wave that
rolled it back; none when an entry already covers that wave, for an unwaved cluster, or for a
version that cannot be told), and the edit of ``gitopsbot.yaml`` as text (comments and order
kept: the entry is appended to the ``failedVersions:`` block, or the block to the file).

Pure: values and text in, values and text out.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime

from gitopsbot.core.fleet.model import BotSettings, ClusterSpec
from gitopsbot.core.waves.promotion import wave_of

SETTINGS_FILE = "gitopsbot.yaml"
_TOP_KEY = re.compile(r"^failedVersions\s*:(.*)$")


@dataclass(frozen=True, slots=True)
class RolledBack:
    """One rollback recorded on the state branch: on ``cluster``, away from ``version``."""

    cluster: str
    version: str
    op_id: str  # the rollback operation
    reverts_op: str  # the operation it undid
    at: datetime


@dataclass(frozen=True, slots=True)
class MarkProposal:
    version: str
    wave: str
    rollbacks: tuple[RolledBack, ...]  # the evidence, earliest first

    @property
    def branch(self) -> str:
        return f"gitopsbot/failed-version/{self.version}"

    @property
    def marker(self) -> str:
        return f"failed-version/{self.version}"

    @property
    def reason(self) -> str:
        first = self.rollbacks[0]
        return f"rolled back on {first.cluster} ({first.op_id})"

    @property
    def title(self) -> str:
        return f"Mark tensor-fusion chart {self.version} failed from wave {self.wave} on"


def proposals(
    settings: BotSettings,
    clusters: Mapping[str, ClusterSpec],
    rollbacks: Iterable[RolledBack],
) -> tuple[MarkProposal, ...]:
    """The entries to propose, by version."""
    waves = settings.waves
    order = {w.name: i for i, w in enumerate(waves)}
    found: dict[str, tuple[int, list[RolledBack]]] = {}
    for rb in sorted(rollbacks, key=lambda r: (r.at, r.op_id)):
        spec = clusters.get(rb.cluster)
        wave = wave_of(waves, spec) if spec is not None else None
        if wave is None or not rb.version:
            continue  # unwaved: waves hold nothing for it; no version: nothing to name
        index = order[wave.name]
        if _covered(settings, rb.version, index, order):
            continue
        best, evidence = found.get(rb.version, (index, []))
        evidence.append(rb)
        found[rb.version] = (min(best, index), evidence)
    return tuple(
        MarkProposal(version, waves[index].name, tuple(evidence))
        for version, (index, evidence) in sorted(found.items())
    )


def _covered(settings: BotSettings, version: str, index: int, order: Mapping[str, int]) -> bool:
    """An entry already denies ``version`` at the wave of ``index``."""
    return any(
        m.version == version and (not m.wave or order.get(m.wave, 0) <= index)
        for m in settings.failed_versions
    )


def add_entry(text: str, proposal: MarkProposal) -> str:
    """``gitopsbot.yaml`` with the entry appended to its ``failedVersions:`` block (made when
    absent; an empty flow list ``[]`` becomes a block)."""
    entry = [
        f"  - version: {_quoted(proposal.version)}",
        f"    wave: {_quoted(proposal.wave)}",
        f"    reason: {_quoted(proposal.reason)}",
    ]
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if _TOP_KEY.match(line)), None)
    if start is None:
        body = text if not text or text.endswith("\n") else text + "\n"
        return body + "failedVersions:\n" + "\n".join(entry) + "\n"
    match = _TOP_KEY.match(lines[start])
    assert match is not None
    rest = match.group(1).split("#", 1)[0].strip()
    if rest == "[]":
        lines[start] = "failedVersions:"
    elif rest:
        raise ValueError(f"{SETTINGS_FILE}:{start + 1}: failedVersions: a flow list; edit by hand")
    end = start + 1
    while end < len(lines) and (not lines[end].strip() or lines[end][0] in " \t#-"):
        end += 1
    while end > start + 1 and not lines[end - 1].strip():
        end -= 1  # blank lines after the block stay after the new entry
    indent = _item_indent(lines[start + 1 : end])
    shifted = [indent + line[2:] for line in entry]
    lines[end:end] = shifted
    return "\n".join(lines) + "\n"


def _item_indent(block: list[str]) -> str:
    for line in block:
        stripped = line.lstrip(" ")
        if stripped.startswith("- "):
            return line[: len(line) - len(stripped)]
    return "  "


def _quoted(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def body(proposal: MarkProposal, state_branch: str) -> str:
    """The request's text: what happened and where the records are."""
    lines = [
        f"A rollback in wave `{proposal.wave}` left chart version `{proposal.version}`. "
        f"Merging this marks it failed from wave `{proposal.wave}` on: no cluster of that wave "
        "or a later one is upgraded to it until the entry is removed. Until then, the rollback "
        "itself holds the later waves. Close this request to keep the version allowed.",
        "",
        f"Evidence (operation records on `{state_branch}`):",
        "",
    ]
    for rb in proposal.rollbacks:
        lines.append(
            f"- `{rb.cluster}`: rollback `{rb.op_id}` at {rb.at:%Y-%m-%d %H:%M} UTC, "
            f"undoing `{rb.reverts_op}`: `clusters/{rb.cluster}/history/{rb.reverts_op}.yaml`, "
            f"`clusters/{rb.cluster}/history/{rb.op_id}.yaml`"
        )
    return "\n".join(lines) + "\n"
