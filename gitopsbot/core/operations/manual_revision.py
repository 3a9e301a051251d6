"""A Helm revision made outside the bot after the bot's last operation (a person's
break-glass ``helm upgrade`` or ``helm rollback``), as the state branch records it.

The bot reports such a revision and does not fight it: it never re-applies Git on its own; the
next merge for the cluster is judged and applied over whatever is deployed then.
``clusters/<name>/manual-revision.yaml`` names the revision, its chart, its description and
when helm made it; written when such a revision appears (again when helm finishes it: a
revision read while helm was still making it says "Preparing upgrade"), removed when the
bot's next operation makes a revision of its own.

Pure: values in, values and text out.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from gitopsbot.core.charts.observed import HelmReleaseInfo
from gitopsbot.core.operations.operation import HELM_DESCRIPTION
from gitopsbot.core.records.journal import Journal, dump_yaml, load_yaml

FILE = "manual-revision.yaml"
_BOT = HELM_DESCRIPTION.split("{", 1)[0]  # "gitopsbot op="


@dataclass(frozen=True, slots=True)
class ManualRevision:
    revision: int
    chart_version: str
    description: str
    updated: datetime | None

    def describe(self) -> str:
        when = f" at {self.updated.isoformat()}" if self.updated else ""
        return (
            f"release revision {self.revision} (chart {self.chart_version}, "
            f"{self.description or 'no description'}) was made outside the bot{when}; "
            "the bot leaves it alone; the next merge applies Git over it"
        )


def last_bot_revision(journal: Journal | None) -> int:
    """The newest Helm revision the journal's steps recorded as their effect (0: none)."""
    if journal is None:
        return 0
    return max((s.effect.helm_revision for s in journal.steps if s.effect), default=0)


def detect(latest: HelmReleaseInfo | None, journal: Journal | None) -> ManualRevision | None:
    """``latest`` when it is newer than everything the bot's last operation made and does not
    carry the bot's description; None otherwise (also when the bot made nothing yet)."""
    known = last_bot_revision(journal)
    if latest is None or known == 0 or latest.revision <= known:
        return None
    if latest.description.startswith(_BOT):
        return None
    return ManualRevision(
        latest.revision, latest.chart_version, " ".join(latest.description.split()), latest.updated
    )


def dumps(found: ManualRevision) -> str:
    return dump_yaml(
        {
            "revision": found.revision,
            "chart_version": found.chart_version,
            "description": found.description[:300],
            "updated": found.updated.astimezone(UTC).isoformat() if found.updated else None,
        }
    )


def loads(text: str) -> ManualRevision | None:
    """The record, or None when it cannot be read."""
    try:
        data: Any = load_yaml(text)
    except ValueError:
        return None
    if not isinstance(data, Mapping) or not isinstance(data.get("revision"), int):
        return None
    updated: datetime | None = None
    if data.get("updated"):
        try:
            updated = datetime.fromisoformat(str(data["updated"]))
        except ValueError:
            updated = None
    return ManualRevision(
        int(data["revision"]),
        str(data.get("chart_version", "")),
        str(data.get("description", "")),
        updated,
    )
