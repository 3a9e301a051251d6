"""``tools.yaml`` on the state branch: the helm and kubectl the bot runs with.

Written by ``gitopsbot run`` when it starts (a commit only when something changed) and shown
by ``gitopsbot status``; docs/cluster-access.md. Plain ``key: value`` lines, valid YAML::

    helm: v4.1.4
    helmPath: /usr/local/bin/helm
    kubectl: v1.33.9
    kubectlPath: /usr/local/bin/kubectl
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

FILE = "tools.yaml"
_KEYS = ("helm", "helmPath", "kubectl", "kubectlPath")


@dataclass(frozen=True, slots=True)
class ToolRecord:
    helm: str
    kubectl: str
    helm_path: str = ""
    kubectl_path: str = ""

    def describe(self) -> str:
        return f"tools: helm {self.helm or '?'}, kubectl {self.kubectl or '?'}"


def dumps(record: ToolRecord) -> str:
    values = {
        "helm": record.helm,
        "helmPath": record.helm_path,
        "kubectl": record.kubectl,
        "kubectlPath": record.kubectl_path,
    }
    return "".join(f"{k}: {_quote(v)}\n" for k, v in values.items() if v)


def loads(text: str) -> ToolRecord:
    """Lenient: unknown lines are ignored, a missing value is ""."""
    values: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() in _KEYS:
            values[key.strip()] = _unquote(value.strip())
    return of(values)


def of(values: Mapping[str, str]) -> ToolRecord:
    return ToolRecord(
        helm=values.get("helm", ""),
        kubectl=values.get("kubectl", ""),
        helm_path=values.get("helmPath", ""),
        kubectl_path=values.get("kubectlPath", ""),
    )


def _quote(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _unquote(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] == '"':
        return value[1:-1].replace('\\"', '"').replace("\\\\", "\\")
    return value
