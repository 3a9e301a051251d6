"""The post-renderer's rewrite (F1, R11, R21): pure text in, text out; and the CLI around it.

Covers: every pool's switches closed and batch settings from Git; pools absent from Git get
closed switches only; other documents kept byte for byte; a missing policy block created;
Go duration formatting; the policy document round trip and its located errors; the
``gitopsbot post-render`` command on stdin/stdout; a sample render's output byte for byte
as before the post-renderer's start work (#13), and the policy values read without
``core.fleet.model``.
"""

from __future__ import annotations

import difflib
import subprocess
import sys
from pathlib import Path

import pytest
from ruamel.yaml import YAML
from ruamel.yaml.util import load_yaml_guess_indent

from gitopsbot.core.charts.postrender import (
    PostRenderError,
    _guess_indent,
    decode_policy,
    decode_policy_document,
    encode_policy,
    go_duration,
    rewrite_manifests,
)
from gitopsbot.core.fleet.model import MaintenanceWindow, PoolPolicy, RolloutPolicy

CONFIGMAP = """\
# Source: tensor-fusion/templates/config.yaml
apiVersion: v1
kind: ConfigMap
metadata:
  name: tf-config
data:
  # keeps quoting and comments: a TensorFusionCluster is mentioned but this is no TFC
  note: 'kind: TensorFusionCluster'
  number: "0010"
"""

TFC = """\
# Source: tensor-fusion/templates/tensorfusioncluster.yaml
apiVersion: tensor-fusion.ai/v1
kind: TensorFusionCluster
metadata:
  name: tensor-fusion
spec:
  gpuPools:
  - name: shared
    isDefault: true
    specTemplate:
      nodeManagerConfig:
        defaultVendor: NVIDIA
        nodePoolRollingUpdatePolicy:
          autoUpdateHypervisor: true
          batchInterval: 1s
          batchPercentage: 20
          maxDuration: 10m
          maintenanceWindow:
            includes:
            - 2 2 * * *
  - name: training
    specTemplate:
      capacityConfig: {}
  - name: unlisted
    specTemplate:
      nodeManagerConfig:
        nodePoolRollingUpdatePolicy:
          autoUpdateHypervisor: true
          batchPercentage: 20
"""

STREAM = f"---\n{CONFIGMAP}---\n{TFC}"

POLICY = RolloutPolicy(
    pools=(
        PoolPolicy(
            name="shared",
            batch_percentage=10,
            batch_interval_seconds=90,
            max_duration_seconds=7200,
            maintenance_window=MaintenanceWindow("0 3 * * 6", 4 * 3600, "Europe/Berlin"),
        ),
        PoolPolicy(name="training", batch_percentage=50, batch_interval_seconds=30),
        PoolPolicy(name="ghost"),
    )
)


def _load_all(text: str) -> list[dict]:  # type: ignore[type-arg]
    return [d for d in YAML(typ="safe").load_all(text) if d is not None]


def _policies(text: str) -> dict[str, dict]:  # type: ignore[type-arg]
    tfc = next(d for d in _load_all(text) if d["kind"] == "TensorFusionCluster")
    return {
        p["name"]: p["specTemplate"]["nodeManagerConfig"]["nodePoolRollingUpdatePolicy"]
        for p in tfc["spec"]["gpuPools"]
    }


def test_every_switch_is_closed_and_batches_come_from_git() -> None:
    result = rewrite_manifests(STREAM, POLICY)
    policies = _policies(result.text)
    assert policies["shared"] == {
        "autoUpdateHypervisor": False,
        "autoUpdateWorker": False,
        "autoUpdateClient": False,
        "batchPercentage": 10,
        "batchInterval": "1m30s",
        "maxDuration": "2h",
        "maintenanceWindow": {"includes": ["0 3 * * 6"]},
    }
    # A pool without a policy block gets one (v1.x controllers panic on a nil policy).
    assert policies["training"] == {
        "autoUpdateHypervisor": False,
        "autoUpdateWorker": False,
        "autoUpdateClient": False,
        "batchPercentage": 50,
        "batchInterval": "30s",
    }
    assert result.rewritten == (("tensor-fusion", "shared"), ("tensor-fusion", "training"))


