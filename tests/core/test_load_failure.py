"""The record of a newest commit that could not be loaded (``core.records.load_failure``)."""

from __future__ import annotations

from datetime import UTC, datetime

from gitopsbot.core.records import load_failure

NOW = datetime(2026, 12, 3, 9, 40, 11, tzinfo=UTC)


def test_the_record_keeps_the_located_reasons_bounded_and_reads_back() -> None:
    error = "\n".join(
        ["", "clusters/lab/values.yaml:6:32: alias *e expands the document", *["more"] * 50]
    )
    found = load_failure.of("9b2e41c07d55" + "0" * 28, error + "x" * 5000, NOW)
    located = "clusters/lab/values.yaml:6:32: alias *e expands the document"
    assert found.error.startswith(f"{located}; more; more")
    assert len(found.error) <= load_failure.MAX_TEXT
    assert load_failure.loads(load_failure.dumps(found)) == found
    assert found.describe().startswith("the newest commit 9b2e41c07d55 could not be loaded")


def test_a_hand_edited_record_is_no_record() -> None:
    assert load_failure.loads("sha: [") is None
    assert load_failure.loads("sha: abc\nerror: x\nsince: yesterday\n") is None
    assert load_failure.loads("- a list\n") is None
