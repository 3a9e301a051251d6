"""The Cluster port over the Kubernetes API: the only module that imports ``kubernetes``.

Generic access by apiVersion/kind: the resource's plural and scope come from legacy discovery
(``/api/v1``, ``/apis/<group>/<version>``), cached per group-version and refreshed once on a
miss (a CRD applied a moment ago). Requests go through the client's ``ApiClient`` (auth, TLS,
proxy from the kubeconfig) and come back as plain dicts.

One choke point (style-research §6.5): every request passes ``_request``, which sends it the
way every Kubernetes adapter does (kube_request.py): HTTP errors mapped to ``errors.Kube*``
with a truncated, secret-free message, transient failures retried a bounded number of times,
honouring Retry-After.
"""

from __future__ import annotations

import base64
import binascii
import builtins
import json
import logging
import math
import time
from collections.abc import Callable, Collection, Generator, Iterable, Mapping
from contextlib import closing
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import urllib3
from kubernetes import config as kube_config
from kubernetes.client import ApiClient

from gitopsbot.adapters.kube_request import (
    KUBECONFIG_ERRORS,
    MESSAGE_LIMIT,
    Failures,
    RetryPolicy,
    Served,
    configuration_from_kubeconfig,
    discovery_path,
    error_for,
    open_checked,
    read,
    resource_path,
    retrying,
    served_kinds,
    status_text,
    stream_lines,
    watch_query,
)
from gitopsbot.core.kube_objects import (
    CrdDocumentError,
    condition_status,
    deployment_readiness,
    parse_crd_documents,
)
from gitopsbot.core.observed import CrdApplyResult, DeploymentReadiness
from gitopsbot.errors import (
    ConfigError,
    KubeError,
    KubeFailed,
    KubeInvalid,
    KubeNotFound,
)
from gitopsbot.ports.cluster import (
    FIELD_MANAGER,
    RESTARTED_AT,
    failed_helm_release_patch,
    helm_release_secret_name,
)

log = logging.getLogger(__name__)

CRD_API_VERSION = "apiextensions.k8s.io/v1"
# Where a watch is refused (RBAC without ``watch``) or breaks, waits poll: from
# ``poll_seconds``, doubling up to this, so a long wait costs a read a second at most.
WAIT_POLL_MAX_SECONDS = 1.0
# Beyond a watch's own timeoutSeconds, how long a silent connection is trusted before the
# wait reads again (the server ends the stream itself at timeoutSeconds).
WATCH_READ_GRACE_SECONDS = 2.0
# A list of metadata only (client-go's metadata client asks the same): the API server leaves
# out data and spec. JSON after it: a server that does not know the form answers the whole
# list, cut to metadata here.
METADATA_LIST = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json"


class _WatchBroke(Exception):
    """The watch ended early (410 Gone, a dropped connection, a 5xx): read again."""


class _WatchRefused(Exception):
    """The server will not watch this kind for us (403, 404, 405): poll instead."""


__all__ = [
    "MESSAGE_LIMIT",
    "METADATA_LIST",
    "KubeCluster",
    "RetryPolicy",
    "error_for",
    "new_cluster",
]
_DEFAULT_RETRY = RetryPolicy()  # frozen: one default serves every adapter


