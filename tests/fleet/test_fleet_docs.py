"""docs/fleet-repo.md's examples run: each file snippet loads in the example fleet, and the
error example is what the loader really prints."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest

from gitopsbot.errors import FleetError
from gitopsbot.fleetrepo import load_fleet
from tests.fleet.fleet_testing import MemoryTree

DOC = Path(__file__).resolve().parents[2] / "docs" / "fleet-repo.md"
SNIPPET = re.compile(r"<!-- file: (\S+) -->\n```yaml\n(.*?)```", re.S)


def _snippets() -> list[tuple[str, str]]:
    return SNIPPET.findall(DOC.read_text())


def test_doc_has_snippets_for_each_file_kind() -> None:
    names = {path.rsplit("/", 1)[-1] for path, _ in _snippets()}
    assert {"gitopsbot.yaml", "release.yaml", "rollout.yaml", "credentials.yaml"} <= names


@pytest.mark.parametrize(("path", "text"), _snippets(), ids=[p for p, _ in _snippets()])
def test_doc_snippet_loads(path: str, text: str, tree_with: Callable[..., MemoryTree]) -> None:
    changes = {path: text}
    if path == "clusters/production/credentials.yaml":
        pass  # the example's production values already leave agent.agentId empty
    load_fleet(tree_with(changes))


def test_doc_error_example_is_real(
    example_files: dict[str, str], tree_with: Callable[..., MemoryTree]
) -> None:
    s = "clusters/staging/"
    edits = {
        s + "release.yaml": example_files[s + "release.yaml"].replace(
            "version: 1.8.7", "version: 1.8"
        ),
        s + "rollout.yaml": example_files[s + "rollout.yaml"]
        .replace("batchPercentage: 50", "batchPercentge: 50")
        .replace("duration: 4h", "duration: 4 hours"),
        s + "values.yaml": example_files[s + "values.yaml"].replace(
            'enrollToken: ""', 'enrollToken: "tok-8f2d91c7"'
        ),
    }
    with pytest.raises(FleetError) as info:
        load_fleet(tree_with(edits))
    block = DOC.read_text().split("<!-- error-example -->\n```\n", 1)[1].split("```", 1)[0]
    assert str(info.value) == block.strip()
    assert "tok-8f2d91c7" not in str(info.value)
