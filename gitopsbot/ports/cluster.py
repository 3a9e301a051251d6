"""The Kubernetes API as the executor needs it: generic objects by apiVersion/kind, CRDs, secrets.

Implemented by ``gitopsbot.adapters.kube.KubeCluster`` (kubernetes Python client; CRD apply by
``gitopsbot.adapters.kubectl`` or the client's own server-side apply) and by
``gitopsbot.testing.FakeCluster`` in memory; the same contract tests (tests/executor) run
against both. Objects are plain JSON-like dicts as the API server returns them.

Errors are ``gitopsbot.errors.Kube*``: KubeNotFound (404), KubeConflict (409: stale
resourceVersion or field-manager conflict), KubeInvalid (422), KubeForbidden (401/403),
KubeTooManyRequests (429, ``retry_after``), KubeServerError (5xx, transport). Messages never
contain Secret data.

Two break-glass operations live here too, for a person or a recovery step, never for the
normal upgrade path: ``mark_helm_release_failed`` (a release left pending-* by a dead helm)
and ``release_fields`` (the bot's field ownership, so a person's server-side ``helm upgrade``
does not conflict with it). ``unlock_helm_release`` is the unlock both implementations
share, over the port itself and ``failed_helm_release_patch`` (Helm's storage format), and
``decode_helm_release`` reads a revision's record (also for ``adapters.helm_storage``): pure,
no I/O of their own.
"""

from __future__ import annotations

import base64
import binascii
import builtins
import gzip
import json
from collections.abc import Collection, Mapping
from datetime import UTC, datetime
from typing import Any, Protocol

from gitopsbot.core.charts.kube_objects import deployment_readiness
from gitopsbot.core.charts.observed import CrdApplyResult, DeploymentReadiness
from gitopsbot.errors import KubeInvalid, KubeNotFound

FIELD_MANAGER = "gitopsbot"
# The pod-template annotation ``kubectl rollout restart`` sets.
RESTARTED_AT = "kubectl.kubernetes.io/restartedAt"
# Helm's default storage driver: one Secret per revision (helm/pkg/storage/driver/secrets.go).
HELM_RELEASE_SECRET_TYPE = "helm.sh/release.v1"
HELM_PENDING_STATUSES = frozenset({"pending-install", "pending-upgrade", "pending-rollback"})
_GZIP_MAGIC = b"\x1f\x8b\x08"


