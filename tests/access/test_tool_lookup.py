"""helm and kubectl: explicit settings, then the pinned ones on request, then PATH; never a
download the user did not ask for; helm older than 3 refused; versions reported."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gitopsbot import app
from gitopsbot.adapters import tools
from gitopsbot.core.records import tool_record
from gitopsbot.errors import ConfigError


def _script(path: Path, answer: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/bin/sh\necho '{answer}'\n")
    path.chmod(0o755)
    return path


@pytest.fixture
def bin_dir(tmp_path: Path) -> Path:
    d = tmp_path / "bin"
    _script(d / "helm", "v3.17.2+gabc")
    _script(d / "kubectl", '{"clientVersion": {"gitVersion": "v1.31.0"}}')
    return d


def test_path_is_the_fallback_and_nothing_is_downloaded(bin_dir: Path, tmp_path: Path) -> None:
    found = tools.resolve(cache=tmp_path / "empty-cache", search_path=str(bin_dir))
    assert found.helm == bin_dir / "helm" and found.kubectl == bin_dir / "kubectl"
    assert found.versions() == {"helm": "v3.17.2", "kubectl": "v1.31.0"}
    assert found.helm_major == 3
    assert not (tmp_path / "empty-cache").exists()  # no download happened


def test_explicit_beats_environment_beats_path(bin_dir: Path, tmp_path: Path) -> None:
    flag = _script(tmp_path / "flag" / "helm", "v4.0.1+g1")
    env = _script(tmp_path / "env" / "helm", "v3.1.0+g1")
    both = tools.resolve(
        helm=str(flag), helm_env=str(env), cache=tmp_path, search_path=str(bin_dir)
    )
    assert both.helm == flag and both.helm_version == "v4.0.1"
    assert tools.resolve(helm_env=str(env), cache=tmp_path, search_path=str(bin_dir)).helm == env


def test_nothing_found_says_where_it_looked_and_how_to_fix_it(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        tools.resolve(cache=tmp_path, search_path=str(tmp_path / "nothing"))
    message = str(caught.value)
    assert message.startswith("helm not found: no --helm, no GITOPSBOT_HELM, and not on PATH")
    assert str(tmp_path / "nothing") in message
    assert "--download-binaries" in message and "GITOPSBOT_HELM" in message


def test_an_explicit_path_that_is_not_executable_is_named(tmp_path: Path, bin_dir: Path) -> None:
    with pytest.raises(ConfigError, match=r"^--kubectl /nope/kubectl: no executable file there"):
        tools.resolve(kubectl="/nope/kubectl", cache=tmp_path, search_path=str(bin_dir))


def test_helm_2_is_refused(tmp_path: Path, bin_dir: Path) -> None:
    old = _script(tmp_path / "old" / "helm", "Client: v2.17.0+ga690bad")
    with pytest.raises(ConfigError) as caught:
        tools.resolve(helm=str(old), cache=tmp_path, search_path=str(bin_dir))
    assert "is helm v2.17.0: gitopsbot needs helm 3 or helm 4" in str(caught.value)


def test_the_pinned_binaries_only_when_asked(binaries: dict[str, Path], bin_dir: Path) -> None:
    from gitopsbot import settings

    cache = settings.cache_dir()  # where the session's `binaries` fixture put them
    found = tools.resolve(download=True, cache=cache, search_path=str(bin_dir))
    assert found.helm == binaries["helm4"] and found.kubectl == binaries["kubectl"]
    assert found.versions() == {"helm": "v4.1.4", "kubectl": "v1.33.9"}


def test_real_helm_3_and_4_report_their_versions(binaries: dict[str, Path], tmp_path: Path) -> None:
    env = {"PATH": os.environ.get("PATH", "")}
    assert tools.helm_version_of(binaries["helm3"], env) == "v3.18.0"
    assert tools.helm_version_of(binaries["helm4"], env) == "v4.1.4"
    assert tools.kubectl_version_of(binaries["kubectl"], env) == "v1.33.9"


def test_run_options_reach_the_lookup(
    bin_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(bin_dir))
    monkeypatch.setenv("GITOPSBOT_KUBECTL", str(_script(tmp_path / "k" / "kubectl", "v1.30.1")))
    found = app.resolve_tools(app.RunOptions(fleet_url="x", cache=tmp_path / "c"))
    assert found.helm == bin_dir / "helm" and found.kubectl_version == "v1.30.1"


def test_the_record_round_trips() -> None:
    record = tool_record.ToolRecord("v4.1.4", "v1.33.9", "/usr/local/bin/helm", '/a "b"')
    assert tool_record.loads(tool_record.dumps(record)) == record
    assert record.describe() == "tools: helm v4.1.4, kubectl v1.33.9"
