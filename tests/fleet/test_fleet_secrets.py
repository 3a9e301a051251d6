"""Secret paths: detection of literals, masking, merging at apply time, path syntax."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from ruamel.yaml import YAML

from gitopsbot.core.fleet import secrets
from gitopsbot.core.fleet.secrets import (
    MASK,
    find_secret_literals,
    is_secret_path,
    join_path,
    mask,
    merge_secrets,
    split_path,
)

CANARY = "CANARY-9d0e-never-shown"


@pytest.mark.parametrize(
    ("path", "secret"),
    [
        ("agent.enrollToken", True),  # built-in (facts §1.5)
        ("greptime.password", True),
        ("cloudVendorCredentials.secretKey", True),
        ("cloudVendorCredentials.accessKey", True),
        ("foo.ak", True),  # the vendor Secret's key names
        ("foo.sk", True),
        ("db.adminPassword", True),
        ("github.apiKey", True),
        ("controller.admissionWebhooks.secretName", False),  # where a secret is, not what
        ("auth.tokenFile", False),
        ("auth.passwordSecretRef.name", False),
        ("agent.agentId", False),  # an identifier unless the team declares it
        ("agent.cloudEndpoint", False),
        ("cluster.hypervisorImage", False),
        ("skip", False),
    ],
)
def test_is_secret_path(path: str, secret: bool) -> None:
    assert is_secret_path(path) is secret


def test_declared_paths_cover_their_subtree() -> None:
    assert is_secret_path("agent.agentId", ["agent.agentId"])
    assert is_secret_path("custom.block.inner", ["custom.block"])
    assert not is_secret_path("custom.other", ["custom.block"])


def test_find_secret_literals_flags_literals_not_placeholders() -> None:
    values: dict[str, Any] = {
        "agent": {"enrollToken": CANARY, "agentId": "org:env", "cloudEndpoint": "wss://x"},
        "greptime": {"password": ""},
        "cloudVendorCredentials": {"accessKey": "dummy", "secretKey": "<set me>"},
        "db": {"password": "${DB_PASSWORD}", "passwordEnabled": True, "maxTokens": 4096},
        "custom": {"block": {"inner": 12345}},
        "notes": ["ghp_" + "x" * 36, "plain"],
        "controller": {"admissionWebhooks": {"secretName": "tensor-fusion-webhook-secret"}},
    }
    found = find_secret_literals(values, ["custom.block"])
    assert found == ["agent.enrollToken", "custom.block.inner", "notes[0]"]


def test_real_chart_defaults_hold_no_secret_literal(tensor_fusion: Path) -> None:
    """The chart's own defaults (dummy keys, empty token) must not trip the check."""
    values = YAML(typ="safe").load((tensor_fusion / "chart-1.8.7/values.yaml").read_text())
    assert find_secret_literals(values) == []
    # chart 1.8.0 shipped sample agent credentials as defaults: copying them in is flagged
    old = YAML(typ="safe").load((tensor_fusion / "chart-1.8.0/values.yaml").read_text())
    assert find_secret_literals(old) == ["agent.enrollToken"]


def test_mask_hides_every_secret_and_keeps_the_rest() -> None:
    values = {
        "agent": {"enrollToken": CANARY, "agentId": "org:env"},
        "greptime": {"password": "", "host": "h"},
        "extra": {"apiKey": CANARY, "nested": [{"token": CANARY}]},
        "team": {"value": CANARY},
    }
    masked = mask(values, ["team.value"])
    assert CANARY not in repr(masked)
    assert masked["agent"] == {"enrollToken": MASK, "agentId": "org:env"}
    assert masked["greptime"] == {"password": "", "host": "h"}  # empty stays visible as empty
    assert masked["extra"]["nested"][0]["token"] == MASK
    assert masked["team"]["value"] == MASK
    assert values["agent"]["enrollToken"] == CANARY  # the input is not modified


def test_merge_secrets_sets_paths_and_creates_missing_parents() -> None:
    values = {"agent": {"enrollToken": "", "agentId": "org"}, "list": [{"a": 1}]}
    merged = merge_secrets(
        values, {"agent.enrollToken": CANARY, "greptime.password": "pw", "list[0].b": "x"}
    )
    assert merged["agent"] == {"enrollToken": CANARY, "agentId": "org"}
    assert merged["greptime"] == {"password": "pw"}
    assert merged["list"] == [{"a": 1, "b": "x"}]
    assert values["agent"]["enrollToken"] == ""  # a copy: the desired state stays secret-free


def test_merge_secrets_refuses_a_path_through_a_list_end_without_the_secret() -> None:
    with pytest.raises(ValueError) as info:
        merge_secrets({"list": []}, {"list[3].token": CANARY})
    assert CANARY not in str(info.value)


@pytest.mark.parametrize(
    ("path", "parts"),
    [
        ("a", ("a",)),
        ("a.b.c", ("a", "b", "c")),
        ("a[0].b", ("a", 0, "b")),
        ('a["nvidia.com/gpu.present"].x', ("a", "nvidia.com/gpu.present", "x")),
    ],
)
def test_split_path(path: str, parts: tuple[str | int, ...]) -> None:
    assert split_path(path) == parts
    assert join_path(parts) == path


@pytest.mark.parametrize("bad", ["", ".a", "a..b", "a[x]", "a]"])
def test_split_path_refuses_malformed(bad: str) -> None:
    with pytest.raises(ValueError):
        split_path(bad)


keys = st.text(min_size=1, max_size=12)
parts_strategy = st.lists(st.one_of(keys, st.integers(0, 50)), min_size=1, max_size=5).filter(
    lambda ps: isinstance(ps[0], str)
)


@given(parts_strategy)
def test_join_then_split_is_identity(parts: list[str | int]) -> None:
    assert split_path(join_path(parts)) == tuple(parts)


values_strategy = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=8)),
    lambda children: st.one_of(
        st.lists(children, max_size=3), st.dictionaries(st.text(max_size=6), children, max_size=3)
    ),
    max_leaves=12,
)


@given(st.dictionaries(st.text(max_size=6), values_strategy, max_size=4))
def test_masked_values_contain_no_secret_literal(values: dict[str, Any]) -> None:
    assert find_secret_literals(mask(values)) == []


def test_builtin_paths_are_documented() -> None:
    doc = (Path(__file__).resolve().parents[2] / "docs" / "fleet-repo.md").read_text()
    for path in secrets.BUILTIN_SECRET_PATHS:
        assert f"`{path}`" in doc
