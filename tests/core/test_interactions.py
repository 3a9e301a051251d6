"""The interaction matrix of docs/decisions.md, decided: every cell is what the pass's pure
decision does with its two features in play (tests/core/interaction_world.py builds them)."""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import pytest

from tests.core.interaction_world import FEATURES, CannotMeet, World, made, outcome

DECISIONS = Path(__file__).resolve().parents[2] / "docs" / "decisions.md"


def _matrix() -> tuple[list[str], dict[tuple[str, str], str], dict[str, str]]:
    text = DECISIONS.read_text(encoding="utf-8")
    section = text.split("## The matrix", 1)[1].split("\n## ", 1)[0]
    lines = section.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| | `"))
    end = next(i for i in range(start, len(lines)) if not lines[i].startswith("|"))
    rows = [line for line in lines[start:end] if not line.startswith("|---")]
    header = [c.strip().strip("`") for c in rows[0].strip("|").split("|")][1:]
    cells: dict[tuple[str, str], str] = {}
    for line in rows[1:]:
        parts = [c.strip() for c in line.strip().strip("|").split("|")]
        name = parts[0].strip("`")
        for other, cell in zip(header, parts[1:], strict=True):
            if cell:
                cells[(name, other)] = cell.strip("*")
    notes = dict(re.findall(r"^- —(\d+): (.+)$", section, flags=re.M))
    return header, cells, notes


HEADER, CELLS, NOTES = _matrix()


def test_the_matrix_has_every_feature_and_every_pair() -> None:
    assert list(FEATURES) == HEADER
    expected = {(a, b) for i, a in enumerate(HEADER) for b in HEADER[i:]}
    assert set(CELLS) == expected


@pytest.mark.parametrize(
    ("pair", "cell"),
    sorted(CELLS.items()),
    ids=lambda v: "-".join(v) if isinstance(v, tuple) else v,
)
def test_each_cell_is_what_the_pass_decides(pair: tuple[str, str], cell: str) -> None:
    names = (pair[0],) if pair[0] == pair[1] else pair
    if cell.startswith("—"):
        with pytest.raises(CannotMeet) as why:
            made(*names)
        assert str(why.value) == NOTES[cell[1:]]
        return
    assert outcome(made(*names)) == cell


@pytest.mark.parametrize(("a", "b"), list(itertools.combinations(FEATURES, 2)))
def test_the_order_two_features_arrive_in_does_not_matter(a: str, b: str) -> None:
    try:
        first = outcome(made(a, b))
    except CannotMeet:
        with pytest.raises(CannotMeet):
            made(b, a)
        return
    assert outcome(made(b, a)) == first


def test_nothing_in_play_opens_the_next_batch() -> None:
    assert outcome(World()) == "opens"
