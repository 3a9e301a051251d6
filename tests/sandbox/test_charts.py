"""The sandbox test charts (examples/charts): lint, render, the packaged repo in sync, served.

Aspects: every version lints and renders with its default values under real helm 4; the TFC
carries the F1 rolling policy hard-coded; only the controller image follows appVersion (F2);
the versions differ where the docs say (1.x app, new CRD field, new hypervisor image); the
committed archives and index match the directories; the chart repository serves them to helm.
"""

from __future__ import annotations

import hashlib
import socket
import subprocess
import tarfile
from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML

from gitopsbot.sandbox.chartrepo import ChartRepo, ChartRepoError, rewrite_index

ROOT = Path(__file__).resolve().parents[2]
CHARTS = ROOT / "examples" / "charts"
REPO = CHARTS / "repo"
VERSIONS = sorted(p.name.removeprefix("tensor-fusion-") for p in CHARTS.glob("tensor-fusion-*"))


def _load_all(text: str) -> list[dict[str, Any]]:
    return [d for d in YAML(typ="safe").load_all(text) if d]


def _template(helm: Path, chart: Path, *args: str) -> list[dict[str, Any]]:
    out = subprocess.run(
        [str(helm), "template", "tf", str(chart), "--namespace", "tf-sys", *args],
        check=True,
        capture_output=True,
        text=True,
    )
    return _load_all(out.stdout)


