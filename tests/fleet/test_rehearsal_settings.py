"""``rehearsal:`` in gitopsbot.yaml (docs/rehearsal.md, "On the pull request"): ``attachToPlan``
is off unless a team turns it on; a misspelt key or a non-boolean is a problem, named."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from gitopsbot.errors import FleetError
from gitopsbot.fleetrepo import load_fleet
from tests.fleet.fleet_testing import MemoryTree


def _settings(example_files: dict[str, str], extra: str) -> str:
    return example_files["gitopsbot.yaml"] + extra


def test_off_by_default_on_when_asked(
    example_files: dict[str, str], tree_with: Callable[..., MemoryTree]
) -> None:
    assert not load_fleet(tree_with({})).settings.rehearsal.attach_to_plan
    on = _settings(example_files, "rehearsal:\n  attachToPlan: true\n")
    assert load_fleet(tree_with({"gitopsbot.yaml": on})).settings.rehearsal.attach_to_plan
    empty = _settings(example_files, "rehearsal: {}\n")
    assert not load_fleet(tree_with({"gitopsbot.yaml": empty})).settings.rehearsal.attach_to_plan


@pytest.mark.parametrize(
    ("extra", "said"),
    [
        ("rehearsal:\n  attachToPlans: true\n", "attachToPlans"),
        ("rehearsal:\n  attachToPlan: sometimes\n", "attachToPlan"),
    ],
)
def test_a_bad_rehearsal_section_is_named(
    example_files: dict[str, str],
    tree_with: Callable[..., MemoryTree],
    extra: str,
    said: str,
) -> None:
    with pytest.raises(FleetError) as info:
        load_fleet(tree_with({"gitopsbot.yaml": _settings(example_files, extra)}))
    assert said in str(info.value) and "gitopsbot.yaml" in str(info.value)
