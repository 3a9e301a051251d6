"""FakeCluster: the cluster port in memory.

Contract tests: tests/executor/adapters/test_cluster_contract.py.
"""

from __future__ import annotations

import base64
import builtins
import copy
import hashlib
import threading
import time
from collections.abc import Collection, Mapping
from datetime import UTC, datetime
from typing import Any

from gitopsbot.core.charts.kube_objects import (
    CrdDocumentError,
    deployment_readiness,
    parse_crd_documents,
)
from gitopsbot.core.charts.observed import (
    CrdApplyResult,
    DeploymentReadiness,
)
from gitopsbot.errors import (
    KubeConflict,
    KubeInvalid,
    KubeNotFound,
)
from gitopsbot.ports.cluster import (
    FIELD_MANAGER,
    Cluster,
    helm_release_secret_name,
    unlock_helm_release,
)
from gitopsbot.sandbox.apiserver import pod_logs
from gitopsbot.sandbox.apiserver.errors import ApiError as SandboxApiError
from gitopsbot.testing.injected_failures import InjectedFailures

_BUILTIN_KINDS: dict[tuple[str, str], bool] = {
    # (apiVersion, kind) → namespaced
    ("v1", "Namespace"): False,
    ("v1", "Secret"): True,
    ("v1", "ConfigMap"): True,
    ("v1", "Pod"): True,
    ("v1", "Node"): False,
    ("v1", "Service"): True,
    ("v1", "ServiceAccount"): True,
    ("apps/v1", "Deployment"): True,
    ("apps/v1", "DaemonSet"): True,
    ("apiextensions.k8s.io/v1", "CustomResourceDefinition"): False,
}


def _leaves(value: Any, prefix: tuple[str, ...] = ()) -> dict[tuple[str, ...], Any]:
    """Leaf paths of a mapping; lists count as one leaf (the fake's SSA granularity)."""
    if isinstance(value, Mapping) and value:
        out: dict[tuple[str, ...], Any] = {}
        for key, child in value.items():
            out.update(_leaves(child, (*prefix, str(key))))
        return out
    return {prefix: value}


def _owned_leaves(obj: Mapping[str, Any]) -> dict[tuple[str, ...], Any]:
    """The leaves a write can own: everything but metadata and status, plus labels and
    annotations (the API server's managedFields scope for the main resource)."""
    body = {k: v for k, v in obj.items() if k not in ("apiVersion", "kind", "metadata", "status")}
    meta = obj.get("metadata") or {}
    owned_meta = {k: meta[k] for k in ("labels", "annotations") if meta.get(k)}
    if owned_meta:
        body["metadata"] = owned_meta
    return _leaves(body) if body else {}


def _merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, Mapping):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, Mapping) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = _merge_patch(result.get(key), value)
    return result


def _deep_merge(target: Any, applied: Any) -> Any:
    """Server-side apply, roughly: maps merge, everything else is replaced."""
    if isinstance(target, Mapping) and isinstance(applied, Mapping):
        result = dict(target)
        for key, value in applied.items():
            result[key] = _deep_merge(result.get(key), value)
        return result
    return copy.deepcopy(applied)


BEFORE_FIRST_APPLY = "before-first-apply"
_ABSENT = object()


