"""The one YAML reader: values mean what ruamel.yaml's round trip made of them before (YAML 1.2:
``on`` and ``yes`` are strings, ``0755`` is 755), positions are kept, and every limit refuses
its input quickly with a located problem, never a RecursionError or a hang.

The reference for scalar meaning is ruamel.yaml itself, run in the same test (differential).
"""

from __future__ import annotations

import datetime as dt
import math
import time
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from ruamel.yaml import YAML

from gitopsbot.core.fleet import located_yaml
from gitopsbot.core.fleet.located_yaml import (
    DEFAULT_LIMITS,
    LocatedList,
    LocatedMap,
    Tagged,
    YamlLimits,
)
from gitopsbot.errors import FleetError
from tests.fleet.fleet_testing import alias_bomb

TRICKY = [
    *("on", "off", "yes", "no", "Yes", "NO", "y", "n", "Y", "N", "On", "OFF"),
    *("true", "True", "TRUE", "false", "False", "FALSE", "tRue"),
    *("0755", "-0755", "0o755", "0o8", "0x1F", "0x_1", "0b101", "0b", "0o", "08", "09", "0_7"),
    *("+12", "1_000", "1__0", "12_3", "_12", "0", "-0", "00"),
    *("1.5", "1.", "-.5", ".5", "1e3", "1E3", "1.5e3", "1e+3", "-1e-3", "3.0e", "1.2.3"),
    *(".inf", "-.Inf", "+.inf", ".INF", ".nan", ".NaN", ".NAN"),
    *("~", "null", "Null", "NULL", "nUll"),
    *("1:20", "190:20:30", "1h", "30s", "0xG", "+", ".", "x", "tensor-fusion", "1.8.7"),
]


def _ruamel(text: str) -> Any:
    return YAML(typ="rt").load(text)


def _same(ours: Any, theirs: Any) -> bool:
    if isinstance(theirs, float) and math.isnan(theirs):
        return isinstance(ours, float) and math.isnan(ours)
    if isinstance(theirs, bool) or isinstance(ours, bool):
        return type(ours) is type(theirs) and ours == theirs
    if isinstance(theirs, int | float):
        return type(ours) is type(int(theirs) if isinstance(theirs, int) else float(theirs)) and (
            ours == theirs
        )
    if isinstance(theirs, str):
        return isinstance(ours, str) and ours == str(theirs)
    return bool(ours == theirs)


@pytest.mark.parametrize("scalar", TRICKY)
def test_a_plain_scalar_means_what_it_meant_before(scalar: str) -> None:
    ours = located_yaml.load(f"k: {scalar}\n", "t.yaml")["k"]
    theirs = _ruamel(f"k: {scalar}\n")["k"]
    assert _same(ours, theirs), (scalar, ours, theirs)


def test_yaml_1_2_meanings_spelled_out() -> None:
    doc = located_yaml.load("a: on\nb: yes\nc: 0755\nd: 0o755\ne: 'true'\nf: !!str 3\n", "t")
    assert doc == {"a": "on", "b": "yes", "c": 755, "d": 493, "e": "true", "f": "3"}


@pytest.mark.parametrize("scalar", ["+_", "-_", "0o_", "0b_", "0x_", "._"])
def test_number_shaped_scalars_without_digits_are_strings_not_a_crash(scalar: str) -> None:
    # ruamel.yaml raised IndexError or ValueError on these: no meaning to keep but "a string".
    assert located_yaml.load(f"k: {scalar}\n", "t") == {"k": scalar}


def test_timestamps_are_dates_as_before() -> None:
    doc = located_yaml.load("a: 2001-12-14\nb: 2001-12-14 21:59:43.10\nc: 2001-1-1\n", "t")
    assert doc["a"] == dt.date(2001, 12, 14)
    assert doc["b"] == dt.datetime(2001, 12, 14, 21, 59, 43, 100000)  # noqa: DTZ001  # as written
    assert doc["c"] == "2001-1-1"  # a date needs two-digit month and day, as in ruamel
    assert _ruamel("c: 2001-1-1\n")["c"] == "2001-1-1"