def test_pool_without_git_policy_gets_closed_switches_and_keeps_chart_batches() -> None:
    result = rewrite_manifests(STREAM, POLICY)
    assert _policies(result.text)["unlisted"] == {
        "autoUpdateHypervisor": False,
        "autoUpdateWorker": False,
        "autoUpdateClient": False,
        "batchPercentage": 20,
    }
    assert result.unmatched_pools == ("unlisted",)
    assert result.missing_pools == ("ghost",)


def test_other_documents_are_kept_byte_for_byte() -> None:
    result = rewrite_manifests(STREAM, POLICY)
    assert result.text.startswith(f"---\n{CONFIGMAP}---\n# Source: tensor-fusion/templates/")
    assert "note: 'kind: TensorFusionCluster'" in result.text


def test_stream_without_tensorfusioncluster_is_unchanged() -> None:
    text = f"{CONFIGMAP}---\n{CONFIGMAP}"
    result = rewrite_manifests(text, POLICY)
    assert result.text == text
    assert result.rewritten == ()


def test_other_groups_kind_named_tensorfusioncluster_is_not_touched() -> None:
    other = TFC.replace("tensor-fusion.ai/v1", "example.com/v1")
    assert rewrite_manifests(other, POLICY).text == other


def test_invalid_yaml_in_a_tfc_document_names_the_document() -> None:
    broken = f"{CONFIGMAP}---\nkind: TensorFusionCluster\nspec: [unclosed\n"
    with pytest.raises(PostRenderError, match="rendered document 2"):
        rewrite_manifests(broken, POLICY)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0, "0s"), (1, "1s"), (59, "59s"), (60, "1m"), (90, "1m30s"), (3600, "1h"), (3661, "1h1m1s")],
)
def test_go_duration(seconds: int, text: str) -> None:
    assert go_duration(seconds) == text


def test_policy_document_round_trip() -> None:
    decoded = decode_policy(encode_policy(POLICY))
    assert [p.name for p in decoded.pools] == ["shared", "training", "ghost"]
    shared = decoded.pools[0]
    assert (shared.batch_percentage, shared.batch_interval_seconds) == (10, 90)
    assert shared.max_duration_seconds == 7200
    assert shared.maintenance_window == POLICY.pools[0].maintenance_window


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{", "policy.json:1:2: not JSON"),
        ('{"format": "other"}', "policy.json: format"),
        ('{"format": "gitopsbot.post-render/v1", "pools": [{"name": ""}]}', r"pools\[0\].name"),
        (
            '{"format": "gitopsbot.post-render/v1", "pools": '
            '[{"name": "a", "batchPercentage": 0, "batchIntervalSeconds": 1}]}',
            r"pools\[0\].batchPercentage: expected 1..100",
        ),
    ],
)
def test_bad_policy_document_is_located(text: str, message: str) -> None:
    with pytest.raises(PostRenderError, match=message):
        decode_policy(text, source="policy.json")


