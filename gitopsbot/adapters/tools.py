"""Which helm and kubectl the bot runs, and their versions (docs/cluster-access.md).

Each tool is looked up, in this order:

1. explicitly: ``run --helm PATH`` / ``--kubectl PATH``, else ``GITOPSBOT_HELM`` /
   ``GITOPSBOT_KUBECTL`` (a path, or a bare name looked up on PATH);
2. the pinned, verified binaries of ``adapters.binaries`` (helm 4, kubectl), fetched into the
   cache if needed, but only when the user asked for them (``run --download-binaries``);
3. ``PATH`` (``shutil.which``): the image's ``/usr/local/bin/helm`` and ``kubectl``.

Nothing found is a ``ConfigError`` that says where the bot looked and how to fix it. helm is
asked ``helm version`` once: helm 3 and helm 4 are both fine (the user's choice), anything
older is refused. The versions are reported (``ToolSet.versions``, recorded on the state
branch for ``gitopsbot status``).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from gitopsbot.adapters import binaries
from gitopsbot.adapters.tool_env import tool_environment
from gitopsbot.errors import BinaryUnavailable, ConfigError

ToolName = Literal["helm", "kubectl"]
VERSION_TIMEOUT_SECONDS = 30.0
_VERSION = re.compile(r"\bv?(\d+)\.(\d+)\.(\d+)\S*")
MIN_HELM_MAJOR = 3


@dataclass(frozen=True, slots=True)
class ToolSet:
    """The helm and kubectl binaries a bot uses, with what they reported."""

    helm: Path
    kubectl: Path
    helm_version: str  # e.g. "v4.1.4"
    kubectl_version: str  # e.g. "v1.33.9"

    @property
    def helm_major(self) -> int:
        return _major(self.helm_version)

    def versions(self) -> dict[str, str]:
        return {"helm": self.helm_version, "kubectl": self.kubectl_version}

    def paths(self) -> dict[str, str]:
        return {"helmPath": str(self.helm), "kubectlPath": str(self.kubectl)}


def locate(
    tool: ToolName,
    *,
    explicit: str = "",
    from_environment: str | None = None,
    download: bool = False,
    cache: Path,
    search_path: str | None = None,
) -> Path:
    """The binary for ``tool`` (see the module docstring for the order)."""
    if explicit:
        return _named(explicit, f"--{tool} {explicit}", search_path)
    if from_environment:
        return _named(from_environment, f"GITOPSBOT_{tool.upper()}={from_environment}", search_path)
    if download:
        pinned: binaries.Tool = "helm4" if tool == "helm" else "kubectl"
        try:
            return binaries.ensure(pinned, cache)
        except BinaryUnavailable as e:
            raise ConfigError(f"--download-binaries: {tool}: {e}") from None
    found = shutil.which(tool, path=search_path)
    if found:
        return Path(found)
    where = search_path if search_path is not None else os.environ.get("PATH", "")
    raise ConfigError(
        f"{tool} not found: no --{tool}, no GITOPSBOT_{tool.upper()}, and not on PATH "
        f"({where or 'empty'}). Install {tool} on PATH (the gitopsbot image has it in "
        f"/usr/local/bin), point --{tool} PATH or GITOPSBOT_{tool.upper()} at it, or pass "
        "--download-binaries to fetch the pinned, verified helm 4 and kubectl into the cache"
    )


def _named(value: str, label: str, search_path: str | None) -> Path:
    candidate = value if os.sep in value else (shutil.which(value, path=search_path) or value)
    path = Path(candidate).expanduser()
    if not path.is_file() or not os.access(path, os.X_OK):
        raise ConfigError(f"{label}: no executable file there")
    return path


def resolve(
    *,
    helm: str = "",
    kubectl: str = "",
    helm_env: str | None = None,
    kubectl_env: str | None = None,
    download: bool = False,
    cache: Path,
    search_path: str | None = None,
    environ: Mapping[str, str] | None = None,
) -> ToolSet:
    """Both tools, located and asked for their versions (helm older than 3 is refused)."""
    helm_path = locate(
        "helm", explicit=helm, from_environment=helm_env, download=download, cache=cache,
        search_path=search_path,
    )  # fmt: skip
    kubectl_path = locate(
        "kubectl", explicit=kubectl, from_environment=kubectl_env, download=download,
        cache=cache, search_path=search_path,
    )  # fmt: skip
    env = tool_environment(os.environ if environ is None else environ, kubeconfig="", private={})
    helm_version = helm_version_of(helm_path, env)
    if _major(helm_version) < MIN_HELM_MAJOR:
        raise ConfigError(
            f"{helm_path} is helm {helm_version}: gitopsbot needs helm 3 or helm 4 "
            "(give another with --helm PATH or GITOPSBOT_HELM)"
        )
    return ToolSet(helm_path, kubectl_path, helm_version, kubectl_version_of(kubectl_path, env))


def helm_version_of(binary: Path, env: Mapping[str, str]) -> str:
    """``helm version --short`` → "v4.1.4" (helm 2 answers "Client: v2.17.0+g…")."""
    out = _run([str(binary), "version", "--short"], env, what=f"{binary} version")
    found = _VERSION.search(out)
    if found is None:
        raise ConfigError(f"{binary} version: no version in its answer {out[:200]!r}")
    return "v" + ".".join(found.groups())


def kubectl_version_of(binary: Path, env: Mapping[str, str]) -> str:
    """``kubectl version --client -o json`` → its ``clientVersion.gitVersion``."""
    out = _run([str(binary), "version", "--client", "-o", "json"], env, what=f"{binary} version")
    try:
        version = json.loads(out)["clientVersion"]["gitVersion"]
    except (ValueError, KeyError, TypeError):
        found = _VERSION.search(out)
        if found is None:
            raise ConfigError(f"{binary} version: no version in its answer {out[:200]!r}") from None
        version = "v" + ".".join(found.groups())
    return str(version)


def _run(argv: list[str], env: Mapping[str, str], *, what: str) -> str:
    try:
        done = subprocess.run(
            argv, capture_output=True, text=True, env=dict(env), check=False,
            timeout=VERSION_TIMEOUT_SECONDS, stdin=subprocess.DEVNULL,
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired) as e:
        raise ConfigError(f"{what}: cannot run it: {type(e).__name__}: {e}") from None
    if done.returncode != 0:
        tail = (done.stderr.strip() or done.stdout.strip())[-300:]
        raise ConfigError(f"{what}: exit {done.returncode}: {tail}")
    return done.stdout


def _major(version: str) -> int:
    found = _VERSION.search(version)
    return int(found.group(1)) if found else 0
