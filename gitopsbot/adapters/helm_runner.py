"""Running helm for a HelmCli: one child per call, its retries, its failure read.

- Each child gets private ``HELM_CONFIG_HOME``/``HELM_CACHE_HOME``/``HELM_DATA_HOME``/
  ``HELM_PLUGINS`` and ``KUBECACHEDIR`` under ``home``, the rest of the environment from an
  allow-list (``tool_env``), and its own work directory (TMPDIR, the policy file), removed
  when it ends; a dead process's leftovers are removed at start.
- Children die with the bot (``helm_children``): own process group, SIGTERM as parent-death
  signal, recorded while they run.
- A call (``call``) counts its retries (``last_retries``); ``retrying`` runs an attempt again
  after a transient failure with bounded backoff; ``failure`` reads helm's stderr (bounded,
  secrets masked) into the HelmError to raise, ``attempt_error`` whether to retry it.
- ``helm version`` runs once per binary per process (``version``).
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from gitopsbot.adapters import helm_children as children
from gitopsbot.adapters.api_failures import is_transient
from gitopsbot.adapters.redaction import redact_secrets
from gitopsbot.adapters.tool_env import cluster_flags, tool_environment
from gitopsbot.errors import (
    HelmChartUnusable,
    HelmError,
    HelmFailed,
    HelmReleaseLocked,
    HelmStopped,
    HelmTimeout,
)

log = logging.getLogger(__name__)

T = TypeVar("T")

STDERR_TAIL = 2000

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


# ``helm version`` per binary, for the whole process (see ``HelmRunner.version``).
_BinaryKey = tuple[str, int, int, int, int]
_VERSIONS: dict[_BinaryKey, str] = {}
_VERSION_LOCKS: dict[_BinaryKey, threading.Lock] = {}
_VERSIONS_LOCK = threading.Lock()


@dataclass(frozen=True, slots=True)
class HelmResult:
    stdout: str
    stderr: str
    code: int


class TransientAttempt(Exception):
    """A failed attempt worth another try; ``error`` is raised once the budget is spent."""

    def __init__(self, error: HelmError) -> None:
        super().__init__(str(error))
        self.error = error


class HelmRunner:
    """helm at ``binary`` with its homes under ``home`` (see the module docstring).

    ``read_timeout_seconds``: a call's limit when it names none. ``retry_delays``: the waits
    between attempts (one more attempt than delays); ``sleep`` waits them.
    ``term_grace_seconds``: SIGTERM to SIGKILL for a helm being stopped.
    """

    def __init__(
        self,
        binary: str,
        *,
        home: Path,
        kubeconfig: str,
        kube_context: str,
        environ: Mapping[str, str],
        read_timeout_seconds: float,
        retry_delays: Sequence[float],
        sleep: Callable[[float], None],
        term_grace_seconds: float,
    ) -> None:
        self.binary = binary
        self.home = home
        self._kubeconfig = kubeconfig
        self._context = kube_context
        self._environ = dict(environ)
        self._read_timeout = read_timeout_seconds
        self._retry_delays = tuple(retry_delays)
        self._sleep = sleep
        self._term_grace = term_grace_seconds
        self._local = threading.local()

    @property
    def version(self) -> str:
        """``helm version``, run once per binary per process (#13): every runner of the
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
        result = self.run(["version", "--template", "{{.Version}}"], what="helm version")
        return result.stdout.strip()

    def _binary_identity(self) -> _BinaryKey | None:
        # The file helm's PATH resolves to, as the child will run it, and its identity:
        # a binary replaced in place (new inode, mtime or size) is asked again.
        found = shutil.which(self.binary, path=self.env().get("PATH", os.defpath))
        if found is None:
            return None
        try:
            st = os.stat(found)
        except OSError:
            return None
        return (os.path.realpath(found), st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size)

    @property
    def last_retries(self) -> int:
        """How many times the last call of this thread on this runner retried after a
        transient failure (its own reads, e.g. the pending check of an upgrade, included)."""
        return int(getattr(self._local, "retries", 0))

    def kube(self) -> list[str]:
        return cluster_flags(self._kubeconfig, self._context, context_flag="--kube-context")

    def env(self, work: Path | None = None) -> dict[str, str]:
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
    def workdir(self) -> Iterator[Path]:
        # Named after this process (pid and start time) so that a later HelmCli can tell a
        # dead process's leftovers from a live one's.
        prefix = f"helm-{children.process_tag()}-"
        path = Path(tempfile.mkdtemp(prefix=prefix, dir=self.home / "work"))
        try:
            yield path
        finally:
            shutil.rmtree(path, ignore_errors=True)

    @contextmanager
    def call(self) -> Iterator[None]:
        """One public call: ``last_retries`` counts from its start (nested calls add up)."""
        depth = int(getattr(self._local, "depth", 0))
        if depth == 0:
            self._local.retries = 0
        self._local.depth = depth + 1
        try:
            yield
        finally:
            self._local.depth = depth

    def retrying(
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
            except TransientAttempt as transient:
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

    def run(
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
    ) -> HelmResult:
        if work is None:
            with self.workdir() as own:
                return self.run(
                    argv, what=what, timeout=timeout, check=check, mask=mask, stdin=stdin,
                    description=description, work=own,
                )  # fmt: skip
        log.debug("helm: %s", " ".join(argv))
        limit = timeout or self._read_timeout
        try:
            child = children.spawn(
                [self.binary, *argv],
                env=self.env(work),
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
        result = HelmResult(stdout, stderr, child.process.returncode)
        if child.stopped:
            raise HelmStopped(f"{what}: stopped: gitopsbot is shutting down (exit {result.code})")
        if check and result.code != 0:
            raise self.failure(argv, result, what=what, mask=mask)
        return result

    def remove_leftover_workdirs(self) -> None:
        for path in (self.home / "work").glob("helm-*"):
            if not children.left_by_dead_process(path.name):
                continue
            log.info("removing %s, left by a process that is gone", path)
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)

    # -- errors ------------------------------------------------------------------------------

    def failure(
        self,
        argv: list[str],
        result: HelmResult,
        *,
        what: str,
        mask: Sequence[str] = (),
        chart: str = "",
    ) -> HelmError:
        tail = redact_secrets(result.stderr.strip()[-STDERR_TAIL:], mask)
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


def attempt_error(error: HelmError, result: HelmResult) -> Exception:
    """What a failed attempt raises: ``error`` (from ``HelmRunner.failure``), or
    ``TransientAttempt`` wrapping it (retried) when helm's stderr says the failure was
    transient; a locked release never is."""
    if is_transient(result.stderr) and not isinstance(error, HelmReleaseLocked):
        return TransientAttempt(error)
    return error