def test_command_rewrites_stdin_to_stdout(tmp_path: Path) -> None:
    policy = tmp_path / "policy.json"
    policy.write_text(encode_policy(POLICY), encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-m", "gitopsbot", "post-render", "--policy", str(policy)],
        input=STREAM,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert _policies(done.stdout)["shared"]["autoUpdateHypervisor"] is False
    assert "pool 'unlisted' has no Git policy" in done.stderr


def test_command_fails_with_a_located_message(tmp_path: Path) -> None:
    policy = tmp_path / "policy.json"
    policy.write_text("{}", encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-m", "gitopsbot", "post-render", "--policy", str(policy)],
        input=STREAM,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 1
    assert f"{policy}: format" in done.stderr
    assert done.stdout == ""


def test_indented_list_style_is_kept_so_only_policy_lines_change() -> None:
    # Re-indent the whole gpuPools list the way the sandbox chart renders it ("    - ").
    lines = []
    inside = False
    for line in TFC.splitlines():
        if line == "  gpuPools:":
            inside = True
            lines.append(line)
            continue
        lines.append("  " + line if inside else line)
    indented = "\n".join(lines) + "\n"
    result = rewrite_manifests(indented, POLICY)
    changed = [
        line
        for line in difflib.unified_diff(indented.splitlines(), result.text.splitlines(), n=0)
        if line[:1] in "+-" and not line.startswith(("+++", "---"))
    ]
    policy_keys = ("autoUpdate", "batch", "maxDuration", "includes", "- ", "nodeManagerConfig:",
                   "nodePoolRollingUpdatePolicy:")  # fmt: skip
    assert changed, "nothing was rewritten"
    assert all(any(k in line for k in policy_keys) for line in changed), changed


# A multi-document render with comments, quotes, flow style, anchors, both list styles, a
# "--- # comment" separator, an empty document and a last document without a newline.
SAMPLE_RENDER = """\
# a comment before the first separator
--- # Source: tensor-fusion/templates/serviceaccount.yaml
apiVersion: v1
kind: ServiceAccount
metadata:
  name: tf   # trailing comment
---
# Source: tensor-fusion/templates/tensorfusioncluster.yaml
apiVersion: tensor-fusion.ai/v1
kind: TensorFusionCluster
metadata:
  name: tensor-fusion
  annotations:
    note: 'single quoted'   # kept
    long: "a long double-quoted string that is much longer than eighty characters, so it must never be folded by the dumper"
spec:
  # the pools the chart renders
  gpuPools:
    - name: shared   # the default pool
      isDefault: true
      specTemplate:
        capacityConfig: {minResources: {tflops: "0"}}
        nodeManagerConfig:
          defaultVendor: NVIDIA
          nodeSelector: &selector
            nodeSelectorTerms:
              - matchExpressions:
                  - key: gpu
                    operator: In
                    values: ["true"]
          nodePoolRollingUpdatePolicy:
            # chart defaults
            autoUpdateHypervisor: true
            batchInterval: 10m
            batchPercentage: 100
            maxDuration: 10m
            maintenanceWindow:
              includes:
                - 2 2 * * *
    - name: training
      specTemplate:
        nodeManagerConfig:
          nodeSelector: *selector
          nodePoolRollingUpdatePolicy: {autoUpdateHypervisor: true, batchPercentage: 20}
    - name: unlisted
      specTemplate:
        capacityConfig: {}
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: mentions
data:
  text: |
    kind: TensorFusionCluster
    apiVersion: tensor-fusion.ai/v1
---
---
apiVersion: v1
kind: Service
metadata:
  name: last
spec:
  ports:
  - port: 80
---
# Source: other/templates/tensorfusioncluster.yaml
apiVersion: tensor-fusion.ai/v1
kind: TensorFusionCluster
metadata:
  name: second
spec:
  gpuPools:
  - name: training   # dash at the key's indent
    specTemplate:
      nodeManagerConfig:
        nodePoolRollingUpdatePolicy:
          autoUpdateWorker: true
          batchInterval: 1s
          batchPercentage: 5"""  # noqa: E501

# What rewrite_manifests(SAMPLE_RENDER, POLICY) wrote at 785f739, before the post-renderer
# was made to load one parse per document and to reuse its ruamel instances (#13).
SAMPLE_REWRITTEN = """\
# a comment before the first separator
--- # Source: tensor-fusion/templates/serviceaccount.yaml
apiVersion: v1
kind: ServiceAccount
metadata:
  name: tf   # trailing comment
---
# Source: tensor-fusion/templates/tensorfusioncluster.yaml
apiVersion: tensor-fusion.ai/v1
kind: TensorFusionCluster
metadata:
  name: tensor-fusion
  annotations:
    note: 'single quoted'   # kept
    long: "a long double-quoted string that is much longer than eighty characters, so it must never be folded by the dumper"
spec:
  # the pools the chart renders
  gpuPools:
    - name: shared   # the default pool
      isDefault: true
      specTemplate:
        capacityConfig: {minResources: {tflops: "0"}}
        nodeManagerConfig:
          defaultVendor: NVIDIA
          nodeSelector: &selector
            nodeSelectorTerms:
              - matchExpressions:
                  - key: gpu
                    operator: In
                    values: ["true"]
          nodePoolRollingUpdatePolicy:
            # chart defaults
            autoUpdateHypervisor: false
            batchInterval: 1m30s
            batchPercentage: 10
            maxDuration: 2h
            maintenanceWindow:
              includes:
                - 0 3 * * 6
            autoUpdateWorker: false
            autoUpdateClient: false
    - name: training
      specTemplate:
        nodeManagerConfig:
          nodeSelector: *selector
          nodePoolRollingUpdatePolicy: {autoUpdateHypervisor: false, batchPercentage: 50, autoUpdateWorker: false, autoUpdateClient: false, batchInterval: 30s}
    - name: unlisted
      specTemplate:
        capacityConfig: {}
        nodeManagerConfig:
          nodePoolRollingUpdatePolicy:
            autoUpdateHypervisor: false
            autoUpdateWorker: false
            autoUpdateClient: false
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: mentions
data:
  text: |
    kind: TensorFusionCluster
    apiVersion: tensor-fusion.ai/v1
---
---
apiVersion: v1
kind: Service
metadata:
  name: last
spec:
  ports:
  - port: 80
---
# Source: other/templates/tensorfusioncluster.yaml
apiVersion: tensor-fusion.ai/v1
kind: TensorFusionCluster
metadata:
  name: second
spec:
  gpuPools:
  - name: training   # dash at the key's indent
    specTemplate:
      nodeManagerConfig:
        nodePoolRollingUpdatePolicy:
          autoUpdateWorker: false
          batchInterval: 30s
          batchPercentage: 50
          autoUpdateHypervisor: false
          autoUpdateClient: false"""  # noqa: E501


def test_sample_render_output_is_byte_identical_to_before() -> None:
    result = rewrite_manifests(SAMPLE_RENDER, POLICY)
    assert result.text == SAMPLE_REWRITTEN
    assert result.rewritten == (
        ("tensor-fusion", "shared"),
        ("tensor-fusion", "training"),
        ("second", "training"),
    )
    assert result.unmatched_pools == ("unlisted",)
    assert result.missing_pools == ("ghost",)
    # The post-renderer process's policy values (no core.model) rewrite alike.
    document = decode_policy_document(encode_policy(POLICY))
    assert rewrite_manifests(SAMPLE_RENDER, document) == result


def test_policy_document_without_the_model_carries_what_decode_policy_does() -> None:
    text = encode_policy(POLICY)
    document = decode_policy_document(text, source="policy.json")
    decoded = decode_policy(text, source="policy.json")
    assert len(document.pools) == len(decoded.pools) == 3
    for light, full in zip(document.pools, decoded.pools, strict=True):
        assert light.name == full.name
        assert light.batch_percentage == full.batch_percentage
        assert light.batch_interval_seconds == full.batch_interval_seconds
        assert light.max_duration_seconds == full.max_duration_seconds
        window = full.maintenance_window
        assert light.maintenance_window == (
            None if window is None else (window.cron, window.duration_seconds, window.timezone)
        )
    with pytest.raises(PostRenderError, match=r"policy.json: pools\[0\].name"):
        decode_policy_document('{"format": "gitopsbot.post-render/v1", "pools": [{}]}',
                               source="policy.json")  # fmt: skip


@pytest.mark.parametrize(
    "text",
    [
        pytest.param(TFC, id="dash-at-key-indent"),
        pytest.param(SAMPLE_RENDER.split("---\n")[1], id="indented-dashes"),
        pytest.param(CONFIGMAP, id="no-list"),
        pytest.param("a:\n  -   # comment\n    b\n  - c\n", id="comment-after-dash"),
        pytest.param("a:\n    b: 1\n", id="mapping-indent-only"),
    ],
)
def test_indent_guess_matches_ruamels_without_a_second_parse(text: str) -> None:
    _, indent, dash = load_yaml_guess_indent(text)
    assert _guess_indent(text) == (indent, dash)
