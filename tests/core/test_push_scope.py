"""A push wakes the clusters it touched (core.push_scope)."""

from __future__ import annotations

import pytest

from gitopsbot.core.fleet.push_scope import touched

FLEET = ("staging", "production", "lab")


@pytest.mark.parametrize(
    ("paths", "woken"),
    [
        (["clusters/staging/release.yaml"], {"staging"}),
        (["clusters/staging/values.yaml", "clusters/lab/rollout.yaml"], {"staging", "lab"}),
        ([], set()),  # an empty push (a tag moved, a merge with no change): nobody
        (["gitopsbot.yaml"], None),  # waves, clearedVersions, the forge: everyone
        (["policies/no-friday.yaml", "clusters/lab/values.yaml"], None),
        (["README.md"], None),  # the loader may read anything: everyone, as before
        (["clusters/new-cluster/release.yaml"], None),  # not one this replica knows
        (["clusters"], None),
    ],
)
def test_a_push_wakes_the_clusters_it_touched(paths: list[str], woken: set[str] | None) -> None:
    got = touched(paths, FLEET)
    assert (None if got is None else set(got)) == woken
