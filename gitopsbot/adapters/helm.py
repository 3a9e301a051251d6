"""The Helm port over the real helm binary (helm 3 or helm 4; the major is detected).

- Private ``HELM_CONFIG_HOME``/``HELM_CACHE_HOME``/``HELM_DATA_HOME``/``HELM_PLUGINS`` and
  ``KUBECACHEDIR`` under ``home`` (no repository list, plugin or discovery cache is shared
  with a person's helm); the rest of the environment is an allow-list (``tool_env``).
- No secret touches disk or argv: values (with merged secrets) reach helm on standard input
  (``--values -``), argv is a list (no shell) and never holds a value (R8, R17). helm's
  stderr is bounded, and the secrets are masked in it before it reaches an exception or log:
  the ``secret_values`` the caller names and the values at secret paths, nothing else, so
  an error names the other values as they are. Each helm child gets its own work directory
  (policy file, TMPDIR), removed when it ends; leftovers of a dead process are removed at
  construction.
- Children die with the bot: each helm runs in its own process group, with SIGTERM as its
  parent-death signal on Linux, in a process-wide registry (``HelmCli.terminate_children``,
  atexit) and recorded in ``<home>/run/helm-<pid>.json`` while it runs. A recorded helm
  still running for a dead bot is stopped at construction; ``operation_alive`` tells
  whether a helm carrying a description is running.
- Transient failures (409 stale object, 429, 5xx, connection reset/refused, EOF, timeouts
  of the transport) are retried inside the call with bounded backoff (``retry_delays``);
  ``last_retries`` counts them. A chart that cannot be fetched or loaded raises
  ``HelmChartUnusable``: nothing was changed in the cluster.
- R8: ``upgrade`` always passes the whole values, ``--version`` and ``--namespace``, never
  ``--reuse-values``; a release in pending-* raises HelmReleaseLocked, never forced.
- F1: ``post_render_policy`` runs ``python -m gitopsbot.post_render --policy FILE`` (what
  ``gitopsbot post-render`` runs, without loading the whole command line: #13) as helm's
  post-renderer. helm 3 takes an executable (``--post-renderer <python>`` plus
  ``--post-renderer-args``); helm 4 takes only a plugin name, so a ``postrenderer/v1``
  plugin is written into the private ``HELM_PLUGINS`` (docs/helm.md).
- Reads (``status``, ``history``, ``get_values``, an upgrade's or rollback's own) come from
  Helm's release Secrets through the API when a ``releases`` reader is given
  (``helm_storage.HelmStorage``: no helm process, #13) and helm runs with its Secret
  driver; otherwise from ``helm history``/``helm get values``. Same answers, same retries.
- Charts in OCI registries (``oci://``): helm is given ``oci://host/path/<chart>`` and,
  per child, a registry config of its own holding only that registry's login, written
  0600 into the child's work directory and removed with it (``oci_registry``); never argv.
- ``helm version`` runs once per binary per process (``version``, cached by path and file
  identity), however many HelmCli objects share it.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, TypeVar

from gitopsbot.adapters import helm_children as children
from gitopsbot.adapters.api_failures import is_transient
from gitopsbot.adapters.helm_children import TERM_GRACE_SECONDS
from gitopsbot.adapters.helm_storage import ReleaseReader, StoredRelease, release_info
from gitopsbot.adapters.oci_registry import (
    RegistryLogins,
    helm_registry_flags,
    is_oci,
    oci_chart,
)
from gitopsbot.adapters.redaction import helm_secrets, redact_secrets
from gitopsbot.adapters.tool_env import tool_environment
from gitopsbot.core.charts.observed import HelmReleaseInfo
from gitopsbot.core.charts.postrender import encode_policy
from gitopsbot.core.fleet.model import RolloutPolicy
from gitopsbot.errors import (
    HelmChartUnusable,
    HelmError,
    HelmFailed,
    HelmReleaseLocked,
    HelmStopped,
    HelmTimeout,
    KubeError,
    KubeForbidden,
    TransientError,
)
from gitopsbot.ports.helm import ChartRef

log = logging.getLogger(__name__)

T = TypeVar("T")

PLUGIN_NAME = "gitopsbot-rollout-policy"
# The post-renderer helm runs: gitopsbot/post_render.py imports core.postrender and the
# standard library only, where ``-m gitopsbot post-render`` would import every command (#13).
POST_RENDER_COMMAND: tuple[str, ...] = (sys.executable, "-m", "gitopsbot.post_render")
STDERR_TAIL = 2000
MASK = "***"
RETRY_DELAYS: tuple[float, ...] = (1.0, 2.0, 4.0)
"""Default backoff between attempts: 4 attempts in all, 7 s of waiting at most."""
# helm's own names of its default storage driver (action.Init): only then are its Secrets
# the release, and reading them stands in for helm.
SECRET_DRIVERS = frozenset({"", "secret", "secrets"})

_NOT_FOUND = re.compile(r"release: not found")
_LOCKED = re.compile(r"another operation \(install/upgrade/rollback\) is in progress")
_TIMED_OUT = re.compile(r"context deadline exceeded|timed out waiting", re.IGNORECASE)

# helm could not fetch or load the chart: it stops before reading or writing the release.
_CHART_UNUSABLE = re.compile(
    "|".join(
        (
            r"chart illegally",  # "references parent directory" / "contains content outside"
            r"illegal file path",
            r"unable to load chart",
            r"does not appear to be a (?:gzipped archive|valid chart)",
            r"Chart\.yaml file is missing",
            r"chart metadata \(Chart\.yaml\) missing",
            r"validation: chart\.metadata",
            r"version \"[^\"]*\" not found in",
            r"no chart (?:name|version) found",
            r"is not a valid chart repository or cannot be reached",
            r"failed to fetch",
            r"failed to download",
            r"path \"[^\"]*\" not found",
            r"failed to perform \"(?:FetchReference|Fetch|Resolve)\"",
            # helm 3 on an OCI registry: a tag it cannot resolve, a login it refused.
            r"failed to resolve \S+:\S+",
        )
    ),
    re.IGNORECASE,
)
# helm 3.18 refuses any OCI manifest carrying a provenance layer (what helm 4's ``helm push``
# uploads with the .prov beside the archive): a chart pushed signed, unusable until helm 4.
_OCI_PROVENANCE_REFUSED = re.compile(
    r'media type "application/vnd\.cncf\.helm\.chart\.provenance\.v1\.prov" is not allowed'
)


# ``helm version`` per binary, for the whole process (see ``HelmCli.version``).
_BinaryKey = tuple[str, int, int, int, int]
_VERSIONS: dict[_BinaryKey, str] = {}
_VERSION_LOCKS: dict[_BinaryKey, threading.Lock] = {}
_VERSIONS_LOCK = threading.Lock()


@dataclass(frozen=True, slots=True)
class _Result:
    stdout: str
    stderr: str
    code: int


class _Transient(Exception):
    """A failed attempt worth another try; ``error`` is raised once the budget is spent."""

    def __init__(self, error: HelmError) -> None:
        super().__init__(str(error))
        self.error = error


class HelmCli:
    """``ports.helm.Helm`` over the helm binary at ``binary``.

    ``retry_delays``: the waits between attempts of a call that failed transiently (one
    more attempt than delays; ``()`` disables retries); ``sleep`` waits them (tests record
    instead). ``term_grace_seconds``: SIGTERM to SIGKILL for a helm being stopped.
    ``releases``: where ``status``, ``history`` and ``get_values`` (and an upgrade's or
    rollback's own reads) read the release instead of spawning helm (``HelmStorage``: one
    API call); ignored unless helm runs with its Secret storage driver (``HELM_DRIVER``).
    ``registries``: the logins of OCI chart registries (none: anonymous pulls).
    """

    def __init__(
        self,
        binary: Path | str,
        *,
        home: Path,
        kubeconfig: Path | str | None = None,
        kube_context: str = "",
        post_render_command: Sequence[str] = POST_RENDER_COMMAND,
        read_timeout_seconds: float = 120.0,
        grace_seconds: float = 60.0,
        environ: Mapping[str, str] | None = None,
        force_conflicts: bool = True,
        retry_delays: Sequence[float] = RETRY_DELAYS,
        sleep: Callable[[float], None] = time.sleep,
        term_grace_seconds: float = TERM_GRACE_SECONDS,
        releases: ReleaseReader | None = None,
        registries: RegistryLogins | None = None,
    ) -> None:
        self.binary = str(binary)
        self._registries = registries or RegistryLogins()
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
        self._retry_delays = tuple(retry_delays)
        self._sleep = sleep
        self._term_grace = term_grace_seconds
        self._local = threading.local()
        # The Secrets are the release only when helm keeps it there (the environment helm
        # runs with, not the bot's: tool_env drops what helm is not given).
        driver = self._env().get("HELM_DRIVER", "")
        self._releases = releases if driver in SECRET_DRIVERS else None
        if releases is not None and self._releases is None:
            log.info("helm runs with HELM_DRIVER=%s: releases are read with helm", driver)
        for sub in ("config", "cache", "data", "plugins", "work", "run"):
            (self.home / sub).mkdir(parents=True, exist_ok=True)
        (self.home / "work").chmod(0o700)
        # What a dead process left: a helm still running for it, its work directories.
        children.stop_orphans(self.home / "run", self._term_grace)
        self._remove_leftover_workdirs()

    # -- identity ---------------------------------------------------------------------------

    @property
    def version(self) -> str:
        """``helm version``, run once per binary per process (#13): every HelmCli of the
        binary (one per cluster) and every ``major`` check shares the answer."""
        key = self._binary_identity()
        if key is None:  # not found: run it anyway, for helm's own error
            return self._read_version()
        with _VERSIONS_LOCK:
            known = _VERSIONS.get(key)
            if known is not None:
                return known
            lock = _VERSION_LOCKS.setdefault(key, threading.Lock())
        # Per binary: the first caller runs helm, the others wait for its answer; another
        # binary's first ``helm version`` is not held up. A failure is not remembered.
        with lock:
            with _VERSIONS_LOCK:
                known = _VERSIONS.get(key)
            if known is None:
                known = self._read_version()
                with _VERSIONS_LOCK:
                    _VERSIONS[key] = known
            return known

    @property
    def major(self) -> int:
        match = re.match(r"v?(\d+)\.", self.version)
        if not match:
            raise HelmFailed(f"helm version: cannot read the version of {self.binary}")
        return int(match.group(1))

    def _read_version(self) -> str:
        result = self._run(["version", "--template", "{{.Version}}"], what="helm version")
        return result.stdout.strip()

    def _binary_identity(self) -> _BinaryKey | None:
        # The file helm's PATH resolves to, as the child will run it, and its identity:
        # a binary replaced in place (new inode, mtime or size) is asked again.
        found = shutil.which(self.binary, path=self._env().get("PATH", os.defpath))
        if found is None:
            return None
        try:
            st = os.stat(found)
        except OSError:
            return None
        return (os.path.realpath(found), st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size)

    @property
    def last_retries(self) -> int:
        """How many times the last call of this thread on this HelmCli retried after a
        transient failure (its own reads, e.g. the pending check of an upgrade, included)."""
        return int(getattr(self._local, "retries", 0))

    # -- the port ---------------------------------------------------------------------------

    def status(self, release: str, namespace: str) -> HelmReleaseInfo | None:
        # ``helm status -o json`` carries no chart name/version (helm 3.18, 4.1): the latest
        # history entry has everything, pending-* states included.
        with self._call():
            latest = self._history(release, namespace, limit=1)
            return latest[-1] if latest else None

    def history(self, release: str, namespace: str) -> list[HelmReleaseInfo]:
        with self._call():
            return self._history(release, namespace, limit=1000)

    def _history(self, release: str, namespace: str, *, limit: int) -> list[HelmReleaseInfo]:
        what = f"helm history {release}"
        reader = self._reader(release)
        if reader is not None:
            stored = self._from_storage(
                what, namespace, lambda: reader.releases(release, namespace)
            )
            return [r.info for r in stored[-limit:]]  # what ``--max`` keeps: the newest
        argv = ["history", release, "--namespace", namespace, "-o", "json", "--max", str(limit)]

        def attempt() -> list[HelmReleaseInfo]:
            result = self._run([*argv, *self._kube()], what=what, check=False)
            if result.code != 0:
                if _NOT_FOUND.search(result.stderr):
                    return []
                raise self._error(argv, result, what=what)
            entries = json.loads(result.stdout or "null") or []
            return sorted(
                (release_info(e, release, namespace) for e in entries),
                key=lambda r: r.revision,
            )

        return self._retrying(what, attempt)

    def release_mark(self, release: str, namespace: str) -> str | None:
        reader = self._reader(release)
        if reader is None:  # helm keeps the release elsewhere: no cheap read
            return None
        with self._call():
            return self._from_storage(
                f"helm status {release}", namespace, lambda: reader.mark(release, namespace)
            )

    def get_values(
        self, release: str, namespace: str, revision: int | None = None
    ) -> dict[str, Any]:
        what = f"helm get values {release}"
        reader = self._reader(release)
        if reader is not None:

            def read() -> dict[str, Any]:
                found: StoredRelease | None
                if revision is not None and revision > 0:  # helm: Storage.Get by name
                    found = reader.revision(release, namespace, revision)
                else:  # helm: Storage.Last, revision 0 included
                    stored = reader.releases(release, namespace)
                    found = stored[-1] if stored else None
                if found is None:  # what helm says, as its own exit would
                    raise HelmFailed(f"{what}: release: not found in namespace {namespace}")
                return found.values

            with self._call():
                return self._from_storage(what, namespace, read)
        argv = ["get", "values", release, "--namespace", namespace, "-o", "json"]
        if revision is not None:
            argv += ["--revision", str(revision)]

        def attempt() -> dict[str, Any]:
            result = self._run([*argv, *self._kube()], what=what, check=False)
            if result.code != 0:
                raise self._error(argv, result, what=what)
            values = json.loads(result.stdout or "null")
            return values if isinstance(values, dict) else {}

        with self._call():
            return self._retrying(what, attempt)

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
        secret_values: Sequence[str] = (),
    ) -> HelmReleaseInfo:
        what = f"helm upgrade {release}"
        label = f"{chart.label} version {version}"
        # Masked in helm's stderr: the secrets the caller merged in (wherever they appear) and
        # the values at secret paths; the rest stays readable ("gpu-cluster-eu" is invalid).
        secrets = [*helm_secrets(values, secret_values), *self._registries.secrets()]
        # Values (secrets merged in) go to helm's standard input: never a file, never argv.
        payload = json.dumps(values)
        argv = ["upgrade", release, *self._chart_args(chart)]
        argv += ["--version", version, "--namespace", namespace, "--values", "-"]
        argv += ["--description", description, "--timeout", f"{timeout_seconds}s"]
        if install:
            argv.append("--install")

        def attempt() -> None:
            with self._workdir() as work:
                full = [*argv, *self._apply_flags(wait), *self._registry_flags(chart, work)]
                if post_render_policy is not None:
                    policy = _private_file(work / "policy.json", encode_policy(post_render_policy))
                    full += self._post_renderer_args(policy)
                result = self._run(
                    [*full, *self._kube()],
                    what=what,
                    timeout=timeout_seconds + self._grace,
                    check=False,
                    mask=secrets,
                    stdin=payload,
                    description=description,
                    work=work,
                )
            # ``work`` (the policy file, helm's TMPDIR) is gone here, whatever happened.
            if result.code != 0:
                raise self._error(full, result, what=what, mask=secrets, chart=label)

        with self._call():
            self._refuse_pending(release, namespace, what)
            # A transient failure leaves a ``failed`` revision, which the next attempt
            # upgrades over; one that left the release pending-* is refused, never forced.
            self._retrying(
                what, attempt, before_retry=lambda: self._refuse_pending(release, namespace, what)
            )
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
        argv = ["rollback", release, str(revision), "--namespace", namespace]
        argv += ["--timeout", f"{timeout_seconds}s"]

        def attempt() -> None:
            full = [*argv, *self._apply_flags(wait)]
            result = self._run(
                [*full, *self._kube()],
                what=what,
                timeout=timeout_seconds + self._grace,
                check=False,
                description=description,
            )
            if result.code != 0:
                raise self._error(full, result, what=what)

        with self._call():
            self._refuse_pending(release, namespace, what)
            self._retrying(
                what, attempt, before_retry=lambda: self._refuse_pending(release, namespace, what)
            )
            return self._latest(release, namespace, what)

    def template(
        self, chart: Path, *, release: str, namespace: str, values: Mapping[str, Any]
    ) -> str:
        """``helm template`` of a local chart (archive or directory) with ``values`` on
        standard input: the manifests a plan's digest is made of (no cluster is read; helm's
        built-in capabilities). The values given here hold no secret (masked by the caller)."""
        what = f"helm template {release} {chart.name}"
        argv = ["template", release, str(chart), "--namespace", namespace, "--values", "-"]
        with self._call():
            result = self._run(argv, what=what, check=False, stdin=json.dumps(values))
            if result.code != 0:
                raise self._failure(argv, result, what=what, chart=str(chart))
            return result.stdout

    def pull(self, chart: ChartRef, version: str, dest: Path) -> Path:
        with self._call():
            dest.mkdir(parents=True, exist_ok=True)
            if chart.path:
                return self._pull_local(Path(chart.path), version, dest)
            what = f"helm pull {chart.label} {version}"
            label = f"{chart.label} version {version}"

            def attempt() -> Path:
                with self._workdir() as work:
                    unpack = work / "chart"
                    unpack.mkdir()
                    full = self._pull_argv(chart, version, work)
                    full += ["--untar", "--untardir", str(unpack)]
                    result = self._run(
                        full, what=what, check=False, work=work, mask=self._registries.secrets()
                    )
                    if result.code != 0:
                        raise self._error(full, result, what=what, chart=label)
                    # helm 3.18 also leaves a directory named after the archive: take the chart.
                    return _move_chart(unpack, dest, f"{what}: {label}")

            return self._retrying(what, attempt)

    def pull_archive(self, chart: ChartRef, version: str, digest: str = "") -> bytes:
        """The chart's archive (``.tgz``) as helm pulls it, bytes for bytes: what an OCI
        chart source reads (``oci_charts``). ``digest``: an OCI chart's manifest digest,
        pulled by it (``oci://…/<chart>@sha256:…``, helm 3 and 4) rather than by its tag, so
        a tag moved meanwhile cannot swap the archive. Errors as ``pull``'s."""
        return self._pulled(chart, version, digest, prov=False)[0]

    def pull_provenance(self, chart: ChartRef, version: str, digest: str = "") -> bytes | None:
        """The chart's provenance file as ``helm pull --prov`` fetches it (for an OCI chart,
        the manifest's provenance layer), None when there is none. Errors as ``pull``'s."""
        return self._pulled(chart, version, digest, prov=True)[1]

    def verify(self, archive: Path, provenance: bytes, *, keyring: Path, filename: str) -> str:
        """``helm verify`` of the very file ``archive`` (linked as ``filename``, the name the
        provenance signs, with ``provenance`` beside it as ``<filename>.prov``, in this
        child's work directory) with the public ``keyring``: helm's report (``Signed by:``,
        ``Using Key With Fingerprint:``). Raises HelmFailed with helm's reason."""
        if "/" in filename or not filename.endswith(".tgz"):
            raise HelmFailed(f"helm verify: {filename!r} is not an archive name")
        what = f"helm verify {filename}"
        with self._call(), self._workdir() as work:
            link = work / filename
            link.symlink_to(archive.resolve())
            (work / f"{filename}.prov").write_bytes(provenance)
            argv = ["verify", str(link), "--keyring", str(keyring)]
            return self._run(argv, what=what, work=work).stdout

    def _pulled(
        self, chart: ChartRef, version: str, digest: str, *, prov: bool
    ) -> tuple[bytes, bytes | None]:
        what = f"helm pull {chart.label} {version}"
        label = f"{chart.label} version {version}"

        def attempt() -> tuple[bytes, bytes | None]:
            with self._workdir() as work:
                into = work / "archive"
                into.mkdir()
                if digest and is_oci(chart.repo_url):
                    pinned = f"{oci_chart(chart.repo_url, chart.name)}@{digest}"
                    argv = ["pull", pinned, *self._registry_flags(chart, work)]
                else:
                    argv = self._pull_argv(chart, version, work)
                full = [*argv, "--destination", str(into), *(["--prov"] if prov else [])]
                result = self._run(
                    full, what=what, check=False, work=work, mask=self._registries.secrets()
                )
                if result.code != 0:
                    raise self._error(full, result, what=what, chart=label)
                found = sorted(into.glob("*.tgz"))
                if len(found) != 1:
                    raise HelmChartUnusable(f"{what}: chart {label}: helm left no archive")
                signed = found[0].with_name(found[0].name + ".prov")
                return found[0].read_bytes(), signed.read_bytes() if signed.is_file() else None

        with self._call():
            return self._retrying(what, attempt)

    def _chart_args(self, chart: ChartRef) -> list[str]:
        """The chart as helm's argument: a path, ``oci://host/path/<chart>``, or a name with
        ``--repo`` (helm takes no ``--repo`` for an OCI registry)."""
        if chart.path:
            return [chart.path]
        if is_oci(chart.repo_url):
            return [oci_chart(chart.repo_url, chart.name)]
        return [chart.name, "--repo", chart.repo_url]

    def _pull_argv(self, chart: ChartRef, version: str, work: Path) -> list[str]:
        flags = self._registry_flags(chart, work)
        return ["pull", *self._chart_args(chart), "--version", version, *flags]

    def _registry_flags(self, chart: ChartRef, work: Path) -> list[str]:
        if not is_oci(chart.repo_url):
            return []
        return helm_registry_flags(self._registries.for_url(chart.repo_url), work)

    def _pull_local(self, source: Path, version: str, dest: Path) -> Path:
        label = f"{source} version {version}"
        if source.is_dir():
            target = dest / source.name
            shutil.copytree(source, target, dirs_exist_ok=True)
            return target
        what = f"helm pull {source}"
        if not source.is_file():
            raise HelmChartUnusable(f"{what}: chart {label} cannot be used: no such file")
        # helm has no command that unpacks a local archive: it judges the archive (as it
        # would for an upgrade), then it is unpacked here, files and directories only.
        argv = ["show", "chart", str(source)]
        result = self._run(argv, what=what, check=False)
        if result.code != 0:
            raise self._failure(argv, result, what=what, chart=label)
        with self._workdir() as work:
            _unpack_archive(source, work / "chart", f"{what}: chart {label}")
            return _move_chart(work / "chart", dest, f"{what}: chart {label}")

    def operation_alive(self, description: str) -> bool:
        """Whether a helm carrying ``description`` (an upgrade's ``--description``, or the
        description given to ``rollback``) is running on this machine: a child of this
        process, or one recorded under ``<home>/run`` whose pid, start time and command line
        still match (docs/helm.md)."""
        return children.running(description, self.home / "run")

    @classmethod
    def terminate_children(cls, grace_seconds: float = TERM_GRACE_SECONDS) -> int:
        """Stop every helm child of this process (all HelmCli instances): SIGTERM to its
        process group, SIGKILL after ``grace_seconds``. Returns how many there were.

        For the bot's SIGTERM/SIGINT handler (it takes no lock) and atexit. The calls those
        helms belong to raise HelmStopped (a TransientError: the step runs again, it is not
        a failure of the upgrade), not retried inside the call. helm records a cancelled
        upgrade as ``failed``; a rollback it does not (helm 3 and 4 die at once and leave
        pending-rollback; docs/helm.md)."""
        return children.terminate_all(grace_seconds)

    def _apply_flags(self, wait: bool) -> list[str]:
        if self.major < 4:
            return ["--wait"] if wait else []
        flags = ["--wait=watcher"] if wait else []
        # helm 4's default --server-side=auto follows the previous revision: after a
        # client-side one (helm 3, or a person's --server-side=false) --force-conflicts is
        # refused ("forceConflicts enabled when serverSideApply disabled"), so the bot says
        # server-side explicitly.
        return flags + (
            ["--server-side=true", "--force-conflicts"] if self._force_conflicts else []
        )

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

    def _env(self, work: Path | None = None) -> dict[str, str]:
        private = {
            "HELM_CONFIG_HOME": str(self.home / "config"),
            "HELM_CACHE_HOME": str(self.home / "cache"),
            "HELM_DATA_HOME": str(self.home / "data"),
            "HELM_PLUGINS": str(self.home / "plugins"),
            # Discovery cache (client-go honours KUBECACHEDIR): private, per cluster.
            "KUBECACHEDIR": str(self.home / "cache" / "kube"),
        }
        if work is not None:
            # Whatever helm or the post-renderer writes to a temporary file lands in this
            # child's work directory, removed with it (and after a crash, at construction).
            (work / "tmp").mkdir(mode=0o700, exist_ok=True)
            private["TMPDIR"] = str(work / "tmp")
        return tool_environment(self._environ, kubeconfig=self._kubeconfig, private=private)

    @contextmanager
    def _workdir(self) -> Iterator[Path]:
        # Named after this process (pid and start time) so that a later HelmCli can tell a
        # dead process's leftovers from a live one's.
        prefix = f"helm-{children.process_tag()}-"
        path = Path(tempfile.mkdtemp(prefix=prefix, dir=self.home / "work"))
        try:
            yield path
        finally:
            shutil.rmtree(path, ignore_errors=True)

    @contextmanager
    def _call(self) -> Iterator[None]:
        """One public call: ``last_retries`` counts from its start (nested calls add up)."""
        depth = int(getattr(self._local, "depth", 0))
        if depth == 0:
            self._local.retries = 0
        self._local.depth = depth + 1
        try:
            yield
        finally:
            self._local.depth = depth

    def _retrying(
        self,
        what: str,
        attempt: Callable[[], T],
        *,
        before_retry: Callable[[], None] | None = None,
    ) -> T:
        attempts = len(self._retry_delays) + 1
        for number in range(1, attempts + 1):
            try:
                return attempt()
            except _Transient as transient:
                if number == attempts:
                    raise transient.error from None
                delay = self._retry_delays[number - 1]
                self._local.retries = self.last_retries + 1
                log.warning(
                    "%s: transient failure (attempt %d of %d), retrying in %gs: %s",
                    what, number, attempts, delay, transient.error,
                )  # fmt: skip
                self._sleep(delay)
                if before_retry is not None:
                    before_retry()
        raise AssertionError("unreachable")  # pragma: no cover

    def _run(
        self,
        argv: list[str],
        *,
        what: str,
        timeout: float | None = None,
        check: bool = True,
        mask: Sequence[str] = (),
        stdin: str | None = None,
        description: str = "",
        work: Path | None = None,
    ) -> _Result:
        if work is None:
            with self._workdir() as own:
                return self._run(
                    argv, what=what, timeout=timeout, check=check, mask=mask, stdin=stdin,
                    description=description, work=own,
                )  # fmt: skip
        log.debug("helm: %s", " ".join(argv))
        limit = timeout or self._read_timeout
        try:
            child = children.spawn(
                [self.binary, *argv],
                env=self._env(work),
                stdin=stdin,
                what=what,
                description=description,
                run_dir=self.home / "run",
            )
        except OSError as e:
            raise HelmFailed(f"{what}: cannot run {self.binary}: {e.strerror}") from None
        try:
            try:
                stdout, stderr = children.wait(child, limit)
            except subprocess.TimeoutExpired:
                children.stop(child, self._term_grace)
                raise HelmTimeout(f"{what}: no answer after {limit:g}s") from None
        finally:
            if child.process.poll() is None:  # interrupted (KeyboardInterrupt...): stop it
                children.stop(child, self._term_grace)
            children.finish(child)
        result = _Result(stdout, stderr, child.process.returncode)
        if child.stopped:
            raise HelmStopped(f"{what}: stopped: gitopsbot is shutting down (exit {result.code})")
        if check and result.code != 0:
            raise self._failure(argv, result, what=what, mask=mask)
        return result

    def _remove_leftover_workdirs(self) -> None:
        for path in (self.home / "work").glob("helm-*"):
            if not children.left_by_dead_process(path.name):
                continue
            log.info("removing %s, left by a process that is gone", path)
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)

    # -- errors ------------------------------------------------------------------------------

    def _error(
        self,
        argv: list[str],
        result: _Result,
        *,
        what: str,
        mask: Sequence[str] = (),
        chart: str = "",
    ) -> Exception:
        """The exception for a failed attempt: ``_Transient`` (retry) or the final one."""
        error = self._failure(argv, result, what=what, mask=mask, chart=chart)
        if _transient(result.stderr) and not isinstance(error, HelmReleaseLocked):
            return _Transient(error)
        return error

    def _failure(
        self,
        argv: list[str],
        result: _Result,
        *,
        what: str,
        mask: Sequence[str] = (),
        chart: str = "",
    ) -> HelmError:
        tail = _masked(result.stderr.strip()[-STDERR_TAIL:], mask)
        text = f"{what}: exit {result.code}: {tail}"
        log.debug("helm failed: %s (argv: %s)", text, " ".join(argv))
        if _LOCKED.search(result.stderr):
            return HelmReleaseLocked(text)
        if chart and _OCI_PROVENANCE_REFUSED.search(result.stderr):
            return HelmChartUnusable(
                f"{what}: chart {chart} cannot be used (nothing was changed in the cluster): "
                f"it was pushed signed (its manifest has a provenance layer), which helm "
                f'{self.version} refuses (media type "application/vnd.cncf.helm.chart.'
                'provenance.v1.prov" is not allowed): run the bot with helm 4 (--helm or '
                "GITOPSBOT_HELM), or have the chart pushed without its .prov"
            )
        if chart and _CHART_UNUSABLE.search(result.stderr):
            return HelmChartUnusable(
                f"{what}: chart {chart} cannot be used (nothing was changed in the cluster): {tail}"
            )
        if _TIMED_OUT.search(result.stderr):
            return HelmTimeout(text)
        return HelmFailed(text)

    def _reader(self, release: str) -> ReleaseReader | None:
        if self._releases is not None and self._releases.readable(release):
            return self._releases
        return None  # helm answers (and refuses a name it does not take, in its own words)

    def _from_storage(self, what: str, namespace: str, read: Callable[[], T]) -> T:
        """``read`` from Helm's storage, with helm's retry budget: a transient API failure
        is retried as a transient helm failure is (``last_retries``, the same delays, then
        HelmFailed); any other Kube error is HelmFailed at once."""

        def attempt() -> T:
            try:
                return read()
            except KubeForbidden as e:  # RBAC: say what to grant
                raise HelmFailed(
                    f"{what}: reading the release from Helm's storage was refused (it needs "
                    f"get and list on secrets in namespace {namespace}, as helm does): {e}"
                ) from None
            except KubeError as e:  # its message never holds Secret data (adapters.kube)
                error = HelmFailed(f"{what}: reading Helm's storage: {e}")
                if isinstance(e, TransientError):
                    raise _Transient(error) from None
                raise error from None

        return self._retrying(what, attempt)

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


