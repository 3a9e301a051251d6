"""credentials.yaml's ``agentReconnectTimeout`` (R18's check): the default, a value, and bad
input refused with the file, line and field, as every fleet file's."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from gitopsbot.errors import FleetError
from gitopsbot.fleetrepo import load_fleet
from tests.fleet.fleet_testing import MemoryTree

PATH = "clusters/staging/credentials.yaml"


def _with(example_files: dict[str, str], line: str) -> dict[str, str]:
    return {PATH: line + example_files[PATH]}


def test_default_and_a_value(
    example_files: dict[str, str], tree_with: Callable[..., MemoryTree]
) -> None:
    fleet = load_fleet(tree_with({}))
    assert fleet.clusters["staging"].credentials.agent_reconnect_timeout_seconds == 600
    fleet = load_fleet(tree_with(_with(example_files, "agentReconnectTimeout: 3m\n")))
    assert fleet.clusters["staging"].credentials.agent_reconnect_timeout_seconds == 180


@pytest.mark.parametrize("value", ["5s", "soon", "-1m", "[1]"])
def test_bad_values_name_the_file_line_and_field(
    example_files: dict[str, str], tree_with: Callable[..., MemoryTree], value: str
) -> None:
    with pytest.raises(FleetError) as raised:
        load_fleet(tree_with(_with(example_files, f"agentReconnectTimeout: {value}\n")))
    text = str(raised.value)
    assert f"{PATH}:1" in text and "agentReconnectTimeout" in text, text
