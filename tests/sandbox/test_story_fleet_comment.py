"""Issue 17 item 7c: the generated rollout.yaml's comment says what was generated: the
maintenance windows when there are some, that there are none otherwise (`sandbox up`)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

import yaml

from gitopsbot.sandbox.story_fleet import StoryFleet, story_fleet_files, window_cron

FLEET = StoryFleet(
    chart_repo_url="http://127.0.0.1:1/charts",
    kube_context="sandbox",
    forge_api_url="http://127.0.0.1:2/api",
)
OPENS = datetime(2026, 12, 3, 23, 5, tzinfo=UTC)


def rollout(fleet: StoryFleet) -> tuple[str, dict]:
    text = story_fleet_files(fleet)[f"clusters/{fleet.cluster}/rollout.yaml"]
    return text.splitlines()[0], yaml.safe_load(text)


def test_no_windows_says_none() -> None:
    for fleet in (FLEET, replace(FLEET, pools=("shared",))):
        comment, doc = rollout(fleet)
        assert not any("maintenanceWindow" in p for p in doc["pools"].values())
        assert "no pool has a maintenance window" in comment
        assert "in their maintenance window" not in comment


def test_windows_are_described() -> None:
    comment, doc = rollout(replace(FLEET, window_opens=OPENS, window_minutes=7))
    windows = {
        n: p["maintenanceWindow"] for n, p in doc["pools"].items() if "maintenanceWindow" in p
    }
    assert set(windows) == {"pool-2"}
    assert "the first pool at once, the others in their maintenance window" in comment
    assert window_cron(OPENS) in comment and "7m" in comment
    assert "no pool has" not in comment