def _one(docs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    found = [d for d in docs if d["kind"] == kind]
    assert len(found) == 1, f"{kind}: {len(found)} rendered"
    return found[0]


def test_at_least_three_versions() -> None:
    assert len(VERSIONS) >= 3, VERSIONS


@pytest.mark.parametrize("version", VERSIONS)
def test_lints(binaries: dict[str, Path], version: str) -> None:
    proc = subprocess.run(
        [str(binaries["helm4"]), "lint", str(CHARTS / f"tensor-fusion-{version}")],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("version", VERSIONS)
def test_renders_shape_of_real_chart(binaries: dict[str, Path], version: str) -> None:
    chart = CHARTS / f"tensor-fusion-{version}"
    meta = YAML(typ="safe").load((chart / "Chart.yaml").read_text())
    values = YAML(typ="safe").load((chart / "values.yaml").read_text())
    docs = _template(binaries["helm4"], chart)

    deploy = _one(docs, "Deployment")
    assert deploy["metadata"]["name"] == "tf-controller"
    assert deploy["spec"]["replicas"] == values["controller"]["replicaCount"]
    image = deploy["spec"]["template"]["spec"]["containers"][0]["image"]
    assert image == f"tensorfusion/tensor-fusion-operator:{meta['appVersion']}"  # F2

    tfc = _one(docs, "TensorFusionCluster")
    assert tfc["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    (pool,) = tfc["spec"]["gpuPools"]
    assert pool["name"] == values["cluster"]["pool"]["name"]
    tmpl = pool["specTemplate"]
    policy = tmpl["nodeManagerConfig"]["nodePoolRollingUpdatePolicy"]
    # F1: hard-coded; F3: worker and client switches never set.
    assert policy == {
        "autoUpdateHypervisor": True,
        "batchInterval": "1s",
        "batchPercentage": 20,
        "maxDuration": "10m",
        "maintenanceWindow": {"includes": ["2 2 * * *"]},
    }
    comp = tmpl["componentConfig"]
    assert comp["hypervisor"]["image"] == values["cluster"]["hypervisorImage"]
    images = values["providerConfigs"]["nvidia"]["images"]
    assert comp["worker"]["image"] == images["remoteWorker"]
    assert comp["client"]["image"] == images["remoteClient"]
    config = _one(docs, "ConfigMap")
    assert set(config["data"]) == {"config.yaml", "scheduler-config.yaml"}


def test_policy_cannot_be_set_from_values(binaries: dict[str, Path]) -> None:
    # F1: no values key reaches the rolling policy.
    chart = CHARTS / f"tensor-fusion-{VERSIONS[-1]}"
    docs = _template(
        binaries["helm4"],
        chart,
        "--set",
        "cluster.pool.nodePoolRollingUpdatePolicy.batchPercentage=50",
    )
    tfc = _one(docs, "TensorFusionCluster")
    policy = tfc["spec"]["gpuPools"][0]["specTemplate"]["nodeManagerConfig"]
    assert policy["nodePoolRollingUpdatePolicy"]["batchPercentage"] == 20


def test_extra_pools_and_controller_tag_override(binaries: dict[str, Path]) -> None:
    chart = CHARTS / f"tensor-fusion-{VERSIONS[-1]}"
    docs = _template(
        binaries["helm4"],
        chart,
        "--set",
        "cluster.extraPools[0].name=train",
        "--set",
        "controller.image.tag=9.9.9",
    )
    tfc = _one(docs, "TensorFusionCluster")
    pools = tfc["spec"]["gpuPools"]
    assert [p["name"] for p in pools] == ["shared", "train"]
    assert [p["isDefault"] for p in pools] == [True, False]
    assert pools[1]["specTemplate"]["capacityConfig"] == pools[0]["specTemplate"]["capacityConfig"]
    image = _one(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]["image"]
    assert image.endswith(":9.9.9")


def test_enroll_token_only_in_secret(binaries: dict[str, Path]) -> None:
    canary = "canary-token-5d1e"
    chart = CHARTS / f"tensor-fusion-{VERSIONS[-1]}"
    docs = _template(
        binaries["helm4"],
        chart,
        "--set",
        f"agent.enrollToken={canary}",
        "--set",
        "agent.agentId=a1",
    )
    secret = _one(docs, "Secret")
    assert secret["stringData"]["enrollToken"] == canary
    deploy = _one(docs, "Deployment")
    assert canary not in str(deploy)
    agent = deploy["spec"]["template"]["spec"]["containers"][1]
    (token_env,) = [e for e in agent["env"] if e["name"] == "ENROLL_TOKEN"]
    assert token_env["valueFrom"]["secretKeyRef"]["name"] == secret["metadata"]["name"]


def _values(version: str) -> dict[str, Any]:
    data: dict[str, Any] = YAML(typ="safe").load(
        (CHARTS / f"tensor-fusion-{version}" / "values.yaml").read_text()
    )
    return data


def _crd_text(version: str) -> str:
    crds = sorted((CHARTS / f"tensor-fusion-{version}" / "crds").glob("*.yaml"))
    return "".join(p.read_text() for p in crds)


def test_versions_differ_where_documented() -> None:
    apps = {
        v: YAML(typ="safe").load((CHARTS / f"tensor-fusion-{v}" / "Chart.yaml").read_text())[
            "appVersion"
        ]
        for v in VERSIONS
    }
    assert any(a.startswith("1.") for a in apps.values()), apps  # a 1.x app
    assert any(a.startswith("2.") for a in apps.values()), apps
    hyper = {v: _values(v)["cluster"]["hypervisorImage"] for v in VERSIONS}
    assert hyper[VERSIONS[-1]] != hyper[VERSIONS[-2]]  # the newest moves the hypervisor
    assert "isolationModeRules" in _crd_text(VERSIONS[-1])  # and adds a CRD field
    assert "isolationModeRules" not in _crd_text(VERSIONS[-2])


# --- the committed repository matches the directories -------------------------------------


def _index() -> dict[str, Any]:
    data: dict[str, Any] = YAML(typ="safe").load((REPO / "index.yaml").read_text())
    return data


def test_index_lists_every_directory_with_matching_digest() -> None:
    entries = _index()["entries"]["tensor-fusion"]
    assert sorted(e["version"] for e in entries) == VERSIONS
    for entry in entries:
        archive = REPO / entry["urls"][0]
        assert archive.is_file(), archive
        digest = hashlib.sha256(archive.read_bytes()).hexdigest()
        assert entry["digest"] == digest, f"{archive.name}: stale digest; run package.py"


@pytest.mark.parametrize("version", VERSIONS)
def test_archive_matches_directory(version: str) -> None:
    chart = CHARTS / f"tensor-fusion-{version}"
    on_disk = {
        p.relative_to(chart).as_posix(): p.read_bytes() for p in chart.rglob("*") if p.is_file()
    }
    with tarfile.open(REPO / f"tensor-fusion-{version}.tgz") as tar:
        packed = {}
        for member in tar.getmembers():
            if member.isfile():
                f = tar.extractfile(member)
                assert f is not None
                packed[member.name.removeprefix("tensor-fusion/")] = f.read()
    assert sorted(packed) == sorted(on_disk), "file list differs: run examples/charts/package.py"
    for name, data in on_disk.items():
        if name == "Chart.yaml":  # helm package re-serialises Chart.yaml
            assert YAML(typ="safe").load(packed[name]) == YAML(typ="safe").load(data)
        else:
            assert packed[name] == data, f"{name} differs: run examples/charts/package.py"


# --- the chart repository server ----------------------------------------------------------


def test_rewrite_index_points_urls_at_server() -> None:
    text = "apiVersion: v1\nentries:\n  c:\n  - version: 1.0.0\n    urls: [c-1.0.0.tgz, https://x/y/c-1.0.0.tgz]\n"
    doc = YAML(typ="safe").load(rewrite_index(text, "http://127.0.0.1:9/"))
    assert doc["entries"]["c"][0]["urls"] == [
        "http://127.0.0.1:9/c-1.0.0.tgz",
        "http://127.0.0.1:9/c-1.0.0.tgz",
    ]


def test_repo_without_index_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ChartRepoError, match=r"no index\.yaml"):
        ChartRepo(tmp_path)


def test_helm_pulls_and_renders_from_served_repo(binaries: dict[str, Path], tmp_path: Path) -> None:
    helm = str(binaries["helm4"])
    env = {
        "HELM_CACHE_HOME": str(tmp_path / "cache"),
        "HELM_CONFIG_HOME": str(tmp_path / "config"),
        "HELM_DATA_HOME": str(tmp_path / "data"),
        "PATH": "/usr/bin:/bin",
    }
    with ChartRepo(REPO) as repo:
        for version in VERSIONS:
            proc = subprocess.run(
                [
                    helm,
                    "pull",
                    "tensor-fusion",
                    "--repo",
                    repo.url,
                    "--version",
                    version,
                    "-d",
                    str(tmp_path),
                ],
                capture_output=True,
                text=True,
                env=env,
            )
            assert proc.returncode == 0, proc.stderr
            pulled = (tmp_path / f"tensor-fusion-{version}.tgz").read_bytes()
            assert pulled == (REPO / f"tensor-fusion-{version}.tgz").read_bytes()
        proc = subprocess.run(
            [helm, "template", "tf", "tensor-fusion", "--repo", repo.url],
            capture_output=True,
            text=True,
            env=env,
        )
        assert proc.returncode == 0, proc.stderr
        assert f"helm.sh/chart: tensor-fusion-{max(VERSIONS, key=_semver)}" in proc.stdout
        port = repo.port
    # stopped: the port no longer answers
    with socket.socket() as s, pytest.raises(OSError):
        s.connect(("127.0.0.1", port))


def _semver(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in v.split("."))
