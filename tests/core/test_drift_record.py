"""core.drift_record: the state branch's drift.yaml, for status."""

from __future__ import annotations

from datetime import UTC, datetime

from gitopsbot.core.drift import record as drift_record
from gitopsbot.core.drift.report import DriftItem, DriftReport

NOW = datetime(2026, 12, 4, 15, 0, tzinfo=UTC)


def test_round_trip_and_describe() -> None:
    items = tuple(DriftItem("values", f"k{i}", "1", "2") for i in range(25))
    record = drift_record.of(DriftReport("staging", items), NOW)
    assert len(record.items) == drift_record.MAX_ITEMS
    again = drift_record.loads(drift_record.dumps(record))
    assert again == record
    assert again.describe() == (
        "staging: drift (25: values) since 2026-12-04 15:00 UTC (gitopsbot drift lists it)"
    )


def test_unreadable() -> None:
    assert drift_record.loads("[") is None
    assert drift_record.loads("summary: 3\n") is None
