"""``drift:`` in gitopsbot.yaml: defaults (report only), each field, each bad input located."""

from __future__ import annotations

import pytest

from gitopsbot.core.fleet.model import DriftSettings
from gitopsbot.core.fleet.settings_file import parse_settings
from gitopsbot.errors import FleetError


def test_default_reports_only_every_hour() -> None:
    assert parse_settings("").drift == DriftSettings()
    assert DriftSettings().on_drift == "report" and DriftSettings().interval_seconds == 3600


def test_fields() -> None:
    text = "drift:\n  enabled: false\n  interval: 2h\n  onDrift: propose-reapply\n  labels: [d]\n"
    assert parse_settings(text).drift == DriftSettings(False, 7200, "propose-reapply", ("d",))


@pytest.mark.parametrize(
    ("text", "where"),
    [
        (
            "drift:\n  onDrift: fix-it\n",
            "gitopsbot.yaml:2:12: drift.onDrift: 'fix-it' is not one of",
        ),
        ("drift:\n  interval: 5s\n", "gitopsbot.yaml:2:13: drift.interval"),
        ("drift:\n  bogus: 1\n", "gitopsbot.yaml:2:3: drift.bogus: unknown key"),
    ],
)
def test_bad_input_located(text: str, where: str) -> None:
    with pytest.raises(FleetError) as e:
        parse_settings(text)
    assert where in str(e.value)
