"""Whatever the text, loading either succeeds or raises FleetError with located problems:
no other exception escapes (Hypothesis over junk and over mutated example files)."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gitopsbot.core.fleet.assembly import parse_cluster
from gitopsbot.core.fleet.layout import CLUSTER_FILES
from gitopsbot.core.fleet.settings_file import parse_settings
from gitopsbot.errors import FleetError

RELEASE = """chart:
  repository: https://download.tensor-fusion.ai
  name: tensor-fusion
  version: 1.8.7
release:
  name: tensor-fusion-sys
  namespace: tensor-fusion-sys
environment: staging
"""

yaml_ish = st.text(
    alphabet=st.sampled_from(list("abcdefgh:-[]{}#&*!|>'\"\n\t ,.0123456789?%@`")), max_size=80
)
scalars = st.one_of(
    st.sampled_from(["", "1", "-1", "101", "true", "null", "1h", "x", "[]", "{}", "'0 2 * * *'"]),
    st.text(max_size=8),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from(CLUSTER_FILES), text=yaml_ish)
def test_junk_never_escapes_as_another_exception(name: str, text: str) -> None:
    files = {"release.yaml": RELEASE, "values.yaml": "{}\n", name: text}
    try:
        parse_cluster("c", files)
    except FleetError as exc:
        assert exc.problems
        assert all(p.file.startswith("clusters/c/") for p in exc.problems)


ROLLOUT_KEYS = [
    "batchPercentage",
    "batchInterval",
    "maxDuration",
    "stallTimeout",
    "nodes",
    "phases",
    "autoUpdateWorker",
    "canaryBatchPercentage",
    "maintenanceWindow",
]


@settings(max_examples=150, deadline=None)
@given(key=st.sampled_from(ROLLOUT_KEYS), value=scalars)
def test_any_scalar_in_a_pool_is_accepted_or_located(key: str, value: str) -> None:
    rollout = f"pools:\n  gpu:\n    {key}: {value}\n"
    try:
        parse_cluster("c", {"release.yaml": RELEASE, "values.yaml": "", "rollout.yaml": rollout})
    except FleetError as exc:
        last = len(rollout.splitlines()) + 1  # YAML also breaks lines at \r; end of stream
        assert all(0 <= p.line <= last for p in exc.problems), exc


@settings(max_examples=100, deadline=None)
@given(text=yaml_ish)
def test_settings_junk(text: str) -> None:
    try:
        parse_settings(text)
    except FleetError as exc:
        assert all(p.file == "gitopsbot.yaml" for p in exc.problems)