class Cluster(Protocol):
    """Implementations inherit it: ``restart_deployment``, ``deployment_ready`` and
    ``read_secret`` are written here once, over ``get`` and ``patch_merge``."""

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

    def list_metadata(
        self, api_version: str, kind: str, namespace: str | None, label_selector: str
    ) -> builtins.list[dict[str, Any]]:
        """``list``, but each object is only ``{"metadata": ...}`` (name, labels,
        resourceVersion...): the API server's PartialObjectMetadataList, so a Secret's data
        never crosses the wire. Sorted and [] as ``list``."""
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
        stamp = at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        patch = {"spec": {"template": {"metadata": {"annotations": {RESTARTED_AT: stamp}}}}}
        self.patch_merge("apps/v1", "Deployment", namespace, name, patch)

    def deployment_ready(self, namespace: str, name: str) -> DeploymentReadiness:
        """Whether the Deployment's latest generation is fully rolled out and available
        (KubeNotFound if absent). The result is truthy when ready."""
        deployment = self.get("apps/v1", "Deployment", namespace, name)
        if deployment is None:
            raise KubeNotFound(f"Deployment {namespace}/{name} not found")
        return deployment_readiness(deployment)

    def wait_deployment_ready(
        self, namespace: str, name: str, *, timeout: float
    ) -> DeploymentReadiness:
        """``deployment_ready``, waiting up to ``timeout`` seconds for it to become true: at
        once when it is ready; otherwise it follows the API server's watch of that Deployment
        from the resourceVersion just read (no change between the read and the watch is
        lost) and returns the moment a view is ready, or the last view when the timeout
        passes (falsy). A watch that breaks (410 Gone, connection dropped) or is refused
        (RBAC without ``watch``) falls back to reading again, and to a short adaptive poll:
        never an error of its own. ``timeout`` <= 0 is one read. KubeNotFound if absent."""
        ...

    def wait_for_change(
        self,
        api_version: str,
        kind: str,
        namespace: str | None,
        *,
        names: Collection[str] | None = None,
        since: Mapping[str, str] | None = None,
        timeout: float,
    ) -> bool:
        """Wait up to ``timeout`` seconds for an object of a kind (``names`` of it; all when
        None; ``namespace`` None: every namespace, or cluster-scoped) to be added, changed or
        deleted; True as soon as one is, False when the timeout passed without a change.

        ``since``: name → the resourceVersion the caller read ("" for absent; the key is
        "namespace/name" when a namespaced kind is watched across namespaces), its names
        being the ones watched when ``names`` is None: a difference from what is stored now
        is a change at once, so nothing that happened after the caller's read is missed.
        Without it, only changes after the call count. Follows the API server's watch; a
        broken or refused watch falls back to reading again (and to a short adaptive poll),
        never an error of its own. ``timeout`` <= 0 is one comparison."""
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
        secret = self.get("v1", "Secret", namespace, name)
        if secret is None:
            raise KubeNotFound(f"Secret {namespace}/{name} not found")
        encoded = (secret.get("data") or {}).get(key)
        if encoded is None:
            raise KubeNotFound(f"Secret {namespace}/{name} has no key {key!r}")
        try:
            return base64.b64decode(encoded, validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            # The value is never part of the message.
            raise KubeInvalid(
                f"Secret {namespace}/{name} key {key!r} is not base64 UTF-8 text"
            ) from None

    def container_log(
        self,
        namespace: str,
        pod: str,
        container: str,
        *,
        since: datetime | None = None,
        tail_lines: int = 200,
    ) -> str:
        """What ``kubectl logs <pod> -c <container> [--since-time=<since>] --tail=<tail_lines>``
        prints: the last ``tail_lines`` lines (0: none) of the container's current log, only
        those written at or after ``since`` (second precision, as the API server takes it),
        without the kubelet's timestamps. R18 reads the ``cluster-agent`` container of the
        controller pods with it.

        KubeNotFound when the pod does not exist; KubeInvalid when the container is not in the
        pod (the API server's 400 "container X is not valid for pod Y") or has not started
        (400 "... is waiting to start"); KubeForbidden without ``get`` on ``pods/log``;
        KubeServerError for 5xx and transport errors (retried a bounded number of times
        first). Error messages never include log text. A pod that is not yet bound to a node
        has an empty log (the API server answers 200 with nothing)."""
        ...

    def mark_helm_release_failed(
        self, namespace: str, release: str, revision: int, reason: str
    ) -> bool:
        """Deliberately unlock a Helm release stuck in pending-* by a helm that died (what
        Flux's helm-controller "unlock" does): in Helm's Secret storage, revision
        ``revision`` of ``release`` (Secret ``sh.helm.release.v1.<release>.v<revision>``)
        gets ``info.status`` "failed", ``reason`` appended to ``info.description``, and the
        Secret's ``status`` label "failed" (``modifiedAt`` refreshed, as helm's own update
        does). Written back guarded by the resourceVersion read.

        True when it changed the revision; False when the revision was not pending (already
        failed, deployed, superseded...: idempotent). KubeNotFound when the Secret does not
        exist; KubeInvalid when it is not that revision of that release in Helm's format;
        KubeConflict (transient) when the Secret changed since it was read (a helm still
        running): read the history again before retrying. Only call this when no helm can
        still be working on the release. The release payload (values, with secrets) never
        appears in an error or a log."""
        ...

    def release_fields(
        self,
        api_version: str,
        kind: str,
        namespace: str | None,
        name: str,
        manager: str = FIELD_MANAGER,
    ) -> bool:
        """Give up ``manager``'s field ownership of an object: its entries (every operation and
        subresource) leave ``metadata.managedFields``, every other entry is kept, so the
        fields it owned alone become unowned and a later server-side apply (helm 4's
        upgrade) takes them without a conflict. Values are not changed. A non-apply write that
        sets managedFields is honoured by the API server; the write carries the
        resourceVersion read (KubeConflict if the object changed meanwhile: try again).

        True when entries were removed, False when ``manager`` had none (idempotent).
        KubeNotFound when the object does not exist. If no other entry remains, the list is
        reset (``[{}]``): the API server then tracks no updates, and its next server-side
        apply attributes the existing fields to "before-first-apply" first."""
        ...


def helm_release_secret_name(release: str, revision: int) -> str:
    return f"sh.helm.release.v1.{release}.v{revision}"


def decode_helm_release(data: str) -> Any:
    """The release record a Helm release Secret's ``data.release`` holds: Kubernetes base64
    of Helm's own base64 of gzip (or, from old helms, plain) JSON, decoded as helm's storage
    driver does. Raises ValueError, with a message free of the payload (the record holds the
    values, secrets included), when it is not that."""
    try:
        stored = base64.b64decode(base64.b64decode(data, validate=True), validate=True)
        if stored[:3] == _GZIP_MAGIC:
            stored = gzip.decompress(stored)
        return json.loads(stored)
    except (binascii.Error, OSError, EOFError, ValueError):
        raise ValueError("data.release is not a Helm release record") from None


def unlock_helm_release(
    cluster: Cluster, namespace: str, release: str, revision: int, reason: str, *, modified_at: int
) -> str | None:
    """``mark_helm_release_failed`` over the port's ``get`` and ``patch_merge``, written once
    for every implementation: the status the revision had when it was changed, None when it
    was not pending."""
    name = helm_release_secret_name(release, revision)
    secret = cluster.get("v1", "Secret", namespace, name)
    if secret is None:
        raise KubeNotFound(
            f"Secret {namespace}/{name} not found: release {release} has no revision "
            f"{revision} in Helm's Secret storage"
        )
    try:
        found = failed_helm_release_patch(
            secret, release=release, revision=revision, reason=reason, modified_at=modified_at
        )
    except ValueError as e:  # its message never quotes the payload
        raise KubeInvalid(f"Secret {namespace}/{name} {e}") from None
    if found is None:
        return None
    patch, status = found
    cluster.patch_merge("v1", "Secret", namespace, name, patch)
    return status


def failed_helm_release_patch(
    secret: Mapping[str, Any], *, release: str, revision: int, reason: str, modified_at: int
) -> tuple[dict[str, Any], str] | None:
    """The JSON merge patch that marks a pending Helm release revision failed, and the status
    it had; None when that status is not pending-*.

    ``data.release`` is Kubernetes base64 of Helm's own base64 of gzip (or, from old helms,
    plain) JSON; the patch writes it back the way helm does (gzip, best compression) and
    carries the Secret's resourceVersion as a precondition. Raises ValueError, with a message
    free of the payload, when the Secret is not revision ``revision`` of ``release``."""
    if secret.get("type") != HELM_RELEASE_SECRET_TYPE:
        raise ValueError(f"is not of type {HELM_RELEASE_SECRET_TYPE}")
    data = (secret.get("data") or {}).get("release")
    if not isinstance(data, str):
        raise ValueError("has no data.release")
    record = decode_helm_release(data)
    info = record.get("info") if isinstance(record, dict) else None
    if not isinstance(info, dict) or record.get("name") != release:
        raise ValueError(f"is not a Helm release record of {release}")
    if record.get("version") != revision:
        raise ValueError(f"holds revision {record.get('version')!r}, not {revision}")
    status = str(info.get("status") or "")
    if status not in HELM_PENDING_STATUSES:
        return None
    old = str(info.get("description") or "")
    info["status"] = "failed"
    info["description"] = f"{old}; {reason}" if old else reason
    packed = gzip.compress(
        json.dumps(record, separators=(",", ":"), ensure_ascii=False).encode(), 9, mtime=0
    )
    meta: dict[str, Any] = {"labels": {"status": "failed", "modifiedAt": str(modified_at)}}
    version = (secret.get("metadata") or {}).get("resourceVersion")
    if version:
        meta["resourceVersion"] = version
    encoded = base64.b64encode(base64.b64encode(packed)).decode()
    return {"metadata": meta, "data": {"release": encoded}}, status
