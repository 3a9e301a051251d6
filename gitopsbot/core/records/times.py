"""Reading back a time a record on the state branch holds: ISO 8601 text (or a timestamp
written by hand), a time without a zone taken as UTC, anything unreadable None (a
hand-edited file loses that time, never the record's reader)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any


def read_time(value: Any) -> datetime | None:
    if isinstance(value, datetime):
        parsed = value
    elif isinstance(value, str):
        try:
            parsed = datetime.fromisoformat(value)
        except ValueError:
            return None
    else:
        return None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)