class FakeCluster(Cluster):
    """The cluster in memory.

    Objects are kept by (apiVersion, kind, namespace, name); every write bumps a global
    resourceVersion, and a change outside metadata/status bumps ``metadata.generation``.
    Applying a CRD serves its kinds. Field ownership is kept per manager at the fake's
    granularity (leaves; lists are atomic): apply owns the leaves it applied, ``create`` and
    ``patch_merge`` (manager "gitopsbot") take the leaves they set or change from the others,
    and apply refuses (KubeConflict) a different value for a leaf another manager owns,
    unless ``force``. ``release_fields`` forgets a manager's ownership; an object left with no
    manager has its fields attributed to "before-first-apply" by the next apply, as on the
    API server. With ``instant_deployments`` a Deployment is rolled out at once (status
    filled in), as the emulator's kubelet does. ``fail(operation, error, times)`` makes the
    next calls of a method (``"get"``, ``"apply"``, ``"patch_merge"``...) raise ``error``.
    ``set_container_log`` gives a container its log text; ``container_log`` answers as the
    emulator does (``sandbox.apiserver.pod_logs``: filters, 404, the 400s as KubeInvalid).

    Waits (``wait_deployment_ready``, ``wait_for_change``) block on a condition every write
    notifies, but only with ``blocking_waits``: tests that use the fake mostly decide time
    with a fake clock and write from one thread, so by default a wait is one look at what
    is stored now (the timeout is not spent in real seconds). The contract suite sets it.
    """

    def __init__(self, *, instant_deployments: bool = True, blocking_waits: bool = False) -> None:
        self.blocking_waits = blocking_waits
        self._changed = threading.Condition()  # notified on every write, for the waits
        self.objects: dict[tuple[str, str, str, str], dict[str, Any]] = {}
        self.kinds: dict[tuple[str, str], bool] = dict(_BUILTIN_KINDS)
        self.instant_deployments = instant_deployments
        self.calls: list[tuple[str, str]] = []  # (operation, "kind ns/name")
        self._version = 0
        self._managers: dict[tuple[str, str, str, str], dict[str, dict[tuple[str, ...], Any]]] = {}
        self._failures = InjectedFailures()
        self.logs: dict[tuple[str, str, str], str] = {}  # (namespace, pod, container) → text

    # -- test controls --

    def fail(self, operation: str, error: Exception, *, times: int = 1) -> None:
        self._failures.add(operation, error, times)

    def put(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        """Store ``obj`` as is (status included), registering its kind if unknown."""
        api_version, kind, namespace, name = self._identity(obj)
        self.kinds.setdefault((api_version, kind), bool(namespace))
        return self._store((api_version, kind, namespace, name), copy.deepcopy(dict(obj)))

    # -- the port --

    def get(
        self, api_version: str, kind: str, namespace: str | None, name: str
    ) -> dict[str, Any] | None:
        self._enter("get", kind, namespace, name)
        if (api_version, kind) not in self.kinds:
            return None
        found = self.objects.get(self._key(api_version, kind, namespace, name))
        return copy.deepcopy(found) if found is not None else None

    def list(
        self,
        api_version: str,
        kind: str,
        namespace: str | None = None,
        label_selector: str | None = None,
    ) -> builtins.list[dict[str, Any]]:
        self._enter("list", kind, namespace, "")
        return self._matching(api_version, kind, namespace, label_selector)

    def list_metadata(
        self, api_version: str, kind: str, namespace: str | None, label_selector: str
    ) -> builtins.list[dict[str, Any]]:
        self._enter("list_metadata", kind, namespace, "")
        found = self._matching(api_version, kind, namespace, label_selector)
        return [{"metadata": obj.get("metadata") or {}} for obj in found]

    def _matching(
        self, api_version: str, kind: str, namespace: str | None, label_selector: str | None
    ) -> builtins.list[dict[str, Any]]:
        wanted = _parse_equality_selector(label_selector or "")
        out = []
        for (av, k, ns, _), obj in sorted(self.objects.items()):
            if (av, k) != (api_version, kind) or (namespace and ns != namespace):
                continue
            labels = (obj.get("metadata") or {}).get("labels") or {}
            if all(labels.get(key) == value for key, value in wanted.items()):
                out.append(copy.deepcopy(obj))
        return out

    def apply(
        self, obj: Mapping[str, Any], *, field_manager: str = FIELD_MANAGER, force: bool = False
    ) -> dict[str, Any]:
        api_version, kind, namespace, name = self._identity(obj)
        self._enter("apply", kind, namespace, name)
        self._require_kind(api_version, kind, namespace, name)
        key = (api_version, kind, namespace, name)
        applied = _leaves({k: v for k, v in obj.items() if k not in ("apiVersion", "kind")})
        current = self.objects.get(key)
        managers = self._managers.setdefault(key, {})
        if current is not None and not managers:
            managers[BEFORE_FIRST_APPLY] = _owned_leaves(current)
        for other, leaves in managers.items():
            if other == field_manager:
                continue
            clashes = [p for p, v in applied.items() if p in leaves and leaves[p] != v]
            if clashes and not force:
                where = ".".join(clashes[0])
                raise KubeConflict(
                    f"apply {kind} {_ref(namespace, name)}: HTTP 409 Conflict: "
                    f'conflict with "{other}": .{where}'
                )
            for path in clashes:
                del leaves[path]
        managers[field_manager] = applied
        merged = _deep_merge(current or {}, dict(obj))
        return self._store(key, merged, previous=current)

    def create(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        api_version, kind, namespace, name = self._identity(obj)
        self._enter("create", kind, namespace, name)
        self._require_kind(api_version, kind, namespace, name)
        key = (api_version, kind, namespace, name)
        if key in self.objects:
            raise KubeConflict(f"create {kind} {_ref(namespace, name)}: HTTP 409 AlreadyExists")
        stored = self._store(key, copy.deepcopy(dict(obj)))
        self._managers[key] = {FIELD_MANAGER: _owned_leaves(stored)}
        return stored

    def patch_merge(
        self,
        api_version: str,
        kind: str,
        namespace: str | None,
        name: str,
        patch: Mapping[str, Any],
    ) -> dict[str, Any]:
        self._enter("patch_merge", kind, namespace, name)
        key = self._key(api_version, kind, namespace, name)
        current = self.objects.get(key) if (api_version, kind) in self.kinds else None
        if current is None:
            raise KubeNotFound(f"patch {kind} {_ref(namespace, name)}: HTTP 404 NotFound")
        expected = (patch.get("metadata") or {}).get("resourceVersion")
        if expected is not None and expected != current["metadata"]["resourceVersion"]:
            # Optimistic concurrency, as the API server does for a precondition in a patch.
            raise KubeConflict(f"patch {kind} {_ref(namespace, name)}: HTTP 409 Conflict")
        stored = self._store(key, _merge_patch(current, patch), previous=current)
        self._track_update(key, current, stored)
        return stored

    def delete(self, api_version: str, kind: str, namespace: str | None, name: str) -> bool:
        self._enter("delete", kind, namespace, name)
        key = self._key(api_version, kind, namespace, name)
        self._managers.pop(key, None)
        deleted = self.objects.pop(key, None) is not None
        with self._changed:
            self._changed.notify_all()
        return deleted

    def wait_deployment_ready(
        self, namespace: str, name: str, *, timeout: float
    ) -> DeploymentReadiness:
        # The first look is deployment_ready's (a "get": injected failures apply to it).
        view = self.deployment_ready(namespace, name)
        if view or not self.blocking_waits:
            return view
        deadline = time.monotonic() + max(timeout, 0.0)
        with self._changed:  # held from each read to the wait: no write slips between
            while True:
                found = self.objects.get(self._key("apps/v1", "Deployment", namespace, name))
                if found is None:
                    raise KubeNotFound(f"Deployment {namespace}/{name} not found")
                view = deployment_readiness(found)
                left = deadline - time.monotonic()
                if view or left <= 0:
                    return view
                self._changed.wait(left)

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
        self._enter("wait_for_change", kind, namespace, "")
        wanted = set(names) if names is not None else set(since) if since is not None else None
        deadline = time.monotonic() + (max(timeout, 0.0) if self.blocking_waits else 0.0)
        with self._changed:
            baseline = dict(since) if since is not None else None
            while True:
                current = self._versions(api_version, kind, namespace, wanted)
                if baseline is None:
                    baseline = current
                elif any(
                    (baseline.get(k) or "") != (current.get(k) or "")
                    for k in set(baseline) | set(current)
                ):
                    return True
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._changed.wait(left)

    def _versions(
        self, api_version: str, kind: str, namespace: str | None, names: set[str] | None
    ) -> dict[str, str]:
        across = self.kinds.get((api_version, kind), True) and not namespace
        found: dict[str, str] = {}
        for (av, k, ns, name), obj in list(self.objects.items()):
            if (av, k) != (api_version, kind) or (namespace and ns != namespace):
                continue
            key = f"{ns}/{name}" if across else name
            if names is None or key in names:
                found[key] = str(obj["metadata"]["resourceVersion"])
        return found

    def apply_crds(self, documents: Mapping[str, str]) -> builtins.list[CrdApplyResult]:
        self._enter("apply_crds", "CustomResourceDefinition", None, "")
        try:
            crds = parse_crd_documents(documents)
        except CrdDocumentError as e:
            raise KubeInvalid(str(e)) from None
        results = []
        for crd in crds:
            stored = self.apply(crd, field_manager=FIELD_MANAGER, force=True)
            results.append(
                CrdApplyResult(
                    stored["metadata"]["name"],
                    True,
                    True,
                    tuple(stored.get("status", {}).get("storedVersions", ())),
                )
            )
        return sorted(results, key=lambda r: r.name)

    def set_container_log(self, namespace: str, pod: str, container: str, text: str) -> None:
        """Set the log text of a container of a pod (stored or not yet): lines that start
        with an RFC 3339 timestamp, as the sandbox's pod annotation holds them. A pod's
        ``sandbox.gitopsbot.io/log.<container>`` annotation is read when none was set."""
        self.logs[(namespace, pod, container)] = text

    def container_log(
        self,
        namespace: str,
        pod: str,
        container: str,
        *,
        since: datetime | None = None,
        tail_lines: int = 200,
    ) -> str:
        self._enter("container_log", "Pod", namespace, pod)
        stored = self.get("v1", "Pod", namespace, pod)
        if stored is None:
            raise KubeNotFound(f"log of container {container!r}: Pod {namespace}/{pod} not found")
        query = {"container": container, "tailLines": str(max(tail_lines, 0))}
        if since is not None:
            at = since if since.tzinfo else since.replace(tzinfo=UTC)
            query["sinceTime"] = at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        text = self.logs.get((namespace, pod, container))
        if text is not None:
            annotations = dict(stored["metadata"].get("annotations") or {})
            annotations[pod_logs.log_annotation(container)] = text
            stored = {**stored, "metadata": {**stored["metadata"], "annotations": annotations}}
        try:
            return pod_logs.pod_log(stored, query)
        except SandboxApiError as e:  # the emulator's 400s, as KubeCluster maps them
            raise KubeInvalid(f"log of pod {namespace}/{pod}: {e.message}") from None

    def mark_helm_release_failed(
        self, namespace: str, release: str, revision: int, reason: str
    ) -> bool:
        secret = helm_release_secret_name(release, revision)
        self._enter("mark_helm_release_failed", "Secret", namespace, secret)
        status = unlock_helm_release(
            self, namespace, release, revision, reason, modified_at=int(time.time())
        )
        return status is not None

    def release_fields(
        self,
        api_version: str,
        kind: str,
        namespace: str | None,
        name: str,
        manager: str = FIELD_MANAGER,
    ) -> bool:
        self._enter("release_fields", kind, namespace, name)
        key = self._key(api_version, kind, namespace, name)
        current = self.objects.get(key) if (api_version, kind) in self.kinds else None
        if current is None:
            raise KubeNotFound(f"{kind} {_ref(namespace, name)} not found")
        managers = self._managers.get(key, {})
        if manager not in managers:
            return False
        del managers[manager]
        self._store(key, copy.deepcopy(current), previous=current)
        return True

    # -- internals --

    def _track_update(
        self, key: tuple[str, str, str, str], old: Mapping[str, Any], new: Mapping[str, Any]
    ) -> None:
        """A non-apply write by "gitopsbot": it takes the leaves it changed from the others.
        An object with no manager stays untracked, as on the API server."""
        managers = self._managers.get(key)
        if not managers:
            return
        before, after = _owned_leaves(old), _owned_leaves(new)
        changed = {p: v for p, v in after.items() if before.get(p, _ABSENT) != v}
        gone = set(before) - set(after)
        if not changed and not gone:
            return
        for other, leaves in list(managers.items()):
            for path in [p for p in leaves if p in changed or p in gone]:
                del leaves[path]
            if not leaves:
                del managers[other]
        if changed:
            managers.setdefault(FIELD_MANAGER, {}).update(changed)

    def _enter(self, operation: str, kind: str, namespace: str | None, name: str) -> None:
        self.calls.append((operation, f"{kind} {_ref(namespace, name)}"))
        self._failures.raise_next(operation)

    def _key(
        self, api_version: str, kind: str, namespace: str | None, name: str
    ) -> tuple[str, str, str, str]:
        namespaced = self.kinds.get((api_version, kind), True)
        return (api_version, kind, (namespace or "") if namespaced else "", name)

    @staticmethod
    def _identity(obj: Mapping[str, Any]) -> tuple[str, str, str, str]:
        meta = obj.get("metadata") or {}
        if not obj.get("apiVersion") or not obj.get("kind") or not meta.get("name"):
            raise KubeInvalid("object needs apiVersion, kind and metadata.name")
        return (
            str(obj["apiVersion"]),
            str(obj["kind"]),
            str(meta.get("namespace") or ""),
            str(meta["name"]),
        )

    def _require_kind(self, api_version: str, kind: str, namespace: str, name: str) -> None:
        namespaced = self.kinds.get((api_version, kind))
        if namespaced is None:
            raise KubeNotFound(f"the server does not serve {kind} in {api_version}")
        if namespaced and not namespace:
            raise KubeInvalid(f"{kind} {name}: metadata.namespace is required")

    def _store(
        self,
        key: tuple[str, str, str, str],
        obj: dict[str, Any],
        *,
        previous: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        api_version, kind, namespace, name = key
        self._version += 1
        meta = dict(obj.get("metadata") or {})
        meta["name"] = name
        if namespace:
            meta["namespace"] = namespace
        old_meta = (previous or {}).get("metadata") or {}
        meta["uid"] = old_meta.get("uid") or hashlib.sha1(repr(key).encode()).hexdigest()[:12]
        generation = int(old_meta.get("generation") or 0)
        body = {k: v for k, v in obj.items() if k not in ("metadata", "status")}
        old_body = {k: v for k, v in (previous or {}).items() if k not in ("metadata", "status")}
        if previous is None or body != old_body:
            generation += 1
        meta["generation"] = generation
        meta["resourceVersion"] = str(self._version)
        obj = {**obj, "apiVersion": api_version, "kind": kind, "metadata": meta}
        if previous is not None and "status" in previous and "status" not in obj:
            obj["status"] = copy.deepcopy(previous["status"])
        if kind == "Secret" and "stringData" in obj:
            data = dict(obj.get("data") or {})
            for k, v in obj.pop("stringData").items():
                data[k] = base64.b64encode(str(v).encode()).decode()
            obj["data"] = data
        if kind == "CustomResourceDefinition":
            obj = self._serve_crd(obj)
        if kind == "Deployment" and self.instant_deployments:
            replicas = int((obj.get("spec") or {}).get("replicas", 1))
            obj["status"] = {
                "observedGeneration": generation,
                "replicas": replicas,
                "updatedReplicas": replicas,
                "readyReplicas": replicas,
                "availableReplicas": replicas,
            }
        self.objects[key] = obj
        with self._changed:  # after the write: a waiter reads it when it wakes
            self._changed.notify_all()
        return copy.deepcopy(obj)

    def _serve_crd(self, crd: dict[str, Any]) -> dict[str, Any]:
        spec = crd.get("spec") or {}
        group, kind = spec.get("group", ""), (spec.get("names") or {}).get("kind", "")
        versions = [v for v in spec.get("versions") or [] if v.get("served", True)]
        for version in versions:
            self.kinds[(f"{group}/{version['name']}", kind)] = spec.get("scope") != "Cluster"
        status = dict(crd.get("status") or {})
        stored = list(status.get("storedVersions") or [])
        for version in spec.get("versions") or []:
            if version.get("storage") and version["name"] not in stored:
                stored.append(version["name"])
        status["storedVersions"] = stored
        status["conditions"] = [
            {"type": "NamesAccepted", "status": "True"},
            {"type": "Established", "status": "True"},
        ]
        return {**crd, "status": status}


def _ref(namespace: str | None, name: str) -> str:
    return f"{namespace}/{name}" if namespace else name


def _parse_equality_selector(text: str) -> dict[str, str]:
    wanted: dict[str, str] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, _, value = part.replace("==", "=").partition("=")
        wanted[key.strip()] = value.strip()
    return wanted
