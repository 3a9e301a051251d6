"""One read of each Helm release per pass, shared by whoever asks in that pass.

Intake (``read_deployed``), the backup, the Helm upgrade and the rollback each read the
release (history, status, values: one list of Helm's release Secrets through the API with
``adapters.helm_storage``, or one helm subprocess each where helm stores releases elsewhere).
Within one pass they ask about the same release, so ``PassReads``
gives the pass an executor whose Helm port (``ReleaseReads``) remembers each answer and
whose Cluster port (``WritesForget``) forgets them all on every write.

Correctness comes first, so the memory is small and short:

- it lives for one pass (``PassBase.pass_reads``): nothing read in an earlier pass is ever
  used, whatever happened in between (a person's helm, another replica);
- every write made through it forgets everything read: ``upgrade`` and ``rollback`` (before
  and after, failed or not: a failed helm leaves a revision), any Helm or Cluster method not
  known to be a read (``mark_helm_release_failed`` included: the crash-safety logic of
  ``steps.helm_upgrade`` must read the revision it just marked failed afresh);
- what is not a read of the release is never remembered: ``operation_alive`` (a process),
  ``release_mark`` (the idle check's, which exists to see a change), ``pull``, every
  Cluster read.

A pass runs on one thread, and each pass has its own ``PassReads``; the lock only guards
against a step that hands work to another thread.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from gitopsbot.bot.steps.executor import Executor
from gitopsbot.core.charts.observed import HelmReleaseInfo
from gitopsbot.ports.cluster import Cluster
from gitopsbot.ports.helm import ChartRef, Helm, RollbackRequest, UpgradeRequest

# Cluster methods that only read: passed through. Any other method is taken for a write.
_CLUSTER_READS = frozenset(
    {
        "get",
        "list",
        "list_metadata",
        "deployment_ready",
        "wait_deployment_ready",
        "wait_for_change",
        "read_secret",
    }
)
R = TypeVar("R")


class ReleaseReads(Helm):
    """The Helm port of one pass: ``history``, ``status`` and ``get_values`` are asked of
    helm once per (release, namespace) until something writes."""

    def __init__(self, helm: Helm) -> None:
        self._helm = helm
        self._lock = threading.Lock()
        self._history: dict[tuple[str, str], list[HelmReleaseInfo]] = {}
        self._status: dict[tuple[str, str], HelmReleaseInfo | None] = {}
        self._values: dict[tuple[str, str, int | None], dict[str, Any]] = {}

    def forget(self) -> None:
        """Something may have changed a release: the next read asks helm."""
        with self._lock:
            self._history.clear()
            self._status.clear()
            self._values.clear()

    # -- reads, remembered ----------------------------------------------------------------

    @property
    def last_retries(self) -> int:
        return self._helm.last_retries

    def status(self, release: str, namespace: str) -> HelmReleaseInfo | None:
        key = (namespace, release)
        with self._lock:
            if key in self._history:  # the latest entry of the history is the status
                history = self._history[key]
                return history[-1] if history else None
            if key in self._status:
                return self._status[key]
        info = self._helm.status(release, namespace)
        with self._lock:
            self._status[key] = info
        return info

    def history(self, release: str, namespace: str) -> list[HelmReleaseInfo]:
        key = (namespace, release)
        with self._lock:
            if key in self._history:
                return list(self._history[key])
        found = self._helm.history(release, namespace)
        with self._lock:
            self._history[key] = list(found)
        return list(found)

    def get_values(
        self, release: str, namespace: str, revision: int | None = None
    ) -> dict[str, Any]:
        key = (namespace, release, revision)
        with self._lock:
            if key in self._values:
                return copy.deepcopy(self._values[key])  # callers may change what they get
        values = self._helm.get_values(release, namespace, revision)
        with self._lock:
            self._values[key] = copy.deepcopy(values)
        return values

    # -- not remembered -------------------------------------------------------------------

    def operation_alive(self, description: str) -> bool:
        return self._helm.operation_alive(description)

    def release_mark(self, release: str, namespace: str) -> str | None:
        return self._helm.release_mark(release, namespace)

    def pull(self, chart: ChartRef, version: str, dest: Path) -> Path:
        return self._helm.pull(chart, version, dest)

    # -- writes: forget before and after --------------------------------------------------

    def upgrade(self, request: UpgradeRequest) -> HelmReleaseInfo:
        return _forgetting(self._helm.upgrade, self.forget)(request)

    def rollback(self, request: RollbackRequest) -> HelmReleaseInfo:
        return _forgetting(self._helm.rollback, self.forget)(request)

    def __getattr__(self, name: str) -> Any:
        # A Helm method added later and not listed here (an uninstall, say) counts as a write.
        if name.startswith("__"):
            raise AttributeError(name)
        found = getattr(self._helm, name)
        return _forgetting(found, self.forget) if callable(found) else found


class WritesForget:
    """The ``Cluster`` port of one pass: reads pass through, and every other call (helm's
    storage is Secrets in the cluster: ``mark_helm_release_failed`` rewrites one) makes
    ``forget`` forget the pass's release reads."""

    def __init__(self, cluster: Cluster, forget: Callable[[], None]) -> None:
        self._cluster = cluster
        self._forget = forget

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        found = getattr(self._cluster, name)
        if name in _CLUSTER_READS or not callable(found):
            return found
        return _forgetting(found, self._forget)


def _forgetting(call: Callable[..., R], forget: Callable[[], None]) -> Callable[..., R]:
    """``call`` as a write: what was read is forgotten before it and after it (a failed
    helm leaves a revision too)."""

    def write(*args: Any, **kwargs: Any) -> R:
        forget()
        try:
            return call(*args, **kwargs)
        finally:
            forget()

    return write


class PassReads:
    """What one pass has read: ``executor(e)`` is ``e`` with its Helm reads shared by the
    pass (the same wrapper every time the pass asks for ``e``)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._executors: dict[int, tuple[Executor, Executor]] = {}

    def executor(self, executor: Executor) -> Executor:
        with self._lock:
            known = self._executors.get(id(executor))
            if known is not None and known[0] is executor:
                return known[1]
            reads = ReleaseReads(executor.helm)
            # A copy keeps the executor's class and settings (a test's subclass, a
            # smoke-test timeout); only its two ports change.
            shared = copy.copy(executor)
            shared.helm = reads
            shared.cluster = WritesForget(executor.cluster, reads.forget)
            self._executors[id(executor)] = (executor, shared)
            return shared
