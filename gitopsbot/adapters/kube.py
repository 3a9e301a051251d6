"""The Cluster port over the Kubernetes API: ``KubeCluster``, reads, writes, logs, Secrets.

Generic access by apiVersion/kind, through the client's ``ApiClient`` (auth, TLS, proxy from
the kubeconfig); objects come back as plain dicts. What it stands on, one idea a module:
kube_access.py (the state, discovery, and the one choke point every request passes, sent,
mapped to ``errors.Kube*`` and retried as kube_request.py does it for every Kubernetes
adapter), kube_waits.py (waits on watches, polling where a watch is refused) and
kube_crds.py (CRDs Established, then served).
"""

from __future__ import annotations

import builtins
import json
import logging
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kubernetes import config as kube_config
from kubernetes.client import ApiClient

from gitopsbot.adapters.kube_access import _ref, _sort_key
from gitopsbot.adapters.kube_crds import KubeCrds
from gitopsbot.adapters.kube_request import (
    KUBECONFIG_ERRORS,
    MESSAGE_LIMIT,
    RetryPolicy,
    configuration_from_kubeconfig,
    error_for,
    resource_path,
)
from gitopsbot.adapters.kube_waits import KubeWaits
from gitopsbot.core.charts.kube_objects import (
    CrdDocumentError,
    parse_crd_documents,
)
from gitopsbot.core.charts.observed import CrdApplyResult
from gitopsbot.errors import (
    ConfigError,
    KubeError,
    KubeFailed,
    KubeInvalid,
    KubeNotFound,
)
from gitopsbot.ports.cluster import (
    FIELD_MANAGER,
    Cluster,
    unlock_helm_release,
)

log = logging.getLogger(__name__)

# A list of metadata only (client-go's metadata client asks the same): the API server leaves
# out data and spec. JSON after it: a server that does not know the form answers the whole
# list, cut to metadata here.
METADATA_LIST = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json"


__all__ = [
    "MESSAGE_LIMIT",
    "METADATA_LIST",
    "KubeCluster",
    "RetryPolicy",
    "error_for",
    "new_cluster",
]


