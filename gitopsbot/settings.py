"""Process-level settings read from the environment (the one module that reads it).

Fleet-level settings live in the fleet repository (``core.fleet.model.BotSettings``); these are
about the machine the bot runs on.
"""

from __future__ import annotations

import os
from pathlib import Path

from gitopsbot.errors import ConfigError


def cache_dir() -> Path:
    """Where fetched binaries and chart archives are cached.

    ``GITOPSBOT_CACHE`` if set, else ``$XDG_CACHE_HOME/gitopsbot``, else ``~/.cache/gitopsbot``.
    """
    explicit = os.environ.get("GITOPSBOT_CACHE")
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg) if xdg else Path.home() / ".cache"
    return base / "gitopsbot"


def environment_value(name: str) -> str | None:
    """An environment variable, for secret references of source ``env``."""
    return os.environ.get(name)


def chart_paths() -> list[Path]:
    """``GITOPSBOT_CHARTS``: local chart directories/archives to read instead of the network
    (``os.pathsep``-separated), for offline plans. Empty when unset."""
    raw = os.environ.get("GITOPSBOT_CHARTS", "")
    return [Path(p) for p in raw.split(os.pathsep) if p]


def tool_path(tool: str) -> str | None:
    """``GITOPSBOT_HELM`` / ``GITOPSBOT_KUBECTL``: the helm or kubectl binary to use (a path or
    a name looked up on PATH), when ``run --helm``/``--kubectl`` does not name one."""
    return os.environ.get(f"GITOPSBOT_{tool.upper()}") or None


SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"


def service_account_dir() -> Path:
    """Where the pod's ServiceAccount token, ``ca.crt`` and ``namespace`` files are:
    ``GITOPSBOT_SERVICEACCOUNT_DIR`` if set (tests), else Kubernetes' own mount point."""
    return Path(os.environ.get("GITOPSBOT_SERVICEACCOUNT_DIR") or SERVICE_ACCOUNT_DIR)


def in_cluster_service() -> tuple[str, str] | None:
    """``KUBERNETES_SERVICE_HOST`` and ``_PORT`` (set in every pod), or None when either is
    unset or empty."""
    host = os.environ.get("KUBERNETES_SERVICE_HOST", "")
    port = os.environ.get("KUBERNETES_SERVICE_PORT", "")
    return (host, port) if host and port else None


def kubeconfig() -> str:
    """``KUBECONFIG`` as kubectl and helm read it, for ``--kubeconfig`` left out ("" unset).
    A list of files (kubectl merges them) is refused: the bot, helm and kubectl must all
    read one file, the one the error names."""
    value = os.environ.get("KUBECONFIG", "").strip()
    files = [f for f in value.split(os.pathsep) if f]
    if len(files) > 1:
        raise ConfigError(
            f"KUBECONFIG lists {len(files)} files ({value}): the bot reads one; "
            "give it with --kubeconfig"
        )
    return files[0] if files else ""


def pod_name() -> str | None:
    """``POD_NAME`` (the downward API's ``metadata.name`` in the chart): the base of a
    replica's Lease identity. None when unset or empty."""
    return os.environ.get("POD_NAME") or None


def log_format() -> str | None:
    """``GITOPSBOT_LOG_FORMAT``: ``text`` or ``json`` (docs/logging.md), when ``--log-format``
    is not given. None when unset or empty; any other value is the caller's to refuse."""
    return os.environ.get("GITOPSBOT_LOG_FORMAT", "").strip().lower() or None