@settings(max_examples=300, deadline=None)
@given(
    st.text(
        alphabet=st.sampled_from(list("0123456789+-._eEoxbinfatrulsyNTF:~ ")),
        min_size=1,
        max_size=8,
    )
)
def test_any_short_plain_scalar_resolves_like_ruamel(text: str) -> None:
    source = f"k: {text}\n"
    try:
        theirs = _ruamel(source)
    except Exception:  # noqa: BLE001  # ruamel refuses (or crashes on) it: ours must not crash
        located_yaml.read(source, "t")
        return
    if not isinstance(theirs, dict) or not isinstance(theirs.get("k"), str | int | float | None):
        return
    doc, problems = located_yaml.read(source, "t")
    assert not problems, (text, problems)
    assert _same(doc["k"], theirs["k"]), (text, doc["k"], theirs["k"])


def test_positions_of_keys_values_and_items() -> None:
    text = "top:\n  name: x\n  list:\n    - a\n    - {b: 1}\n"
    doc = located_yaml.load(text, "t", located=True)
    assert isinstance(doc, LocatedMap)
    top = doc["top"]
    assert doc.key_pos["top"] == (1, 1)
    assert top.key_pos["name"] == (2, 3)
    assert top.value_pos["name"] == (2, 9)
    items = top["list"]
    assert isinstance(items, LocatedList)
    assert items.item_pos == [(4, 7), (5, 7)]
    assert items[1].pos == (5, 7)


def test_plain_mode_gives_plain_containers() -> None:
    doc = located_yaml.load("a: [1, {b: 2}]\n", "t")
    assert type(doc) is dict and type(doc["a"]) is list and type(doc["a"][1]) is dict


def test_custom_tags_stay_tagged() -> None:
    doc = located_yaml.load("a: !duration 7d\n", "t")
    assert doc["a"] == Tagged("!duration", "7d")


def test_merge_keys_fill_what_is_not_set() -> None:
    doc = located_yaml.load("base: &b {x: 1, y: 2}\nm:\n  <<: *b\n  y: 3\n", "t", located=True)
    assert doc["m"] == {"y": 3, "x": 1}


def test_duplicate_keys_are_each_located_with_their_path() -> None:
    doc, problems = located_yaml.read("a:\n  b: 1\n  b: 2\nc: 1\nc: 2\n", "t.yaml")
    assert doc is None
    assert {(p.line, p.column, p.field, p.hint) for p in problems} == {
        (3, 3, "a.b", "first defined at line 2"),
        (5, 1, "c", "first defined at line 4"),
    }


def test_several_documents() -> None:
    assert located_yaml.load_all("a: 1\n---\n---\nb: 2\n", "t") == [{"a": 1}, {"b": 2}]
    with pytest.raises(FleetError, match="t:2:1: malformed YAML"):
        located_yaml.load("a: 1\n---\nb: 2\n", "t")


# -- limits ---------------------------------------------------------------------------------------


def test_an_alias_bomb_is_refused_in_milliseconds_at_its_first_offending_alias() -> None:
    start = time.perf_counter()
    doc, problems = located_yaml.read(alias_bomb(), "values.yaml")
    elapsed = time.perf_counter() - start
    assert doc is None
    [problem] = problems
    # *e stands for 66,430 nodes; 74,739 are counted when f starts, so the seventh *e of
    # line 6 is the one that passes 500,000.
    assert (problem.line, problem.column) == (6, 8 + 6 * 4)
    assert "alias *e expands the document past 500000 nodes" in problem.message
    assert elapsed < 0.5


def test_a_small_node_budget_catches_a_smallalias_bomb() -> None:
    limits = YamlLimits(max_nodes=100)
    _, problems = located_yaml.read(alias_bomb(levels=3, width=9), "v", limits=limits)
    # 14 nodes before b's items; each *a is 10: the ninth passes 100.
    assert (problems[0].line, problems[0].column) == (2, 8 + 8 * 4)
    assert "past 100 nodes" in problems[0].message


