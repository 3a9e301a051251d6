"""The Containerfile cannot be built here (no container engine): check its shape instead."""

from __future__ import annotations

import re
from pathlib import Path

from gitopsbot.adapters.binaries import PINS

ROOT = Path(__file__).resolve().parents[2]
TEXT = (ROOT / "Containerfile").read_text()


def _arg(name: str) -> str | None:
    m = re.search(rf"^ARG {name}(?:=(\S+))?$", TEXT, re.M)
    assert m is not None, f"ARG {name} missing"
    return m.group(1)


def test_runs_as_a_non_root_user() -> None:
    users = re.findall(r"^USER (\S+)$", TEXT, re.M)
    assert users and users[-1].split(":")[0] not in {"0", "root"}


def test_digests_are_required_and_checked() -> None:
    assert _arg("HELM_SHA256") is None
    assert _arg("KUBECTL_SHA256") is None
    assert 'echo "${HELM_SHA256}  /tmp/helm.tar.gz" | sha256sum -c -' in TEXT
    assert 'echo "${KUBECTL_SHA256}  /tmp/kubectl" | sha256sum -c -' in TEXT
    # the check comes before the binary is installed
    assert TEXT.index("sha256sum -c") < TEXT.index("install -m 0755")


def test_versions_match_the_binaries_the_tests_use() -> None:
    assert _arg("HELM_VERSION") == PINS["helm4"].version
    assert _arg("KUBECTL_VERSION") == PINS["kubectl"].version


def test_base_image_is_python_311_slim() -> None:
    assert _arg("PYTHON_IMAGE") == "python:3.11-slim"


def test_documented() -> None:
    doc = (ROOT / "docs" / "containerfile.md").read_text()
    for arg in ("HELM_SHA256", "KUBECTL_SHA256", "HELM_VERSION", "KUBECTL_VERSION"):
        assert f"`{arg}`" in doc
