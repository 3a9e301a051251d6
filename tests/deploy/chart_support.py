"""The gitopsbot chart (deploy/chart) under real helm 3 and 4: render it with values, read
the rendered objects, and run helm against a server with a private HOME."""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "deploy" / "chart"
RULES = ROOT / "deploy" / "rbac" / "rules.yaml"
CHART_RULES = CHART / "files" / "tensorfusion-rules.yaml"
FLEET_URL = "https://git.example.com/acme/gpu-fleet.git"
HELMS = ("helm3", "helm4")


@dataclass(frozen=True)
class Helm:
    """One pinned helm binary with a private HOME (no repository or cache is shared)."""

    binary: Path
    home: Path

    def env(self) -> dict[str, str]:
        home = self.home
        home.mkdir(parents=True, exist_ok=True)
        return {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(home),
            "XDG_CACHE_HOME": str(home / ".cache"),
            "XDG_CONFIG_HOME": str(home / ".config"),
            "XDG_DATA_HOME": str(home / ".local" / "share"),
            "HELM_CACHE_HOME": str(home / ".cache" / "helm"),
            "HELM_CONFIG_HOME": str(home / ".config" / "helm"),
            "HELM_DATA_HOME": str(home / ".local" / "share" / "helm"),
        }

    def run(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.binary), *args],
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def ok(self, *args: str, timeout: float = 120) -> str:
        done = self.run(*args, timeout=timeout)
        assert done.returncode == 0, f"helm {' '.join(args)}: {done.stdout}\n{done.stderr}"
        return done.stdout

    def values_file(self, values: Mapping[str, Any]) -> Path:
        path = self.home / f"values-{os.urandom(4).hex()}.yaml"
        self.home.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(dict(values)))  # JSON is YAML
        return path

    def template(
        self, values: Mapping[str, Any], *, namespace: str = "gitopsbot", release: str = "bot"
    ) -> subprocess.CompletedProcess[str]:
        return self.run(
            "template", release, str(CHART), "-n", namespace, "-f", str(self.values_file(values))
        )

    def render(
        self, values: Mapping[str, Any], *, namespace: str = "gitopsbot", release: str = "bot"
    ) -> Rendered:
        done = self.template(values, namespace=namespace, release=release)
        assert done.returncode == 0, done.stderr
        return Rendered([d for d in yaml.safe_load_all(done.stdout) if d], done.stdout)


@dataclass(frozen=True)
class Rendered:
    """The objects of one `helm template`, and its text."""

    objects: list[dict[str, Any]]
    text: str

    def of_kind(self, kind: str) -> list[dict[str, Any]]:
        return [o for o in self.objects if o["kind"] == kind]

    def one(self, kind: str, name: str | None = None) -> dict[str, Any]:
        found = [o for o in self.of_kind(kind) if name is None or o["metadata"]["name"] == name]
        assert len(found) == 1, f"{kind} {name}: {[o['metadata']['name'] for o in found]}"
        return found[0]

    def deployment(self) -> dict[str, Any]:
        return self.one("Deployment")

    def container(self) -> dict[str, Any]:
        containers: list[dict[str, Any]] = self.deployment()["spec"]["template"]["spec"][
            "containers"
        ]
        assert len(containers) == 1
        return containers[0]

    def env(self) -> dict[str, Any]:
        """Container env by name: the value, or the valueFrom mapping."""
        return {e["name"]: e.get("value", e.get("valueFrom")) for e in self.container()["env"]}


def with_values(**extra: Any) -> dict[str, Any]:
    """The smallest valid values (fleet.url), plus ``extra`` (top-level keys)."""
    return {"fleet": {"url": FLEET_URL}, **extra}


def rules_yaml() -> dict[str, list[dict[str, Any]]]:
    """deploy/rbac/rules.yaml's rules by kind (ClusterRole, Role)."""
    return {d["kind"]: d["rules"] for d in yaml.safe_load_all(RULES.read_text()) if d}


def rule_rows(rules: Sequence[Mapping[str, Any]]) -> set[tuple[str, str, str, str]]:
    """(group, resource, resourceName or "", verb) granted by ``rules``."""
    return {
        (group, resource, name, verb)
        for rule in rules
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for name in rule.get("resourceNames") or [""]
        for verb in rule["verbs"]
    }


DEPLOY_DOC = ROOT / "docs" / "deploy.md"
EXAMPLE_DIGEST = "sha256:" + "0" * 64


def doc_values() -> list[dict[str, Any]]:
    """The `my-values.yaml` examples of docs/deploy.md (the digest placeholder filled in)."""
    blocks = re.findall(r"`my-values\.yaml`:\n\n```yaml\n(.*?)```", DEPLOY_DOC.read_text(), re.S)
    return [
        yaml.safe_load(b.replace("sha256:<the digest you pushed>", EXAMPLE_DIGEST)) for b in blocks
    ]


def doc_install_command() -> list[str]:
    """docs/deploy.md's `helm install` line, as arguments after `helm`."""
    lines = [
        line for line in DEPLOY_DOC.read_text().splitlines() if line.startswith("helm install ")
    ]
    assert len(set(lines)) == 1, lines
    return lines[0].split()[1:]