def test_a_recursive_alias_is_refused() -> None:
    _, problems = located_yaml.read("a: &a [1, *a]\n", "v")
    assert (problems[0].line, problems[0].column) == (1, 11)
    assert "refers to its own anchor" in problems[0].message


def test_too_many_aliases() -> None:
    text = "a: &a 1\nb: [" + ", ".join(["*a"] * 11) + "]\n"
    _, problems = located_yaml.read(text, "v", limits=YamlLimits(max_aliases=10))
    assert problems[0].line == 2 and "more than 10 aliases" in problems[0].message


@pytest.mark.parametrize(
    "text", ["a: " + "[" * 50_000, "a: " + "[" * 50_000 + "]" * 50_000, "- " * 50_000 + "x\n"]
)
def test_deep_nesting_is_located_never_a_recursion_error(text: str) -> None:
    _, problems = located_yaml.read(text, "v.yaml")
    [problem] = problems
    assert problem.line == 1 and problem.column > 1
    assert "nested deeper than" in problem.message


def test_nesting_beyond_the_limit_is_refused_where_it_starts() -> None:
    _, problems = located_yaml.read("x: [[[[1]]]]\n", "v", limits=YamlLimits(max_depth=4))
    assert (problems[0].line, problems[0].column) == (1, 7)
    assert "deeper than 4 levels" in problems[0].message


def test_aliases_count_towards_depth() -> None:
    text = "a: &a [[[1]]]\nb: [[*a]]\n"
    _, problems = located_yaml.read(text, "v", limits=YamlLimits(max_depth=5))
    assert problems[0].line == 2 and "aliases expanded" in problems[0].message


def test_a_file_over_the_size_limit_is_refused_before_parsing() -> None:
    _, problems = located_yaml.read("a: 1\n" * 1000, "v.yaml", limits=YamlLimits(max_bytes=1024))
    assert problems[0].line == 0 and "5000 bytes" in problems[0].message


def test_control_characters_are_located() -> None:
    _, problems = located_yaml.read("a: 1\nb: x\x07y\n", "v")
    assert (problems[0].line, problems[0].column) == (2, 5)


@pytest.mark.parametrize(
    ("data", "message", "where"),
    [
        (b"a: 1\nb: \x00\x01\x02", "binary file", (2, 4)),
        (b"\xff\xfea\x00:\x00", "UTF-16", (1, 1)),
        (b"a: 1\nb: caf\xe9\n", "not UTF-8", (2, 7)),
    ],
)
def test_bytes_that_are_not_utf8_text(data: bytes, message: str, where: tuple[int, int]) -> None:
    text, problems = located_yaml.decode(data, "v.yaml")
    assert text is None
    assert message in problems[0].message and (problems[0].line, problems[0].column) == where


def test_a_bom_is_allowed() -> None:
    assert located_yaml.decode(b"\xef\xbb\xbfa: 1\n", "v") == ("a: 1\n", [])


def test_libyaml_is_what_parses() -> None:
    # The speed (and the 1000-level bound on nesting) come from libyaml: PyYAML's wheels ship
    # it; a PyYAML built without it would fail at import of the reader, not silently slow down.
    assert yaml.__with_libyaml__


def test_a_chart_repository_index_may_be_larger_than_a_fleet_file() -> None:
    from gitopsbot.core.charts.chart import parse_index

    entry = "  - version: 1.0.{i}\n    urls: [https://charts.example/c-1.0.{i}.tgz]\n" + (
        "    description: " + "x" * 150 + "\n"
    )
    text = "apiVersion: v1\nentries:\n  c:\n" + "".join(entry.format(i=i) for i in range(8000))
    assert len(text) > DEFAULT_LIMITS.max_bytes
    assert len(parse_index(text).entries["c"]) == 8000
