"""Builders for the plan/policy tests: charts in the real one's shape and cluster specs, in code."""

from __future__ import annotations

import io
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gitopsbot.core.charts.chart import Chart, parse_chart_files
from gitopsbot.core.fleet.model import (
    ClusterSpec,
    CredentialsSpec,
    Environment,
    MaintenanceWindow,
    PoolPolicy,
    ReleaseSpec,
    RolloutPolicy,
    SecretRef,
)

ROOT = Path(__file__).resolve().parents[2]
BUILTIN = ROOT / "policies" / "builtin.yaml"


def chart_files(root: Path) -> dict[str, bytes]:
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def small_chart(
    version: str = "1.8.7",
    app_version: str = "2.17.0",
    *,
    values: Mapping[str, Any] | None = None,
    crds: Mapping[str, str] | None = None,
    schema: str | None = None,
) -> Chart:
    """A chart in the real one's shape, built in memory (no ../shared needed)."""
    from ruamel.yaml import YAML

    default_values = values if values is not None else default_chart_values(app_version)
    buf = io.StringIO()
    YAML(typ="safe", pure=True).dump(dict(default_values), buf)
    files: dict[str, bytes] = {
        "Chart.yaml": (
            f"apiVersion: v2\nname: tensor-fusion\nversion: {version}\n"
            f'appVersion: "{app_version}"\n'
        ).encode(),
        "values.yaml": buf.getvalue().encode(),
    }
    if schema is not None:
        files["values.schema.json"] = schema.encode()
    for name, text in (crds if crds is not None else {"gpus.yaml": crd_text()}).items():
        files[f"crds/{name}"] = text.encode()
    return parse_chart_files(files, digest=f"small-{version}")


def default_chart_values(tag: str = "2.15.0") -> dict[str, Any]:
    return {
        "controller": {
            "replicaCount": 1,
            "image": {"repository": "tensorfusion/tensor-fusion-operator", "tag": ""},
        },
        "agent": {"enrollToken": "", "agentId": ""},
        "providerConfigs": {
            "nvidia": {
                "images": {
                    "middleware": "tensorfusion/vgpu-provider-nvidia:1.3.9",
                    "remoteClient": f"tensorfusion/tensor-fusion-client:v{tag}",
                    "remoteWorker": f"tensorfusion/tensor-fusion-worker:v{tag}",
                }
            }
        },
        "cluster": {"hypervisorImage": f"tensorfusion/tensor-fusion-hypervisor:{tag}"},
        "dynamicConfig": {"metricsTTL": "30d"},
        "schedulerConfig": {"kind": "KubeSchedulerConfiguration"},
    }


def crd_text(
    name: str = "gpus.tensor-fusion.ai",
    versions: tuple[tuple[str, bool, bool], ...] = (("v1", True, True),),
    fields: tuple[str, ...] = ("phase", "uuid"),
) -> str:
    lines = [
        "apiVersion: apiextensions.k8s.io/v1",
        "kind: CustomResourceDefinition",
        f"metadata: {{name: {name}}}",
        "spec:",
        "  group: tensor-fusion.ai",
        f"  names: {{kind: {name.split('.')[0].capitalize()}, plural: {name.split('.')[0]}}}",
        "  versions:",
    ]
    for vname, served, storage in versions:
        lines += [
            f"  - name: {vname}",
            f"    served: {str(served).lower()}",
            f"    storage: {str(storage).lower()}",
            "    schema:",
            "      openAPIV3Schema:",
            "        type: object",
            "        properties:",
            "          status:",
            "            type: object",
            "            properties:",
            *(f"              {f}: {{type: string}}" for f in fields),
        ]
    return "\n".join(lines) + "\n"


def pool(name: str = "shared", **kw: Any) -> PoolPolicy:
    return PoolPolicy(name=name, **kw)


def cluster(
    *,
    values: Mapping[str, Any] | None = None,
    version: str = "1.8.7",
    environment: Environment = Environment.STAGING,
    pools: tuple[PoolPolicy, ...] | None = None,
    acks: Mapping[str, str] | None = None,
    secret_paths: tuple[str, ...] = (),
) -> ClusterSpec:
    return ClusterSpec(
        name="c1",
        environment=environment,
        release=ReleaseSpec(
            chart_repo_url="https://charts.example",
            chart_name="tensor-fusion",
            version=version,
            release_name="tensor-fusion-sys",
            namespace="tensor-fusion-sys",
        ),
        values=dict(values) if values is not None else desired_values(),
        rollout=RolloutPolicy(
            pools=pools
            if pools is not None
            else (
                pool(
                    "shared",
                    nodes=10,
                    batch_percentage=20,
                    batch_interval_seconds=30,
                    maintenance_window=MaintenanceWindow("0 2 * * *", 3600),
                ),
            ),
            acknowledgements=dict(acks or {}),
        ),
        credentials=CredentialsSpec(
            secrets=(SecretRef("agent.enrollToken", "env", "TF_TOKEN"),),
            secret_paths=secret_paths,
        ),
        files=("clusters/c1/release.yaml", "clusters/c1/values.yaml"),
    )


def desired_values(**overrides: Any) -> dict[str, Any]:
    v: dict[str, Any] = {
        "controller": {"replicaCount": 2},
        "cluster": {"hypervisorImage": "tensorfusion/tensor-fusion-hypervisor:2.15.0"},
        "dynamicConfig": {"metricsTTL": "30d"},
    }
    v.update(overrides)
    return v
