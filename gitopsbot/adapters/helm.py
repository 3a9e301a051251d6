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

Running a helm child (homes, work directory, retries, failures) is ``helm_runner.HelmRunner``;
the chart reads (pull, provenance, verify) are ``helm_charts.HelmCharts``.
"""

from __future__ import annotations

import json
import logging
import os
import re
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from gitopsbot.adapters import helm_children as children
from gitopsbot.adapters.helm_charts import HelmCharts, chart_args, registry_flags
from gitopsbot.adapters.helm_children import TERM_GRACE_SECONDS
from gitopsbot.adapters.helm_runner import HelmRunner, TransientAttempt, attempt_error
from gitopsbot.adapters.helm_storage import ReleaseReader, StoredRelease, release_info
from gitopsbot.adapters.oci_registry import RegistryLogins
from gitopsbot.adapters.redaction import helm_secrets
from gitopsbot.core.charts.observed import HelmReleaseInfo
from gitopsbot.core.charts.postrender import encode_policy
from gitopsbot.errors import (
    HelmFailed,
    HelmReleaseLocked,
    KubeError,
    KubeForbidden,
    TransientError,
)
from gitopsbot.ports.helm import ChartRef, Helm, RollbackRequest, UpgradeRequest

log = logging.getLogger(__name__)

T = TypeVar("T")

PLUGIN_NAME = "gitopsbot-rollout-policy"
# The post-renderer helm runs: gitopsbot/post_render.py imports core.postrender and the
# standard library only, where ``-m gitopsbot post-render`` would import every command (#13).
POST_RENDER_COMMAND: tuple[str, ...] = (sys.executable, "-m", "gitopsbot.post_render")
RETRY_DELAYS: tuple[float, ...] = (1.0, 2.0, 4.0)
"""Default backoff between attempts: 4 attempts in all, 7 s of waiting at most."""
# helm's own names of its default storage driver (action.Init): only then are its Secrets
# the release, and reading them stands in for helm.
SECRET_DRIVERS = frozenset({"", "secret", "secrets"})

_NOT_FOUND = re.compile(r"release: not found")


class HelmCli(Helm):
    """``ports.helm.Helm`` over the helm binary at ``binary`` (the port says what each call
    does; what is said here is how helm is run for it).

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
        self._post_render = tuple(post_render_command)
        self._grace = grace_seconds
        self._runner = HelmRunner(
            self.binary,
            home=self.home,
            kubeconfig=self._kubeconfig,
            kube_context=kube_context,
            environ=os.environ if environ is None else environ,
            read_timeout_seconds=read_timeout_seconds,
            retry_delays=retry_delays,
            sleep=sleep,
            term_grace_seconds=term_grace_seconds,
        )
        self._charts = HelmCharts(self._runner, self._registries)
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
        children.stop_orphans(self.home / "run", term_grace_seconds)
        self._runner.remove_leftover_workdirs()

    # -- identity ---------------------------------------------------------------------------

    @property
    def version(self) -> str:
        """``helm version``, run once per binary per process (#13): every HelmCli of the
        binary (one per cluster) and every ``major`` check shares the answer."""
        return self._runner.version

    @property
    def major(self) -> int:
        return self._runner.major

    @property
    def last_retries(self) -> int:
        return self._runner.last_retries

    def _env(self, work: Path | None = None) -> dict[str, str]:
        return self._runner.env(work)

    # -- the port ---------------------------------------------------------------------------

    def status(self, release: str, namespace: str) -> HelmReleaseInfo | None:
        # ``helm status -o json`` carries no chart name/version (helm 3.18, 4.1): the latest
        # history entry has everything, pending-* states included.
        with self._runner.call():
            latest = self._history(release, namespace, limit=1)
            return latest[-1] if latest else None

    def history(self, release: str, namespace: str) -> list[HelmReleaseInfo]:
        with self._runner.call():
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
            result = self._runner.run([*argv, *self._runner.kube()], what=what, check=False)
            if result.code != 0:
                if _NOT_FOUND.search(result.stderr):
                    return []
                raise attempt_error(self._runner.failure(argv, result, what=what), result)
            entries = json.loads(result.stdout or "null") or []
            return sorted(
                (release_info(e, release, namespace) for e in entries),
                key=lambda r: r.revision,
            )

        return self._runner.retrying(what, attempt)

    def release_mark(self, release: str, namespace: str) -> str | None:
        reader = self._reader(release)
        if reader is None:  # helm keeps the release elsewhere: no cheap read
            return None
        with self._runner.call():
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

            with self._runner.call():
                return self._from_storage(what, namespace, read)
        argv = ["get", "values", release, "--namespace", namespace, "-o", "json"]
        if revision is not None:
            argv += ["--revision", str(revision)]

        def attempt() -> dict[str, Any]:
            result = self._runner.run([*argv, *self._runner.kube()], what=what, check=False)
            if result.code != 0:
                raise attempt_error(self._runner.failure(argv, result, what=what), result)
            values = json.loads(result.stdout or "null")
            return values if isinstance(values, dict) else {}

        with self._runner.call():
            return self._runner.retrying(what, attempt)

    def upgrade(self, request: UpgradeRequest) -> HelmReleaseInfo:
        what = f"helm upgrade {request.release}"
        label = f"{request.chart.label} version {request.version}"
        # Masked in helm's stderr: the secrets the caller merged in (wherever they appear) and
        # the values at secret paths; the rest stays readable ("gpu-cluster-eu" is invalid).
        secrets = [
            *helm_secrets(request.values, request.secret_values),
            *self._registries.secrets(),
        ]
        # Values (secrets merged in) go to helm's standard input: never a file, never argv.
        payload = json.dumps(request.values)
        argv = ["upgrade", request.release, *chart_args(request.chart)]
        argv += ["--version", request.version, "--namespace", request.namespace, "--values", "-"]
        argv += ["--description", request.description]
        argv += ["--timeout", f"{request.timeout_seconds}s"]
        if request.install:
            argv.append("--install")

        def attempt() -> None:
            with self._runner.workdir() as work:
                full = [
                    *argv,
                    *self._apply_flags(request.wait),
                    *registry_flags(self._registries, request.chart, work),
                ]
                if request.post_render_policy is not None:
                    policy = _private_file(
                        work / "policy.json", encode_policy(request.post_render_policy)
                    )
                    full += self._post_renderer_args(policy)
                result = self._runner.run(
                    [*full, *self._runner.kube()],
                    what=what,
                    timeout=request.timeout_seconds + self._grace,
                    check=False,
                    mask=secrets,
                    stdin=payload,
                    description=request.description,
                    work=work,
                )
            # ``work`` (the policy file, helm's TMPDIR) is gone here, whatever happened.
            if result.code != 0:
                error = self._runner.failure(full, result, what=what, mask=secrets, chart=label)
                raise attempt_error(error, result)

        return self._change(request.release, request.namespace, what, attempt)

    def rollback(self, request: RollbackRequest) -> HelmReleaseInfo:
        release, revision = request.release, request.revision
        what = f"helm rollback {release} to {revision} ({request.description})"
        argv = ["rollback", release, str(revision), "--namespace", request.namespace]
        argv += ["--timeout", f"{request.timeout_seconds}s"]

        def attempt() -> None:
            full = [*argv, *self._apply_flags(request.wait)]
            result = self._runner.run(
                [*full, *self._runner.kube()],
                what=what,
                timeout=request.timeout_seconds + self._grace,
                check=False,
                description=request.description,
            )
            if result.code != 0:
                raise attempt_error(self._runner.failure(full, result, what=what), result)

        return self._change(release, request.namespace, what, attempt)

    def _change(
        self, release: str, namespace: str, what: str, attempt: Callable[[], None]
    ) -> HelmReleaseInfo:
        """An upgrade's or a rollback's ``attempt``, run while the release is not pending-*;
        the revision it made."""
        with self._runner.call():
            self._refuse_pending(release, namespace, what)
            # A transient failure leaves a ``failed`` revision, which the next attempt
            # builds on; one that left the release pending-* is refused, never forced.
            self._runner.retrying(
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
        with self._runner.call():
            result = self._runner.run(argv, what=what, check=False, stdin=json.dumps(values))
            if result.code != 0:
                raise self._runner.failure(argv, result, what=what, chart=str(chart))
            return result.stdout

    def pull(self, chart: ChartRef, version: str, dest: Path) -> Path:
        return self._charts.pull(chart, version, dest)

    def pull_archive(self, chart: ChartRef, version: str, digest: str = "") -> bytes:
        return self._charts.pull_archive(chart, version, digest)

    def pull_provenance(self, chart: ChartRef, version: str, digest: str = "") -> bytes | None:
        return self._charts.pull_provenance(chart, version, digest)

    def verify(self, archive: Path, provenance: bytes, *, keyring: Path, filename: str) -> str:
        return self._charts.verify(archive, provenance, keyring=keyring, filename=filename)

    def operation_alive(self, description: str) -> bool:
        # A child of this process, or one recorded under ``<home>/run`` whose pid, start
        # time and command line still match (docs/helm.md).
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
                    raise TransientAttempt(error) from None
                raise error from None

        return self._runner.retrying(what, attempt)

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
