"""The Kubernetes API as the executor needs it: generic objects by apiVersion/kind, CRDs, secrets.

Implemented by ``gitopsbot.adapters.kube.KubeCluster`` (kubernetes Python client; CRD apply by
``gitopsbot.adapters.kubectl`` or the client's own server-side apply) and by
``gitopsbot.testing.FakeCluster`` in memory; the same contract tests (tests/executor) run
against both. Objects are plain JSON-like dicts as the API server returns them.

Errors are ``gitopsbot.errors.Kube*``: KubeNotFound (404), KubeConflict (409: stale
resourceVersion or field-manager conflict), KubeInvalid (422), KubeForbidden (401/403),
KubeTooManyRequests (429, ``retry_after``), KubeServerError (5xx, transport). Messages never
contain Secret data.
"""

from __future__ import annotations

import builtins
from collections.abc import Mapping
from datetime import datetime
from typing import Any, Protocol

from gitopsbot.core.observed import CrdApplyResult, DeploymentReadiness

FIELD_MANAGER = "gitopsbot"
# The pod-template annotation ``kubectl rollout restart`` sets.
RESTARTED_AT = "kubectl.kubernetes.io/restartedAt"


class Cluster(Protocol):
    def get(
        self, api_version: str, kind: str, namespace: str | None, name: str
    ) -> dict[str, Any] | None:
        """The object, or None when it does not exist. ``namespace`` None for cluster-scoped."""
        ...

    def list(
        self,
        api_version: str,
        kind: str,
        namespace: str | None = None,
        label_selector: str | None = None,
    ) -> list[dict[str, Any]]:
        """Objects of a kind (all namespaces when ``namespace`` is None), sorted by
        (namespace, name). [] when the kind is not served (a CRD not yet installed)."""
        ...

    def apply(
        self, obj: Mapping[str, Any], *, field_manager: str = FIELD_MANAGER, force: bool = False
    ) -> dict[str, Any]:
        """Server-side apply of ``obj`` (apiVersion, kind, metadata.name[, namespace]).
        Returns the object as stored. A field owned by another manager → KubeConflict
        unless ``force``."""
        ...

    def create(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        """Create; KubeConflict when it already exists."""
        ...

    def patch_merge(
        self,
        api_version: str,
        kind: str,
        namespace: str | None,
        name: str,
        patch: Mapping[str, Any],
    ) -> dict[str, Any]:
        """JSON merge patch (RFC 7386): ``None`` values delete keys. KubeNotFound if absent.
        Used to open/close a pool's ``autoUpdate*`` switches on the TensorFusionCluster."""
        ...

    def delete(self, api_version: str, kind: str, namespace: str | None, name: str) -> bool:
        """Delete; True when something was deleted, False when it was already gone."""
        ...

    def restart_deployment(self, namespace: str, name: str, *, at: datetime) -> None:
        """What ``kubectl rollout restart`` does: set the pod template annotation
        ``kubectl.kubernetes.io/restartedAt`` to ``at`` (RFC 3339). R24."""
        ...

    def deployment_ready(self, namespace: str, name: str) -> DeploymentReadiness:
        """Whether the Deployment's latest generation is fully rolled out and available
        (KubeNotFound if absent). The result is truthy when ready."""
        ...

    def apply_crds(self, documents: Mapping[str, str]) -> builtins.list[CrdApplyResult]:
        """R7: server-side apply with force-conflicts of every CRD in ``documents``
        (file name → YAML text, one or more CRDs per file; non-CRD documents are refused
        with KubeInvalid), then wait for each to be Established. One result per CRD,
        sorted by name; a CRD that did not become Established has ``established=False``
        and a message (no exception), so the caller decides."""
        ...

    def read_secret(self, namespace: str, name: str, key: str) -> str:
        """The decoded value of ``data[key]`` of a Secret. KubeNotFound names the Secret and
        key when either is missing; the value never appears in any error or log."""
        ...
