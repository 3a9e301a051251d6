"""fleet/canary_smoke_file: canary-smoke.yaml read, and its problems located."""

from __future__ import annotations

from gitopsbot.core.fleet import located_yaml
from gitopsbot.core.fleet.canary_smoke_file import read_canary_smoke
from gitopsbot.core.fleet.fields import FieldReader
from gitopsbot.core.rollouts.canary_smoke import CanarySmoke

F = "clusters/c1/canary-smoke.yaml"

GOOD = """\
timeout: 2m
pools: [training]
manifest:
  apiVersion: v1
  kind: Pod
  metadata:
    name: gpu-smoke
    labels: {app: gpu-smoke}
  spec:
    containers:
      - name: cuda
        image: nvidia/cuda:12.4.1-base-ubuntu22.04
        command: [nvidia-smi]
"""


def _read(text: str) -> tuple[CanarySmoke | None, list[str]]:
    doc = located_yaml.load(text, F, located=True)
    r = FieldReader(F)
    out = read_canary_smoke(r, doc)
    return out, [f"{p.file}:{p.line} {p.field}: {p.message}" for p in r.problems]


def test_good_file() -> None:
    smoke, problems = _read(GOOD)
    assert problems == []
    assert smoke is not None
    assert smoke.timeout_seconds == 120
    assert smoke.pools == ("training",)
    assert smoke.manifest["spec"]["containers"][0]["command"] == ["nvidia-smi"]


def test_defaults_and_empty() -> None:
    smoke, problems = _read(GOOD.replace("timeout: 2m\npools: [training]\n", ""))
    assert problems == [] and smoke is not None
    assert smoke.timeout_seconds == 300 and smoke.pools == ()
    assert _read("") == (None, [])


def test_problems_name_file_line_and_field() -> None:
    _, problems = _read(GOOD.replace("kind: Pod", "kind: Job"))
    assert problems == [
        f"{F}:5 manifest.kind: the GPU canary smoke workload must be a Pod (kind: Pod)"
    ]
    _, problems = _read(GOOD.replace("timeout: 2m", "timeout: 120"))
    assert problems and problems[0].startswith(f"{F}:1 timeout: expected a duration")
    _, problems = _read(GOOD.replace("pools:", "poolz:"))
    assert problems and problems[0].startswith(f"{F}:2 poolz")
    _, problems = _read("timeout: 1m\n")
    assert problems == [f"{F}:1 manifest: required key is missing"]
    _, problems = _read(GOOD.replace("  spec:\n", "  spec:\n    nodeName: n1\n"))
    assert problems == [
        f"{F}:10 manifest.spec.nodeName: set by the bot (a node the canary batch updated)"
    ]
    _, problems = _read(GOOD.split("  spec:")[0] + "  spec: {}\n")
    assert problems and "manifest.spec.containers" in problems[0]
