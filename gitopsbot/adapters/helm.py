"""The Helm port over the real helm binary (helm 3 or helm 4; the major is detected).

- Private ``HELM_CONFIG_HOME``/``HELM_CACHE_HOME``/``HELM_DATA_HOME``/``HELM_PLUGINS`` and
  ``KUBECACHEDIR`` under ``home`` (no repository list, plugin or discovery cache is shared
  with a person's helm); the rest of the environment is an allow-list (``tool_env``).
- argv is a list (no shell) and never holds a value: values (with merged secrets) go through
  a 0600 file in a 0700 directory, removed afterwards (R8, R17). helm's stderr is bounded and
  every string value of the upgrade is masked in it before it reaches an exception or log.
- R8: ``upgrade`` always passes the whole values file, ``--version`` and ``--namespace``,
  never ``--reuse-values``; a release in pending-* raises HelmReleaseLocked, never forced.
- F1: ``post_render_policy`` runs ``gitopsbot post-render --policy FILE`` as helm's
  post-renderer. helm 3 takes an executable (``--post-renderer <python>`` plus
  ``--post-renderer-args``); helm 4 takes only a plugin name, so a ``postrenderer/v1``
  plugin is written into the private ``HELM_PLUGINS`` (docs/helm.md).
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from gitopsbot.adapters.redaction import redact_secrets
from gitopsbot.adapters.tool_env import tool_environment
from gitopsbot.core.model import RolloutPolicy
from gitopsbot.core.observed import HelmReleaseInfo, HelmReleaseStatus
from gitopsbot.core.postrender import encode_policy
from gitopsbot.errors import HelmFailed, HelmReleaseLocked, HelmTimeout
from gitopsbot.ports.helm import ChartRef

log = logging.getLogger(__name__)

PLUGIN_NAME = "gitopsbot-rollout-policy"
STDERR_TAIL = 2000
MASK = "***"
_NOT_FOUND = re.compile(r"release: not found")
_LOCKED = re.compile(r"another operation \(install/upgrade/rollback\) is in progress")
_TIMED_OUT = re.compile(r"context deadline exceeded|timed out waiting", re.IGNORECASE)
_CHART = re.compile(r"^(?P<name>.+?)-(?P<version>v?\d+\.\d+\.\d+\S*)$")


@dataclass(frozen=True, slots=True)
class _Result:
    stdout: str
    stderr: str
    code: int


class HelmCli:
    """``ports.helm.Helm`` over the helm binary at ``binary``."""

    def __init__(
        self,
        binary: Path | str,
        *,
        home: Path,
        kubeconfig: Path | str | None = None,
        kube_context: str = "",
        post_render_command: Sequence[str] = (sys.executable, "-m", "gitopsbot", "post-render"),
        read_timeout_seconds: float = 120.0,
        grace_seconds: float = 60.0,
        environ: Mapping[str, str] | None = None,
        force_conflicts: bool = True,
    ) -> None:
        self.binary = str(binary)
        # helm 4 applies server-side (force=false). The bot's own merge patches that open and
        # close pool switches make it a manager of the TensorFusionCluster's ``spec.gpuPools``
        # (an atomic list), so without forcing, the next upgrade fails with "conflict with
        # gitopsbot: .spec.gpuPools". Git is the truth: helm takes the fields back, as helm 3's
        # client-side patch does anyway (docs/helm.md).
        self._force_conflicts = force_conflicts
        self.home = Path(home)
        self._kubeconfig = str(kubeconfig) if kubeconfig else ""
        self._context = kube_context
        self._post_render = tuple(post_render_command)
        self._read_timeout = read_timeout_seconds
        self._grace = grace_seconds
        self._environ = dict(os.environ if environ is None else environ)
        self._major: int | None = None
        for sub in ("config", "cache", "data", "plugins", "work"):
            (self.home / sub).mkdir(parents=True, exist_ok=True)
        (self.home / "work").chmod(0o700)

    # -- identity ---------------------------------------------------------------------------

    @property
    def version(self) -> str:
        result = self._run(["version", "--template", "{{.Version}}"], what="helm version")
        return result.stdout.strip()

    @property
    def major(self) -> int:
        if self._major is None:
            match = re.match(r"v?(\d+)\.", self.version)
            if not match:
                raise HelmFailed(f"helm version: cannot read the version of {self.binary}")
            self._major = int(match.group(1))
        return self._major

    # -- the port ---------------------------------------------------------------------------

    def status(self, release: str, namespace: str) -> HelmReleaseInfo | None:
        # ``helm status -o json`` carries no chart name/version (helm 3.18, 4.1): the latest
        # history entry has everything, pending-* states included.
        latest = self._history(release, namespace, limit=1)
        return latest[-1] if latest else None

    def history(self, release: str, namespace: str) -> list[HelmReleaseInfo]:
        return self._history(release, namespace, limit=1000)

    def _history(self, release: str, namespace: str, *, limit: int) -> list[HelmReleaseInfo]:
        what = f"helm history {release}"
        argv = ["history", release, "--namespace", namespace, "-o", "json", "--max", str(limit)]
        result = self._run([*argv, *self._kube()], what=what, check=False)
        if result.code != 0:
            if _NOT_FOUND.search(result.stderr):
                return []
            raise self._failure(argv, result, what=what)
        entries = json.loads(result.stdout or "null") or []
        return sorted(
            (_release_from_history(e, release, namespace) for e in entries),
            key=lambda r: r.revision,
        )

    def get_values(
        self, release: str, namespace: str, revision: int | None = None
    ) -> dict[str, Any]:
        argv = ["get", "values", release, "--namespace", namespace, "-o", "json"]
        if revision is not None:
            argv += ["--revision", str(revision)]
        result = self._run([*argv, *self._kube()], what=f"helm get values {release}")
        values = json.loads(result.stdout or "null")
        return values if isinstance(values, dict) else {}

    def upgrade(
        self,
        *,
        release: str,
        namespace: str,
        chart: ChartRef,
        version: str,
        values: Mapping[str, Any],
        description: str,
        post_render_policy: RolloutPolicy | None = None,
        wait: bool = False,
        timeout_seconds: int = 300,
        install: bool = True,
    ) -> HelmReleaseInfo:
        what = f"helm upgrade {release}"
        self._refuse_pending(release, namespace, what)
        secrets = _string_leaves(values)
        with self._workdir() as work:
            values_file = _private_file(work / "values.json", json.dumps(values))
            argv = ["upgrade", release, chart.path or chart.name]
            if chart.repo_url:
                argv += ["--repo", chart.repo_url]
            argv += ["--version", version, "--namespace", namespace, "-f", str(values_file)]
            argv += ["--description", description, "--timeout", f"{timeout_seconds}s"]
            if install:
                argv.append("--install")
            argv += self._apply_flags(wait)
            if post_render_policy is not None:
                policy_file = _private_file(work / "policy.json", encode_policy(post_render_policy))
                argv += self._post_renderer_args(policy_file)
            result = self._run(
                [*argv, *self._kube()],
                what=what,
                timeout=timeout_seconds + self._grace,
                check=False,
                mask=secrets,
            )
        # ``work`` (values and policy) is gone here, whatever happened.
        if result.code != 0:
            raise self._failure(argv, result, what=what, mask=secrets)
        return self._latest(release, namespace, what)

    def rollback(
        self,
        *,
        release: str,
        namespace: str,
        revision: int,
        description: str,
        wait: bool = False,
        timeout_seconds: int = 300,
    ) -> HelmReleaseInfo:
        what = f"helm rollback {release} to {revision} ({description})"
        self._refuse_pending(release, namespace, what)
        argv = ["rollback", release, str(revision), "--namespace", namespace]
        argv += ["--timeout", f"{timeout_seconds}s", *self._apply_flags(wait)]
        result = self._run(
            [*argv, *self._kube()], what=what, timeout=timeout_seconds + self._grace, check=False
        )
        if result.code != 0:
            raise self._failure(argv, result, what=what)
        return self._latest(release, namespace, what)

    def pull(self, chart: ChartRef, version: str, dest: Path) -> Path:
        dest.mkdir(parents=True, exist_ok=True)
        if chart.path:
            source = Path(chart.path)
            target = dest / source.name
            if source.is_dir():
                shutil.copytree(source, target, dirs_exist_ok=True)
                return target
        with self._workdir() as work:
            argv = ["pull", chart.path or chart.name, "--version", version]
            if chart.repo_url:
                argv += ["--repo", chart.repo_url]
            argv += ["--untar", "--untardir", str(work)]
            self._run(argv, what=f"helm pull {chart.label} {version}")
            # helm 3.18 also leaves a directory named after the archive: take the chart.
            unpacked = [p for p in work.iterdir() if (p / "Chart.yaml").is_file()]
            if len(unpacked) != 1:
                raise HelmFailed(f"helm pull {chart.label} {version}: no chart directory")
            target = dest / unpacked[0].name
            if target.exists():
                shutil.rmtree(target)
            shutil.move(str(unpacked[0]), target)
            return target

    def _apply_flags(self, wait: bool) -> list[str]:
        if self.major < 4:
            return ["--wait"] if wait else []
        flags = ["--wait=watcher"] if wait else []
        return flags + (["--force-conflicts"] if self._force_conflicts else [])

    # -- post-renderer -----------------------------------------------------------------------

    def _post_renderer_args(self, policy_file: Path) -> list[str]:
        args = [f"--post-renderer-args={a}" for a in ("--policy", str(policy_file))]
        if self.major < 4:
            program, *rest = self._post_render
            return ["--post-renderer", program, *(f"--post-renderer-args={a}" for a in rest), *args]
        self.install_plugin()
        return ["--post-renderer", PLUGIN_NAME, *args]

    def install_plugin(self) -> Path:
        """Write the helm 4 ``postrenderer/v1`` plugin into the private HELM_PLUGINS."""
        program, *rest = self._post_render
        directory = self.home / "plugins" / PLUGIN_NAME
        directory.mkdir(parents=True, exist_ok=True)
        manifest = {
            "apiVersion": "v1",
            "type": "postrenderer/v1",
            "name": PLUGIN_NAME,
            "version": "1.0.0",
            "runtime": "subprocess",
            "runtimeConfig": {"platformCommand": [{"command": program, "args": rest}]},
        }
        # JSON is YAML: no YAML writer needed for plugin.yaml.
        path = directory / "plugin.yaml"
        text = json.dumps(manifest, indent=2) + "\n"
        if not path.is_file() or path.read_text(encoding="utf-8") != text:
            path.write_text(text, encoding="utf-8")
        return directory

    # -- running helm ------------------------------------------------------------------------

    def _kube(self) -> list[str]:
        flags = ["--kubeconfig", self._kubeconfig] if self._kubeconfig else []
        return flags + (["--kube-context", self._context] if self._context else [])

    def _env(self) -> dict[str, str]:
        private = {
            "HELM_CONFIG_HOME": str(self.home / "config"),
            "HELM_CACHE_HOME": str(self.home / "cache"),
            "HELM_DATA_HOME": str(self.home / "data"),
            "HELM_PLUGINS": str(self.home / "plugins"),
            # Discovery cache (client-go honours KUBECACHEDIR): private, per cluster.
            "KUBECACHEDIR": str(self.home / "cache" / "kube"),
        }
        return tool_environment(self._environ, kubeconfig=self._kubeconfig, private=private)

    @contextmanager
    def _workdir(self) -> Iterator[Path]:
        path = Path(tempfile.mkdtemp(prefix="helm-", dir=self.home / "work"))
        try:
            yield path
        finally:
            shutil.rmtree(path, ignore_errors=True)

    def _run(
        self,
        argv: list[str],
        *,
        what: str,
        timeout: float | None = None,
        check: bool = True,
        mask: Sequence[str] = (),
    ) -> _Result:
        log.debug("helm: %s", " ".join(argv))
        try:
            done = subprocess.run(
                [self.binary, *argv],
                env=self._env(),
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=timeout or self._read_timeout,
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise HelmTimeout(
                f"{what}: no answer after {timeout or self._read_timeout:g}s"
            ) from None
        except OSError as e:
            raise HelmFailed(f"{what}: cannot run {self.binary}: {e.strerror}") from None
        result = _Result(done.stdout, done.stderr, done.returncode)
        if check and result.code != 0:
            raise self._failure(argv, result, what=what, mask=mask)
        return result

    def _failure(
        self, argv: list[str], result: _Result, *, what: str, mask: Sequence[str] = ()
    ) -> HelmFailed | HelmTimeout | HelmReleaseLocked:
        tail = _masked(result.stderr.strip()[-STDERR_TAIL:], mask)
        text = f"{what}: exit {result.code}: {tail}"
        log.debug("helm failed: %s (argv: %s)", text, " ".join(argv))
        if _LOCKED.search(result.stderr):
            return HelmReleaseLocked(text)
        if _TIMED_OUT.search(result.stderr):
            return HelmTimeout(text)
        return HelmFailed(text)

    def _refuse_pending(self, release: str, namespace: str, what: str) -> None:
        current = self.status(release, namespace)
        if current is not None and current.status.pending:
            raise HelmReleaseLocked(
                f"{what}: release {namespace}/{release} revision {current.revision} is "
                f"{current.status} ({current.description}); not forcing it (R8)"
            )

    def _latest(self, release: str, namespace: str, what: str) -> HelmReleaseInfo:
        info = self.status(release, namespace)
        if info is None:
            raise HelmFailed(f"{what}: release not found afterwards")
        return info


def _private_file(path: Path, text: str) -> Path:
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
        handle.write(text)
    return path


def _string_leaves(values: Any) -> list[str]:
    """Every string value long enough to be a credential, longest first (for masking)."""
    found: set[str] = set()

    def walk(node: Any) -> None:
        if isinstance(node, Mapping):
            for child in node.values():
                walk(child)
        elif isinstance(node, list | tuple):
            for child in node:
                walk(child)
        elif isinstance(node, str) and len(node) >= 6:
            found.add(node)

    walk(values)
    return sorted(found, key=len, reverse=True)


def _masked(text: str, secrets: Sequence[str]) -> str:
    return redact_secrets(text, secrets)


def _timestamp(text: Any) -> datetime | None:
    if not isinstance(text, str) or not text:
        return None
    # Go prints nanoseconds and an offset: 2026-12-02T14:11:42.123456789Z / +00:00.
    match = re.match(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|[+-]\d\d:?\d\d)?", text)
    if not match:
        return None
    base, fraction, zone = match.groups()
    micro = (fraction or "0")[:6].ljust(6, "0")
    zone = "+00:00" if zone in (None, "Z") else zone
    try:
        return datetime.fromisoformat(f"{base}.{micro}{zone}")
    except ValueError:
        return None


def _release_from_history(
    entry: Mapping[str, Any], release: str, namespace: str
) -> HelmReleaseInfo:
    chart = str(entry.get("chart", ""))
    match = _CHART.match(chart)
    name, version = (match.group("name"), match.group("version")) if match else (chart, "")
    return HelmReleaseInfo(
        name=release,
        namespace=namespace,
        revision=int(entry.get("revision") or 0),
        status=HelmReleaseStatus.parse(str(entry.get("status", ""))),
        chart_name=name,
        chart_version=version,
        app_version=str(entry.get("app_version", "")),
        description=str(entry.get("description", "")),
        updated=_timestamp(entry.get("updated")),
    )