class KubeCluster:
    """``ports.cluster.Cluster`` over one API server (one kubeconfig context)."""

    def __init__(
        self,
        api_client: ApiClient,
        *,
        retry: RetryPolicy = _DEFAULT_RETRY,
        request_timeout_seconds: float = 30.0,
        crd_established_timeout_seconds: float = 60.0,
        poll_seconds: float = 0.2,
        sleep: Callable[[float], None] = time.sleep,
        monotonic: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
        crd_applier: Callable[[Mapping[str, str]], builtins.list[CrdApplyResult]] | None = None,
        pause: Callable[[float], None] = time.sleep,
    ) -> None:
        self._client = api_client
        self._retry = retry
        self._timeout = request_timeout_seconds
        self._crd_timeout = crd_established_timeout_seconds
        self._poll = poll_seconds
        self._sleep = sleep
        self._monotonic = monotonic
        self._wall_clock = wall_clock
        self._crd_applier = crd_applier
        self._pause = pause
        self._discovery: dict[str, dict[str, Served] | None] = {}
        self._unwatchable: set[tuple[str, str]] = set()  # refused once: poll from then on

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

    def close(self) -> None:
        self._client.close()  # type: ignore[no-untyped-call]

    # -- the port -------------------------------------------------------------------------

    def get(
        self, api_version: str, kind: str, namespace: str | None, name: str
    ) -> dict[str, Any] | None:
        resource = self._resource(api_version, kind)
        if resource is None:
            return None
        path = self._path(api_version, resource, namespace, name)
        try:
            return self._json("GET", path, what=f"{kind} {_ref(namespace, name)}")
        except KubeNotFound:
            return None

    def list(
        self,
        api_version: str,
        kind: str,
        namespace: str | None = None,
        label_selector: str | None = None,
    ) -> builtins.list[dict[str, Any]]:
        resource = self._resource(api_version, kind)
        if resource is None:
            return []
        path = self._path(api_version, resource, namespace if resource.namespaced else None, None)
        query = [("labelSelector", label_selector)] if label_selector else []
        try:
            data = self._json("GET", path, query=query, what=f"{kind} list")
        except KubeNotFound:
            return []
        items = [dict(item) for item in data.get("items") or []]
        for item in items:  # list items carry no apiVersion/kind of their own
            item.setdefault("apiVersion", api_version)
            item.setdefault("kind", kind)
        return sorted(items, key=_sort_key)

    def list_metadata(
        self, api_version: str, kind: str, namespace: str | None, label_selector: str
    ) -> builtins.list[dict[str, Any]]:
        resource = self._resource(api_version, kind)
        if resource is None:
            return []
        path = self._path(api_version, resource, namespace if resource.namespaced else None, None)
        query = [("labelSelector", label_selector)] if label_selector else []
        try:
            raw = self._request(
                "GET", path, what=f"{kind} list (metadata)", query=query, body=None,
                content_type=None, accept=METADATA_LIST,
            )  # fmt: skip
        except KubeNotFound:
            return []
        decoded = json.loads(raw) if raw else {}
        items = decoded.get("items") if isinstance(decoded, dict) else None
        found = [
            {"metadata": dict(item.get("metadata") or {})}
            for item in items or []
            if isinstance(item, dict)
        ]
        return sorted(found, key=_sort_key)

    def apply(
        self, obj: Mapping[str, Any], *, field_manager: str = FIELD_MANAGER, force: bool = False
    ) -> dict[str, Any]:
        api_version, kind, namespace, name = _identity(obj)
        resource = self._require(api_version, kind)
        if resource.namespaced and not namespace:
            raise KubeInvalid(f"{kind} {name}: metadata.namespace is required")
        path = self._path(api_version, resource, namespace if resource.namespaced else None, name)
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
        path = self._path(api_version, resource, namespace if resource.namespaced else None, None)
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
        path = self._path(api_version, resource, namespace, name)
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
        path = self._path(api_version, resource, namespace, name)
        try:
            self._json("DELETE", path, what=f"delete {kind} {_ref(namespace, name)}")
        except KubeNotFound:
            return False
        return True

    def restart_deployment(self, namespace: str, name: str, *, at: datetime) -> None:
        stamp = at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        patch = {"spec": {"template": {"metadata": {"annotations": {RESTARTED_AT: stamp}}}}}
        self.patch_merge("apps/v1", "Deployment", namespace, name, patch)

    def deployment_ready(self, namespace: str, name: str) -> DeploymentReadiness:
        deployment = self.get("apps/v1", "Deployment", namespace, name)
        if deployment is None:
            raise KubeNotFound(f"Deployment {namespace}/{name} not found")
        return deployment_readiness(deployment)

    def wait_deployment_ready(
        self, namespace: str, name: str, *, timeout: float
    ) -> DeploymentReadiness:
        deadline = self._monotonic() + max(timeout, 0.0)
        deployment = self._deployment(namespace, name)
        interval = self._poll
        while not deployment_readiness(deployment):
            left = deadline - self._monotonic()
            if left <= 0:
                break
            version = str((deployment.get("metadata") or {}).get("resourceVersion") or "")
            if ("apps/v1", "Deployment") in self._unwatchable or not version:
                self._pause(min(interval, left))
                interval = min(interval * 2, WAIT_POLL_MAX_SECONDS)
            else:
                seen = self._follow(
                    "apps/v1", "Deployment", namespace, {name}, version, left, until=_ready
                )
                if seen is not None and seen[0] != "DELETED":
                    deployment = seen[1]
                    continue  # ready: the loop ends without another read
                interval = self._after_break(deadline, interval)
            deployment = self._deployment(namespace, name)  # the last view, or after a break
        return deployment_readiness(deployment)

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
        deadline = self._monotonic() + max(timeout, 0.0)
        wanted = set(names) if names is not None else set(since) if since is not None else None
        current, version = self._versions(api_version, kind, namespace, wanted)
        baseline = dict(since) if since is not None else current
        interval = self._poll
        while not _differs(baseline, current):
            left = deadline - self._monotonic()
            if left <= 0:
                return False
            if (api_version, kind) in self._unwatchable or not version:
                self._pause(min(interval, left))
                interval = min(interval * 2, WAIT_POLL_MAX_SECONDS)
            elif self._follow(api_version, kind, namespace, wanted, version, left, until=_any):
                return True
            else:
                interval = self._after_break(deadline, interval)
            current, version = self._versions(api_version, kind, namespace, wanted)
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

    def wait_served(
        self, results: builtins.list[CrdApplyResult], crds: Iterable[Mapping[str, Any]]
    ) -> builtins.list[CrdApplyResult]:
        """Poll discovery until each Established CRD's kind is served in every served version.

        A real kube-apiserver reports Established a few milliseconds before discovery lists
        the new kind (tests/executor/adapters/test_cluster_contract.py shows it); a step that
        uses the kind at once would find it "not served". A CRD whose kind is still missing at
        the deadline is reported not established, naming what is missing."""
        wanted: dict[str, builtins.list[tuple[str, str]]] = {}
        for crd in crds:
            spec = crd.get("spec") or {}
            kind = str((spec.get("names") or {}).get("kind") or "")
            group = str(spec.get("group") or "")
            wanted[str(crd["metadata"]["name"])] = [
                (f"{group}/{v['name']}", kind)
                for v in spec.get("versions") or []
                if isinstance(v, Mapping) and v.get("served", True) and kind and group
            ]
        deadline = self._monotonic() + self._crd_timeout
        missing: dict[str, builtins.list[str]] = {}
        while True:
            missing.clear()
            for result in results:
                for api_version, kind in wanted.get(result.name, []) if result.ok else []:
                    self._discovery.pop(api_version, None)
                    if self._resource_cached(api_version, kind) is None:
                        missing.setdefault(result.name, []).append(f"{kind} in {api_version}")
            if not missing or self._monotonic() >= deadline:
                break
            self._sleep(self._poll)
        return [
            replace(
                r,
                established=False,
                message=f"Established, but not served after {self._crd_timeout:g}s: "
                + ", ".join(missing[r.name]),
            )
            if r.name in missing
            else r
            for r in results
        ]

    def read_secret(self, namespace: str, name: str, key: str) -> str:
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
        name = helm_release_secret_name(release, revision)
        secret = self.get("v1", "Secret", namespace, name)
        if secret is None:
            raise KubeNotFound(
                f"Secret {namespace}/{name} not found: release {release} has no revision "
                f"{revision} in Helm's Secret storage"
            )
        try:
            found = failed_helm_release_patch(
                secret,
                release=release,
                revision=revision,
                reason=reason,
                modified_at=int(self._wall_clock()),
            )
        except ValueError as e:  # its message never quotes the payload
            raise KubeInvalid(f"Secret {namespace}/{name} {e}") from None
        if found is None:
            return False
        patch, status = found
        self.patch_merge("v1", "Secret", namespace, name, patch)
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
        path = self._path(api_version, resource, namespace, name)
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

    # -- CRDs ----------------------------------------------------------------------------

    def wait_established(self, applied: Mapping[str, str]) -> builtins.list[CrdApplyResult]:
        """Poll each applied CRD (name → apply error, "" when applied) until Established."""
        deadline = self._monotonic() + self._crd_timeout
        pending = {name for name, error in applied.items() if not error}
        seen: dict[str, dict[str, Any]] = {}
        while True:
            for name in sorted(pending):
                crd = self.get(CRD_API_VERSION, "CustomResourceDefinition", None, name)
                if crd is not None:
                    seen[name] = crd
                    if condition_status(crd, "Established") == "True":
                        pending.discard(name)
            if not pending or self._monotonic() >= deadline:
                break
            self._sleep(self._poll)
        results = []
        for name, error in sorted(applied.items()):
            crd = seen.get(name, {})
            stored = tuple((crd.get("status") or {}).get("storedVersions") or ())
            if error:
                results.append(CrdApplyResult(name, False, False, stored, error))
            elif name in pending:
                message = f"not Established after {self._crd_timeout:g}s"
                results.append(CrdApplyResult(name, True, False, stored, message))
            else:
                results.append(CrdApplyResult(name, True, True, stored))
        return results

    # -- waits ----------------------------------------------------------------------------

    def _deployment(self, namespace: str, name: str) -> dict[str, Any]:
        deployment = self.get("apps/v1", "Deployment", namespace, name)
        if deployment is None:
            raise KubeNotFound(f"Deployment {namespace}/{name} not found")
        return deployment

    def _after_break(self, deadline: float, interval: float) -> float:
        """A watch that ended before the deadline broke: pause (growing) before the next,
        so a server that keeps cutting watches is not asked again in a tight loop."""
        left = deadline - self._monotonic()
        if left > 0:
            self._pause(min(interval, left))
        return min(interval * 2, WAIT_POLL_MAX_SECONDS)

    def _versions(
        self, api_version: str, kind: str, namespace: str | None, names: set[str] | None
    ) -> tuple[dict[str, str], str]:
        """name → resourceVersion of the objects waited on, and the version to watch from:
        one ``get`` for one name (RBAC may grant get alone), else a list."""
        resource = self._resource(api_version, kind)
        if resource is None:
            return {}, ""
        if names is not None and len(names) == 1 and (namespace or not resource.namespaced):
            (name,) = names
            found = self.get(api_version, kind, namespace, name)
            if found is None:
                return {}, ""  # nothing to watch from: the wait polls until it appears
            version = str(found["metadata"].get("resourceVersion") or "")
            return {name: version}, version
        path = self._path(api_version, resource, namespace if resource.namespaced else None, None)
        try:
            data = self._json("GET", path, what=f"{kind} list")
        except KubeNotFound:
            return {}, ""
        across = resource.namespaced and not namespace
        found_versions = {}
        for item in data.get("items") or []:
            meta = item.get("metadata") or {}
            key = _watch_key(meta, across)
            if names is None or key in names:
                found_versions[key] = str(meta.get("resourceVersion") or "")
        return found_versions, str((data.get("metadata") or {}).get("resourceVersion") or "")

    def _follow(
        self,
        api_version: str,
        kind: str,
        namespace: str | None,
        names: set[str] | None,
        version: str,
        timeout: float,
        *,
        until: Callable[[str, dict[str, Any]], bool],
    ) -> tuple[str, dict[str, Any]] | None:
        """Watch from ``version`` for up to ``timeout`` seconds: the first event (type,
        object) of a watched name for which ``until`` holds; None when the watch ended
        without one (timed out, broke: the caller reads again). A refused watch marks the
        kind unwatchable for this adapter (the caller polls from then on)."""
        try:
            with closing(
                self._watch(api_version, kind, namespace, names, version, timeout)
            ) as events:
                for etype, obj in events:
                    if until(etype, obj):
                        return etype, obj
        except _WatchRefused as e:
            log.info("kube: cannot watch %s (%s); polling instead", kind, e)
            self._unwatchable.add((api_version, kind))
        except _WatchBroke as e:
            log.debug("kube: %s watch ended: %s; reading again", kind, e)
        return None

    def _watch(
        self,
        api_version: str,
        kind: str,
        namespace: str | None,
        names: set[str] | None,
        version: str,
        timeout: float,
    ) -> Generator[tuple[str, dict[str, Any]]]:
        """The watched names' events (BOOKMARKs skipped) until the server ends the stream."""
        resource = self._resource(api_version, kind)
        if resource is None:
            raise _WatchRefused(f"{kind} is not served")
        path = self._path(api_version, resource, namespace if resource.namespaced else None, None)
        query = watch_query(version, max(1, math.ceil(timeout)))
        if names is not None and len(names) == 1 and (namespace or not resource.namespaced):
            query.append(("fieldSelector", f"metadata.name={next(iter(names))}"))
        across = resource.namespaced and not namespace
        read_timeout = timeout + WATCH_READ_GRACE_SECONDS
        response = open_checked(
            self._client, "GET", path, failures=_WATCH_FAILURES, query=query,
            timeout=(self._timeout, read_timeout),
        )  # fmt: skip
        raw = response.response  # the client never preloads: this streams
        try:
            for line in stream_lines(raw):
                event = json.loads(line)
                etype, obj = str(event.get("type")), event.get("object") or {}
                if etype == "ERROR":  # 410 Gone: the version is too old to watch from
                    raise _WatchBroke(f"watch error {obj.get('code')}: {obj.get('reason')}")
                if etype == "BOOKMARK":
                    continue
                if names is None or _watch_key(obj.get("metadata") or {}, across) in names:
                    yield etype, obj
        except (urllib3.exceptions.HTTPError, OSError, ValueError) as e:
            raise _WatchBroke(f"stream broke: {type(e).__name__}") from None
        finally:
            # Left mid-stream (the wait got its answer): the connection still carries the
            # watch, so it is closed rather than handed back to the pool with unread data.
            raw.close()
            raw.release_conn()

    # -- discovery and paths --------------------------------------------------------------

    def _resource_cached(self, api_version: str, kind: str) -> Served | None:
        if api_version not in self._discovery:
            self._discovery[api_version] = self._discover(api_version)
        kinds = self._discovery[api_version]
        return kinds.get(kind) if kinds is not None else None

    def _resource(self, api_version: str, kind: str) -> Served | None:
        for refresh in (False, True):
            if refresh or api_version not in self._discovery:
                self._discovery[api_version] = self._discover(api_version)
            kinds = self._discovery[api_version]
            if kinds is not None and kind in kinds:
                return kinds[kind]
        return None

    def _require(self, api_version: str, kind: str) -> Served:
        resource = self._resource(api_version, kind)
        if resource is None:
            raise KubeNotFound(f"the server does not serve {kind} in {api_version}")
        return resource

    def _discover(self, api_version: str) -> dict[str, Served] | None:
        try:
            data = self._json(
                "GET", discovery_path(api_version), what=f"discovery of {api_version}"
            )
        except KubeNotFound:
            return None
        return served_kinds(data)

    @staticmethod
    def _path(api_version: str, resource: Served, namespace: str | None, name: str | None) -> str:
        return resource_path(api_version, resource.plural, resource.namespaced, namespace, name)

    # -- the choke point -------------------------------------------------------------------

    def _json(
        self,
        method: str,
        path: str,
        *,
        what: str,
        query: Iterable[tuple[str, str]] = (),
        body: Any = None,
        content_type: str | None = None,
    ) -> dict[str, Any]:
        data = self._request(
            method, path, what=what, query=list(query), body=body, content_type=content_type
        )
        if not data:
            return {}
        decoded = json.loads(data)
        return decoded if isinstance(decoded, dict) else {}

    def _request(
        self,
        method: str,
        path: str,
        *,
        what: str,
        query: builtins.list[tuple[str, str]],
        body: Any,
        content_type: str | None,
        accept: str = "application/json",
    ) -> bytes:
        def once() -> bytes:
            return read(
                self._client, method, path, what=what, query=query, body=body,
                content_type=content_type, timeout=self._timeout, accept=accept,
            )  # fmt: skip

        return retrying(once, method=method, what=what, policy=self._retry, sleep=self._sleep)


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


