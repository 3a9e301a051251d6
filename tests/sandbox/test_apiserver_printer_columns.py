"""``kubectl get`` on custom resources shows the CRD's additionalPrinterColumns with their
values (server-side Table), through real kubectl 1.33: the example chart's CRDs, the real
TensorFusion CRDs from ../shared, and a CRD using the rest of the "simple JSONPath" subset
(bracketed keys, escaped dots, typed cells, wide-only columns)."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gitopsbot.sandbox.apiserver import ApiServer
from gitopsbot.sandbox.apiserver.tables import json_path

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE_CRDS = ROOT / "examples" / "charts" / "tensor-fusion-1.8.7" / "crds"
TF = "tensor-fusion.ai/v1"

Run = Callable[..., subprocess.CompletedProcess[str]]  # the `run` fixture (conftest.py)


def rows(out: str) -> list[dict[str, str]]:
    """kubectl's aligned table as dicts, cut at the header's column starts."""
    lines = out.splitlines()
    header = lines[0]
    starts = [0] + [
        i for i in range(2, len(header)) if header[i] != " " and header[i - 2 : i] == "  "
    ]
    bounds = list(zip(starts, [*starts[1:], None], strict=True))
    names = [header[a:b].strip() for a, b in bounds]
    return [
        {n: line[a:b].strip() for n, (a, b) in zip(names, bounds, strict=True)}
        for line in lines[1:]
    ]


POOL_SPEC = {
    "nodeManagerConfig": {
        "provisioningMode": "AutoSelect",
        "nodePoolRollingUpdatePolicy": {"autoUpdateHypervisor": True, "batchPercentage": 10},
    }
}


def _apply(run: Run, tmp_path: Path, obj: dict[str, Any]) -> None:
    path = tmp_path / f"{obj['metadata']['name']}.json"
    path.write_text(json.dumps(obj))
    run("kubectl", "apply", "--server-side", "--validate=false", "-f", str(path))


def test_example_chart_gpupool_columns(apiserver: ApiServer, run: Run, tmp_path: Path) -> None:
    run("kubectl", "apply", "--server-side", "-f", str(EXAMPLE_CRDS))
    _apply(
        run,
        tmp_path,
        {"apiVersion": TF, "kind": "GPUPool", "metadata": {"name": "tf-a"}, "spec": POOL_SPEC},
    )
    apiserver.store.patch_merge(
        TF,
        "GPUPool",
        None,
        "tf-a",
        {
            "status": {
                "phase": "Updating",
                "totalNodes": 4,
                "componentStatus": {"hypervisorUpdateProgress": 50},
            }
        },
        subresource="status",
    )
    [row] = rows(run("kubectl", "get", "gpupools").stdout)
    assert row["NAME"] == "tf-a"
    assert (row["PHASE"], row["TOTAL NODES"], row["HYPERVISOR PROGRESS"]) == ("Updating", "4", "50")
    assert row["AGE"]


def test_real_gpupool_columns(
    apiserver: ApiServer, run: Run, tmp_path: Path, tensor_fusion: Path
) -> None:
    crds = tensor_fusion / "chart-1.8.7" / "crds"
    if not crds.is_dir():
        pytest.skip(f"{crds} is absent: real CRDs not available here")
    run("kubectl", "apply", "--server-side", "-f", str(crds))
    _apply(
        run,
        tmp_path,
        {"apiVersion": TF, "kind": "GPUPool", "metadata": {"name": "tf-a"}, "spec": POOL_SPEC},
    )
    apiserver.store.patch_merge(
        TF,
        "GPUPool",
        None,
        "tf-a",
        {"status": {"phase": "Running", "totalNodes": 3, "totalGPUs": 24, "totalTFlops": "100"}},
        subresource="status",
    )
    [row] = rows(run("kubectl", "get", "gpupools").stdout)
    assert row["PHASE"] == "Running" and row["TOTAL NODES"] == "3"
    assert row["TOTAL GPU"] == "24" and row["TOTAL TFLOPS"] == "100"
    assert row["MODE"] == ""  # unset: an empty cell, as the real server prints <none> as ""


GADGET_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "gadgets.example.com"},
    "spec": {
        "group": "example.com",
        "scope": "Namespaced",
        "names": {"kind": "Gadget", "plural": "gadgets", "singular": "gadget"},
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "x-kubernetes-preserve-unknown-fields": True,
                    }
                },
                "additionalPrinterColumns": [
                    {"name": "VRAM", "type": "string", "jsonPath": '.spec.used["requests.vram"]'},
                    {
                        "name": "App",
                        "type": "string",
                        "jsonPath": ".metadata.labels.app\\.kubernetes\\.io/name",
                    },
                    {"name": "Count", "type": "integer", "jsonPath": ".spec.count"},
                    {"name": "On", "type": "boolean", "jsonPath": ".spec.on"},
                    {"name": "First", "type": "string", "jsonPath": ".spec.items[*].name"},
                    {"name": "Detail", "type": "string", "jsonPath": ".spec.detail", "priority": 1},
                ],
            }
        ],
    },
}


def test_jsonpath_subset_and_types_through_kubectl(
    apiserver: ApiServer, run: Run, tmp_path: Path
) -> None:
    _apply(run, tmp_path, GADGET_CRD)
    run(
        "kubectl", "wait", "--for=condition=Established", "crd/gadgets.example.com", "--timeout=10s"
    )
    _apply(
        run,
        tmp_path,
        {
            "apiVersion": "example.com/v1",
            "kind": "Gadget",
            "metadata": {
                "name": "g",
                "namespace": "default",
                "labels": {"app.kubernetes.io/name": "tf"},
            },
            "spec": {
                "used": {"requests.vram": "8Gi"},
                "count": "7",
                "on": True,
                "items": [{"name": "one"}, {"name": "two"}],
                "detail": "wide-only",
            },
        },
    )
    [row] = rows(run("kubectl", "get", "gadgets").stdout)
    assert row == {**row, "VRAM": "8Gi", "APP": "tf", "COUNT": "7", "ON": "true", "FIRST": "one"}
    assert "DETAIL" not in row
    [wide] = rows(run("kubectl", "get", "gadgets", "-o", "wide").stdout)
    assert wide["DETAIL"] == "wide-only"


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ('.a["b.c"]', 1),
        (".a['b.c']", 1),
        (".l.x\\.y", 2),
        (".items[1].n", "two"),
        (".items[*].n", "one"),
        ('.conds[?(@.type=="Ready")].status', "True"),
        (".missing.key", None),
        (".items[5]", None),
    ],
)
def test_json_path_subset(path: str, expected: object) -> None:
    obj = {
        "a": {"b.c": 1},
        "l": {"x.y": 2},
        "items": [{"n": "one"}, {"n": "two"}],
        "conds": [{"type": "Other", "status": "False"}, {"type": "Ready", "status": "True"}],
    }
    assert json_path(obj, path) == expected