class KubeCluster(KubeWaits, KubeCrds, Cluster):
    """The Cluster port over one API server (one kubeconfig context)."""

    @classmethod
    def from_kubeconfig(
        cls, path: Path | str, context: str = "", *, context_source: str = "", **kwargs: Any
    ) -> KubeCluster:
        """A cluster from a kubeconfig file. ``context_source`` says where ``context`` was
        chosen (e.g. ``clusters/lab/release.yaml:4: kubeContext``) for the error message."""
        try:
            configuration = configuration_from_kubeconfig(path, context)
        except KUBECONFIG_ERRORS as err:
            raise ConfigError(_kubeconfig_problem(path, context, context_source, err)) from None
        return cls(ApiClient(configuration), **kwargs)

    # -- the port -------------------------------------------------------------------------

    def list(
        self,
        api_version: str,
        kind: str,
        namespace: str | None = None,
        label_selector: str | None = None,
    ) -> builtins.list[dict[str, Any]]:
        raw = self._read_list(api_version, kind, namespace, label_selector, what=f"{kind} list")
        decoded = json.loads(raw) if raw else {}
        data = decoded if isinstance(decoded, dict) else {}
        items = [dict(item) for item in data.get("items") or []]
        for item in items:  # list items carry no apiVersion/kind of their own
            item.setdefault("apiVersion", api_version)
            item.setdefault("kind", kind)
        return sorted(items, key=_sort_key)

    def list_metadata(
        self, api_version: str, kind: str, namespace: str | None, label_selector: str
    ) -> builtins.list[dict[str, Any]]:
        what = f"{kind} list (metadata)"
        raw = self._read_list(
            api_version, kind, namespace, label_selector, what=what, accept=METADATA_LIST
        )
        decoded = json.loads(raw) if raw else {}
        items = decoded.get("items") if isinstance(decoded, dict) else None
        found = [
            {"metadata": dict(item.get("metadata") or {})}
            for item in items or []
            if isinstance(item, dict)
        ]
        return sorted(found, key=_sort_key)

    def _read_list(
        self,
        api_version: str,
        kind: str,
        namespace: str | None,
        label_selector: str | None,
        *,
        what: str,
        accept: str = "application/json",
    ) -> bytes:
        """A collection's answer; none (b"") where the kind is not served or not found."""
        resource = self._resource(api_version, kind)
        if resource is None:
            return b""
        path = resource.path(api_version, namespace, None)
        query = [("labelSelector", label_selector)] if label_selector else []
        try:
            return self._request(
                "GET", path, what=what, query=query, body=None, content_type=None, accept=accept
            )
        except KubeNotFound:
            return b""

    def apply(
        self, obj: Mapping[str, Any], *, field_manager: str = FIELD_MANAGER, force: bool = False
    ) -> dict[str, Any]:
        api_version, kind, namespace, name = _identity(obj)
        resource = self._require(api_version, kind)
        if resource.namespaced and not namespace:
            raise KubeInvalid(f"{kind} {name}: metadata.namespace is required")
        path = resource.path(api_version, namespace, name)
        query = [("fieldManager", field_manager), ("force", "true" if force else "false")]
        return self._json(
            "PATCH",
            path,
            query=query,
            body=dict(obj),
            content_type="application/apply-patch+yaml",
            what=f"apply {kind} {_ref(namespace, name)}",
        )

    def create(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        api_version, kind, namespace, name = _identity(obj)
        resource = self._require(api_version, kind)
        path = resource.path(api_version, namespace, None)
        return self._json(
            "POST",
            path,
            query=[("fieldManager", FIELD_MANAGER)],
            body=dict(obj),
            content_type="application/json",
            what=f"create {kind} {_ref(namespace, name)}",
        )

    def patch_merge(
        self,
        api_version: str,
        kind: str,
        namespace: str | None,
        name: str,
        patch: Mapping[str, Any],
    ) -> dict[str, Any]:
        resource = self._require(api_version, kind)
        path = resource.path(api_version, namespace, name)
        return self._json(
            "PATCH",
            path,
            query=[("fieldManager", FIELD_MANAGER)],
            body=dict(patch),
            content_type="application/merge-patch+json",
            what=f"patch {kind} {_ref(namespace, name)}",
        )

    def delete(self, api_version: str, kind: str, namespace: str | None, name: str) -> bool:
        resource = self._resource(api_version, kind)
        if resource is None:
            return False
        path = resource.path(api_version, namespace, name)
        try:
            self._json("DELETE", path, what=f"delete {kind} {_ref(namespace, name)}")
        except KubeNotFound:
            return False
        return True

    def apply_crds(self, documents: Mapping[str, str]) -> builtins.list[CrdApplyResult]:
        try:
            crds = parse_crd_documents(documents)
        except CrdDocumentError as e:
            raise KubeInvalid(str(e)) from None
        if self._crd_applier is not None:
            return self.wait_served(self._crd_applier(documents), crds)
        applied: dict[str, str] = {}
        for crd in crds:
            name = crd["metadata"]["name"]
            try:
                self.apply(crd, field_manager=FIELD_MANAGER, force=True)
                applied[name] = ""
            except KubeError as e:
                applied[name] = str(e)
        self._discovery.clear()  # new or changed kinds
        return self.wait_served(self.wait_established(applied), crds)

    def container_log(
        self,
        namespace: str,
        pod: str,
        container: str,
        *,
        since: datetime | None = None,
        tail_lines: int = 200,
    ) -> str:
        # The endpoint ``read_namespaced_pod_log`` calls, through the one choke point (error
        # mapping, bounded retries); the client's method offers sinceSeconds only, and a
        # sinceTime computed here would not drift with the request's latency.
        query = [("container", container), ("tailLines", str(max(tail_lines, 0)))]
        query.append(("timestamps", "false"))
        if since is not None:
            at = since if since.tzinfo else since.replace(tzinfo=UTC)
            query.append(("sinceTime", at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")))
        what = f"log of container {container!r} of pod {_ref(namespace, pod)}"
        path = resource_path("v1", "pods", True, namespace, pod) + "/log"
        try:
            data = self._request("GET", path, what=what, query=query, body=None, content_type=None)
        except KubeFailed as e:
            # 400: the container is not in the pod, or has not started. The server's text
            # names the container and pod (or the waiting reason), never log lines.
            if f"{what}: HTTP 400" not in str(e):
                raise
            raise KubeInvalid(str(e)) from None
        return data.decode("utf-8", errors="replace")

    def mark_helm_release_failed(
        self, namespace: str, release: str, revision: int, reason: str
    ) -> bool:
        status = unlock_helm_release(
            self, namespace, release, revision, reason, modified_at=int(self._wall_clock())
        )
        if status is None:
            return False
        log.warning(
            "kube: helm release %s/%s revision %d marked failed (was %s): %s",
            namespace, release, revision, status, reason,
        )  # fmt: skip
        return True

    def release_fields(
        self,
        api_version: str,
        kind: str,
        namespace: str | None,
        name: str,
        manager: str = FIELD_MANAGER,
    ) -> bool:
        resource = self._require(api_version, kind)
        path = resource.path(api_version, namespace, name)
        what = f"{kind} {_ref(namespace, name)}"
        try:
            current = self._json("GET", path, what=what)
        except KubeNotFound:
            raise KubeNotFound(f"{what} not found") from None
        meta = current.get("metadata") or {}
        entries = meta.get("managedFields") or []
        kept = [e for e in entries if e.get("manager") != manager]
        if len(kept) == len(entries):
            return False
        # A non-apply write that sets managedFields is honoured as given (the API server's
        # decodeLiveOrNew); [{}] is the documented reset when nothing is left. The patch
        # changes no field, so ``manager`` gets no new entry from it.
        patch = {
            "metadata": {
                "resourceVersion": meta.get("resourceVersion"),
                "managedFields": kept or [{}],
            }
        }
        self._json(
            "PATCH",
            path,
            query=[("fieldManager", manager)],
            body=patch,
            content_type="application/merge-patch+json",
            what=f"release {manager}'s fields of {what}",
        )
        log.info("kube: %s no longer owns fields of %s", manager, what)
        return True


def new_cluster(kubeconfig: Path | str, context: str = "", **kwargs: Any) -> KubeCluster:
    """Build the adapter from a kubeconfig file and context (current context when "")."""
    return KubeCluster.from_kubeconfig(kubeconfig, context, **kwargs)


def _identity(obj: Mapping[str, Any]) -> tuple[str, str, str | None, str]:
    api_version = obj.get("apiVersion")
    kind = obj.get("kind")
    meta = obj.get("metadata") or {}
    name = meta.get("name")
    if not api_version or not kind or not name:
        raise KubeInvalid("object needs apiVersion, kind and metadata.name")
    return str(api_version), str(kind), meta.get("namespace") or None, str(name)


def _kubeconfig_problem(path: Path | str, context: str, source: str, err: Exception) -> str:
    """One line naming the chosen context, where it was chosen, the file and its contexts."""
    chosen = f"kube context {context!r}" if context else "the kubeconfig's current context"
    where = f" ({source})" if source else ""
    try:
        found, _ = kube_config.list_kube_config_contexts(  # type: ignore[no-untyped-call]
            config_file=str(path)
        )
        names = ", ".join(sorted(str(c.get("name", "")) for c in found or ())) or "none"
        known = f"; contexts in that file: {names}"
    except (kube_config.ConfigException, OSError, ValueError):
        known = "; the file could not be read"
    # The vendor message is short and names no secret (it quotes context names at most).
    reason = str(err).splitlines()[0] if str(err) else type(err).__name__
    return f"{chosen}{where}: cannot use kubeconfig {path}: {reason}{known}"
