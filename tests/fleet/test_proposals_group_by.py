"""``proposals.groupBy`` in gitopsbot.yaml (issue 14, docs/proposals.md): read into the model,
default ``cluster``, every bad input refused with file, line, column and field."""

from __future__ import annotations

import pytest

from gitopsbot.core.fleet.settings_file import parse_settings
from gitopsbot.errors import FleetError

WAVES = "waves:\n  - name: staging\n    clusters: {environment: staging}\n"


def test_group_by_defaults_to_cluster() -> None:
    assert parse_settings("").proposals.group_by == "cluster"
    assert parse_settings("proposals:\n  scope: patch\n").proposals.group_by == "cluster"


def test_group_by_wave_is_read() -> None:
    text = "proposals:\n  groupBy: wave\n" + WAVES
    assert parse_settings(text).proposals.group_by == "wave"


def _problems(text: str) -> list[str]:
    with pytest.raises(FleetError) as info:
        parse_settings(text)
    return str(info.value).splitlines()


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "proposals:\n  groupBy: waves\n" + WAVES,
            "gitopsbot.yaml:2:12: proposals.groupBy: 'waves' is not one of cluster, wave "
            "(did you mean 'wave'?)",
        ),
        (
            "proposals:\n  groupBy: [wave]\n" + WAVES,
            "gitopsbot.yaml:2:12: proposals.groupBy: a list is not one of cluster, wave",
        ),
        (
            "proposals:\n  enabled: true\n  groupBy: wave\n",
            "gitopsbot.yaml:3:12: proposals.groupBy: 'wave' needs waves: no waves are defined "
            "(define waves: (docs/fleet-repo.md, Waves) or write groupBy: cluster)",
        ),
        (
            "proposals:\n  groupby: wave\n",
            "gitopsbot.yaml:2:3: proposals.groupby: unknown key",
        ),
    ],
    ids=["misspelt", "not-a-string", "no-waves", "wrong-case-key"],
)
def test_bad_group_by_is_located(text: str, expected: str) -> None:
    problems = _problems(text)
    assert any(p.startswith(expected) for p in problems), problems
