"""Keyed values diff: examples, masking (canary), and Hypothesis properties."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from gitopsbot.core.charts.values_diff import (
    ChangeKind,
    apply_diff,
    diff_values,
    get_path,
    merge_values,
)

CANARY = "canary-s3cr3t-9f2e1d"

keys = st.sampled_from(["a", "b", "c", "d", "image", "tag", "password", "x.y", "0"])
scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-5, 5), st.text(max_size=5), st.floats(allow_nan=False)
)
trees = st.recursive(
    scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=4), st.dictionaries(keys, children, max_size=4)
    ),
    max_leaves=20,
)
roots = st.dictionaries(keys, trees, max_size=5)


@given(roots)
@settings(max_examples=200, deadline=None)
def test_diff_with_itself_is_empty(a: dict[str, Any]) -> None:
    assert not diff_values(a, a)


@given(roots, roots)
@settings(max_examples=300, deadline=None)
def test_apply_diff_yields_target(a: dict[str, Any], b: dict[str, Any]) -> None:
    d = diff_values(a, b)
    assert apply_diff(a, d) == b
    assert bool(d) == (a != b or _types_differ(a, b))


def _types_differ(a: Any, b: Any) -> bool:
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() != b.keys() or any(_types_differ(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) != len(b) or any(_types_differ(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is not type(b)


def test_paths_and_kinds() -> None:
    a = {"controller": {"replicaCount": 1, "image": {"tag": ""}}, "list": [1, 2, 3], "gone": 1}
    b = {"controller": {"replicaCount": 2, "image": {"tag": ""}}, "list": [1, 5], "new": {"k": 1}}
    d = diff_values(a, b)
    got = {(c.kind, c.path) for c in d.changes}
    assert got == {
        (ChangeKind.CHANGED, "controller.replicaCount"),
        (ChangeKind.CHANGED, "list[1]"),
        (ChangeKind.REMOVED, "list[2]"),
        (ChangeKind.REMOVED, "gone"),
        (ChangeKind.ADDED, "new"),
    }
    assert d.touches("controller") and d.touches("list") and not d.touches("contr")


def test_bool_to_int_is_a_change() -> None:
    assert diff_values({"a": True}, {"a": 1}).changes[0].kind == ChangeKind.CHANGED


def test_masking_hides_secret_values() -> None:
    a = {"agent": {"enrollToken": "old-" + CANARY}, "greptime": {"password": ""}}
    b = {
        "agent": {"enrollToken": CANARY},
        "greptime": {"password": CANARY},
        "extra": {"nested": {"apiKey": CANARY, "name": "visible"}},
        "team": {"id": CANARY},
    }
    d = diff_values(a, b).masked(["team.id"])
    text = repr(d)
    assert CANARY not in text
    paths = {c.path: c for c in d.changes}
    assert paths["agent.enrollToken"].after == "***"
    assert paths["extra"].after == {"nested": {"apiKey": "***", "name": "visible"}}
    assert paths["team"].after == {"id": "***"}
    # the unmasked diff keeps real values (the executor may need them)
    assert CANARY in repr(diff_values(a, b))


def test_merge_values_like_helm() -> None:
    base = {"a": {"b": 1, "c": 2}, "d": [1, 2], "e": 1}
    over = {"a": {"c": 3}, "d": [9], "e": None}
    assert merge_values(base, over) == {"a": {"b": 1, "c": 3}, "d": [9]}
    assert get_path({"a": [{"b": 1}]}, ("a", 0, "b")) == 1
    assert get_path({"a": 1}, ("a", "b"), "x") == "x"
