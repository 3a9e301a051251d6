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
    assert 'python -m gitopsbot.adapters.binaries "$HELM" kubectl' in TEXT
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
    for pin in (PINS["helm4"], PINS["helm3"], PINS["kubectl"]):
        assert pin.sha256 in doc and pin.version in doc
    assert "--build-arg HELM=helm3" in doc and "cluster-access.md" in doc
    assert "HELM_SHA256" not in doc


def test_helm_3_or_4_is_a_build_argument_of_pinned_tools() -> None:
    assert _arg("HELM") == "helm4"
    tools = TEXT[TEXT.index("AS tools") : TEXT.index("AS build")]
    assert re.search(r"^ARG HELM=helm4$", tools, re.M)  # declared in the stage that uses it
    choices = re.search(r'case "\$HELM" in ([\w|]+)\)', tools)
    assert choices is not None and set(choices.group(1).split("|")) == {"helm3", "helm4"}
    assert {"helm3", "helm4"} <= set(PINS)  # each choice is a pinned, verified binary
    assert 'install -m 0755 "$(sed -n "s/^$HELM: //p" /tmp/paths)" /usr/local/bin/helm' in tools


def test_the_image_needs_no_download_at_run_time() -> None:
    # helm and kubectl sit on PATH in the runtime image; `run` finds them there and never
    # downloads (only `--download-binaries` would, and the image's command does not pass it).
    runtime = TEXT[TEXT.rindex("FROM ") :]
    assert "COPY --from=tools /usr/local/bin/helm /usr/local/bin/kubectl /usr/local/bin/" in runtime
    assert "--download-binaries" not in runtime
    assert 'CMD ["run"]' in runtime
