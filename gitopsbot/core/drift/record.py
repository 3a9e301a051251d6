"""The last drift ``run`` found for a cluster, kept on the state branch so that ``status``
(which reads Git only) can show it: ``clusters/<name>/drift.yaml``, written when the drift
changes, removed when it is gone (docs/drift.md).

Pure: values in, text out. Secret-free: built from ``DriftReport`` lines, which never hold a
secret.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from gitopsbot.core.drift.report import DriftReport
from gitopsbot.core.records.journal import dump_yaml, load_yaml

FILE = "drift.yaml"
MAX_ITEMS = 20  # the record is a pointer for status; `gitopsbot drift` lists everything


@dataclass(frozen=True, slots=True)
class DriftRecord:
    summary: str  # "staging: drift (2: pool-policy, values)"
    digest: str
    since: datetime | None  # when this drift was first found
    items: tuple[str, ...] = ()

    def describe(self) -> str:
        when = f" since {self.since.astimezone(UTC):%Y-%m-%d %H:%M} UTC" if self.since else ""
        return f"{self.summary}{when} (gitopsbot drift lists it)"


def of(report: DriftReport, now: datetime) -> DriftRecord:
    lines = tuple(i.line() for i in report.items[:MAX_ITEMS])
    return DriftRecord(report.summary(), report.digest(), now, lines)


def dumps(record: DriftRecord) -> str:
    return dump_yaml(
        {
            "summary": record.summary,
            "digest": record.digest,
            "since": record.since.astimezone(UTC).isoformat() if record.since else None,
            "items": list(record.items),
        }
    )


def loads(text: str) -> DriftRecord | None:
    """The record, or None when it cannot be read."""
    try:
        data: Any = load_yaml(text)
    except ValueError:
        return None
    if not isinstance(data, Mapping) or not isinstance(data.get("summary"), str):
        return None
    since: datetime | None = None
    if data.get("since"):
        try:
            since = datetime.fromisoformat(str(data["since"]))
        except ValueError:
            since = None
    raw = data.get("items")
    items = tuple(str(i) for i in raw) if isinstance(raw, list) else ()
    return DriftRecord(data["summary"], str(data.get("digest", "")), since, items)