def _transient(stderr: str) -> bool:
    return is_transient(stderr)


def _move_chart(unpacked: Path, dest: Path, what: str) -> Path:
    charts = [p for p in unpacked.iterdir() if (p / "Chart.yaml").is_file()]
    if len(charts) != 1:
        raise HelmChartUnusable(f"{what}: no chart directory in the archive")
    target = dest / charts[0].name
    if target.exists():
        shutil.rmtree(target)
    shutil.move(str(charts[0]), target)
    return target


def _unpack_archive(archive: Path, into: Path, what: str) -> None:
    """Unpack a chart archive: regular files and directories only, every path inside
    ``into`` (no absolute path, no ``..``, no link, no device)."""
    into.mkdir(parents=True, exist_ok=True)
    try:
        with tarfile.open(archive, "r:*") as tar:
            for member in tar:
                name = PurePosixPath(member.name)
                if (
                    name.is_absolute()
                    or ".." in name.parts
                    or not (member.isfile() or member.isdir())
                ):
                    raise HelmChartUnusable(
                        f"{what} cannot be used: illegal file path {member.name!r} in the archive"
                    )
                target = into.joinpath(*name.parts)
                if member.isdir():
                    target.mkdir(parents=True, exist_ok=True)
                    continue
                target.parent.mkdir(parents=True, exist_ok=True)
                source = tar.extractfile(member)
                if source is None:
                    raise HelmChartUnusable(f"{what} cannot be used: unreadable {member.name!r}")
                with source, target.open("wb") as out:
                    shutil.copyfileobj(source, out)
    except (tarfile.TarError, EOFError, OSError) as e:
        raise HelmChartUnusable(f"{what} cannot be used: not a chart archive ({e})") from None


def _private_file(path: Path, text: str) -> Path:
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
        handle.write(text)
    return path


def _masked(text: str, secrets: Sequence[str]) -> str:
    return redact_secrets(text, secrets)
