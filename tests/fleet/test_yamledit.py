"""Round-trip edits: the new value is there, comments, key order and untouched bytes stay."""

from __future__ import annotations

import difflib
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from ruamel.yaml import YAML

from gitopsbot.core.fleet.yamledit import YamlEditError, get_value, set_value, set_values
from tests.fleet.fleet_testing import EXAMPLE

VALUES = (EXAMPLE / "clusters/staging/values.yaml").read_text()
RELEASE = (EXAMPLE / "clusters/staging/release.yaml").read_text()


def _changed_lines(before: str, after: str) -> list[str]:
    return [
        line
        for line in difflib.ndiff(before.splitlines(), after.splitlines())
        if line.startswith(("- ", "+ "))
    ]


def _safe(text: str) -> Any:
    return YAML(typ="safe").load(text)


def test_bump_chart_version_touches_one_line_and_keeps_its_comment() -> None:
    out = set_value(RELEASE, "chart.version", "1.8.8")
    assert _changed_lines(RELEASE, out) == [
        "-   version: 1.8.7          # staging runs 1.8.0 today; this is the upgrade under review",
        "+   version: 1.8.8          # staging runs 1.8.0 today; this is the upgrade under review",
    ]
    assert get_value(out, "chart.version") == "1.8.8"


def test_set_hypervisor_image_keeps_everything_else() -> None:
    image = "tensorfusion/tensor-fusion-hypervisor:2.17.0"
    out = set_value(VALUES, "cluster.hypervisorImage", image)
    assert len(_changed_lines(VALUES, out)) == 2
    before, after = _safe(VALUES), _safe(out)
    before["cluster"]["hypervisorImage"] = image
    assert after == before


def test_quoted_scalar_keeps_its_quotes() -> None:
    out = set_value(VALUES, "controller.image.tag", "2.17.0")
    assert '    tag: "2.17.0"                 # follows' in out
    out = set_value("a: 'x'  # c\n", "a", "it's")
    assert out == "a: 'it''s'  # c\n"


def test_value_that_would_change_type_unquoted_is_quoted() -> None:
    out = set_value("a: x\n", "a", "1.10")
    assert out == 'a: "1.10"\n'
    assert get_value(out, "a") == "1.10"
    assert set_value("a: x\n", "a", 3) == "a: 3\n"
    assert set_value("a: x\n", "a", True) == "a: true\n"


def test_missing_keys_are_inserted_at_the_end_of_their_mapping() -> None:
    out = set_value(VALUES, "cluster.pool.capacityConfig.warmResources.tflops", "10")
    added = _changed_lines(VALUES, out)
    assert added == ["+       warmResources:", '+         tflops: "10"']
    assert _safe(out)["cluster"]["pool"]["capacityConfig"]["warmResources"] == {"tflops": "10"}
    # the next top-level key still follows, unchanged
    assert out.index("warmResources") < out.index("\nalert:")


def test_insert_into_empty_document_and_top_level() -> None:
    assert set_value("", "a.b", "c") == "a:\n  b: c\n"
    assert set_value("# only a comment\n", "a", 1) == "# only a comment\na: 1\n"
    assert set_value("x: 1", "y", 2) == "x: 1\ny: 2\n"


def test_crlf_documents_keep_crlf() -> None:
    text = "a:\r\n  b: 1\r\nc: 2\r\n"
    assert set_value(text, "a.d", 3) == "a:\r\n  b: 1\r\n  d: 3\r\nc: 2\r\n"


def test_sequence_items_by_index() -> None:
    text = "list:\n  - name: a  # first\n  - name: b\n"
    assert set_value(text, "list[1].name", "c") == "list:\n  - name: a  # first\n  - name: c\n"
    with pytest.raises(YamlEditError):
        set_value(text, "list[5].name", "c")


def test_anchors_fall_back_to_a_round_trip_that_keeps_meaning() -> None:
    out = set_value("a: &x 1  # c\nb: *x\n", "a", 2)
    assert _safe(out) == {"a": 2, "b": 1}
    assert "# c" in out


def test_flow_and_block_scalars_fall_back_and_keep_comments() -> None:
    out = set_value("# head\nm: {x: 1}\nn: |\n  text\n", "m.y", 2)
    assert _safe(out) == {"m": {"x": 1, "y": 2}, "n": "text\n"}
    assert out.startswith("# head\n")
    out = set_value("# head\nn: |\n  text\nz: 1\n", "n", "new")
    assert _safe(out) == {"n": "new", "z": 1}


def test_errors() -> None:
    with pytest.raises(YamlEditError):
        set_value("a: [", "a", 1)
    with pytest.raises(YamlEditError):
        set_value("a: 1\n", "a.b", 1)  # through a scalar
    with pytest.raises(YamlEditError):
        set_value("a: 1\n", "a..b", 1)


def test_set_values_applies_in_order() -> None:
    out = set_values(RELEASE, {"chart.version": "1.8.8", "kubeContext": "other"})
    assert (get_value(out, "chart.version"), get_value(out, "kubeContext")) == ("1.8.8", "other")
    assert out.count("#") == RELEASE.count("#")


# -- properties --------------------------------------------------------------------------------

LEAVES = [
    "controller.replicaCount",
    "controller.image.tag",
    "greptime.port",
    "agent.agentId",
    "cluster.hypervisorImage",
    "cluster.pool.capacityConfig.maxResources.vram",
    "dynamicConfig.metricsTTL",
]
scalars = st.one_of(
    st.integers(-(10**6), 10**6),
    st.booleans(),
    st.text(st.characters(codec="utf-8", exclude_categories=("Cs", "Cc")), max_size=20),
)


@settings(max_examples=40, deadline=None)
@given(path=st.sampled_from(LEAVES), value=scalars)
def test_replacing_a_scalar_changes_only_its_line(path: str, value: Any) -> None:
    out = set_value(VALUES, path, value)
    assert get_value(out, path) == value
    if get_value(VALUES, path) == value and type(get_value(VALUES, path)) is type(value):
        assert out == VALUES
        return
    changed = _changed_lines(VALUES, out)
    assert len(changed) == 2, changed  # one line out, one line in
    old_line, new_line = changed[0][2:], changed[1][2:]
    key = path.rsplit(".", 1)[-1]
    assert old_line.split(":", 1)[0] == new_line.split(":", 1)[0]
    assert new_line.lstrip().startswith(f"{key}:")
    if "#" in old_line:  # a trailing comment survives
        assert new_line.endswith(old_line[old_line.index(" #") :])
    expected = _safe(VALUES)
    node = expected
    *head, last = path.split(".")
    for part in head:
        node = node[part]
    node[last] = value
    assert _safe(out) == expected


@settings(max_examples=40, deadline=None)
@given(
    parent=st.sampled_from(["", "controller", "cluster.pool", "dynamicConfig.autoMigration"]),
    key=st.from_regex(r"[a-z][a-zA-Z0-9]{0,10}", fullmatch=True),
    value=scalars,
)
def test_inserting_a_key_only_adds_lines(parent: str, key: str, value: Any) -> None:
    path = f"{parent}.{key}" if parent else key
    try:
        get_value(VALUES, path)
    except KeyError:
        pass
    else:
        return  # an existing key: covered by the replacement property
    out = set_value(VALUES, path, value)
    assert get_value(out, path) == value
    assert all(line.startswith("+ ") for line in _changed_lines(VALUES, out))
