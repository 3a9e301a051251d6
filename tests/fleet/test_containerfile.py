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


def test_no_build_arguments_are_required() -> None:
    # every ARG has a default (TARGETARCH is set by the builder when used)
    for m in re.finditer(r"^ARG (\w+)(=\S+)?$", TEXT, re.M):
        assert m.group(2), f"ARG {m.group(1)} has no default"


def test_binaries_are_verified_against_the_committed_pins() -> None:
    # the tools stage runs binaries.py, which checks each binary against PINS[...].sha256
    assert "python -m gitopsbot.adapters.binaries helm4 kubectl" in TEXT
    tools = TEXT[TEXT.index("AS tools") : TEXT.index("AS build")]
    assert "install -m 0755" in tools
    assert tools.index("gitopsbot.adapters.binaries") < tools.index("install -m 0755")
    assert "curl" not in tools  # no unverified download path left


def test_the_wheel_build_sees_the_builtin_policies() -> None:
    build = TEXT[TEXT.index("AS build") :]
    assert "COPY policies ./policies" in build
    assert "setup.py" in build


def test_base_image_is_python_311_slim() -> None:
    assert _arg("PYTHON_IMAGE") == "python:3.11-slim"


def test_documented() -> None:
    doc = (ROOT / "docs" / "containerfile.md").read_text()
    for pin in (PINS["helm4"], PINS["kubectl"]):
        assert pin.sha256 in doc and pin.version in doc
    assert "HELM_SHA256" not in doc