def _ref(namespace: str | None, name: str) -> str:
    return f"{namespace}/{name}" if namespace else name


def _sort_key(item: Mapping[str, Any]) -> tuple[str, str]:
    meta = item.get("metadata") or {}
    return (str(meta.get("namespace") or ""), str(meta.get("name") or ""))


def _ready(_etype: str, obj: Mapping[str, Any]) -> bool:
    return bool(deployment_readiness(obj))


def _any(_etype: str, _obj: Mapping[str, Any]) -> bool:
    return True


def _watch_key(meta: Mapping[str, Any], across: bool) -> str:
    name = str(meta.get("name") or "")
    return f"{meta.get('namespace') or ''}/{name}" if across else name


def _differs(seen: Mapping[str, str], now: Mapping[str, str]) -> bool:
    """Whether the objects changed: one added, removed or at another resourceVersion ("" in
    ``seen`` stands for absent)."""
    keys = set(seen) | set(now)
    return any((seen.get(k) or "") != (now.get(k) or "") for k in keys)


def _watch_error(status: int, body: bytes | str | None) -> Exception:
    if status in (401, 403, 404, 405):
        reason, _ = status_text(body)
        return _WatchRefused(f"HTTP {status} {reason}".rstrip())
    return _WatchBroke(f"HTTP {status}")  # 410 Gone, 429, 5xx: read again


_WATCH_FAILURES = Failures(
    status=lambda status, body, _headers: _watch_error(status, body),
    transport=lambda e: _WatchBroke(f"transport error: {type(e).__name__}"),
)


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
