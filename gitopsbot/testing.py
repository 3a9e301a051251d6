"""In-memory fakes of the ports, for tests and the bot's own unit tests.

Each fake obeys the same contract tests as the real adapters (tests/forge for the forge).
Production modules never import this one (tests/test_layering.py checks).
"""

from __future__ import annotations

import base64
import builtins
import copy
import hashlib
import shutil
import threading
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML

from gitopsbot.adapters.redaction import helm_secrets, redact_secrets
from gitopsbot.core.charts.kube_objects import (
    CrdDocumentError,
    deployment_readiness,
    parse_crd_documents,
)
from gitopsbot.core.charts.observed import (
    CrdApplyResult,
    DeploymentReadiness,
    HelmReleaseInfo,
    HelmReleaseStatus,
)
from gitopsbot.core.fleet.model import ClusterSpec, RolloutPolicy
from gitopsbot.core.forge.forge_types import (
    COMMENT_LIMIT,
    CommentInfo,
    CommitState,
    PullComment,
    PullRequestInfo,
    PullRequestState,
    check_marker,
    find_marker,
    split_comment,
    with_marker,
)
from gitopsbot.core.notices import kube_events as ke
from gitopsbot.core.replicas.lease import LeaseRecord, LeaseSpec, lease_body, record_of
from gitopsbot.errors import (
    ForgeFailed,
    ForgeNotFound,
    HelmChartUnusable,
    HelmError,
    HelmFailed,
    HelmReleaseLocked,
    KubeConflict,
    KubeInvalid,
    KubeNotFound,
)
from gitopsbot.ports.cluster import (
    FIELD_MANAGER,
    RESTARTED_AT,
    failed_helm_release_patch,
    helm_release_secret_name,
)
from gitopsbot.ports.forge import POLICY_CONTEXT, Forge
from gitopsbot.ports.helm import ChartRef
from gitopsbot.sandbox.apiserver import pod_logs
from gitopsbot.sandbox.apiserver.errors import ApiError as SandboxApiError


@dataclass(slots=True)
class FakeStatus:
    state: CommitState
    description: str
    target_url: str = ""


@dataclass(slots=True)
class FakeForge:
    """A forge in memory: pull requests, comments, statuses and labels.

    ``merge(number, at=...)`` stands in for the person clicking "Merge".
    """

    url: str = "https://forge.invalid/acme/fleet"
    comment_limit: int = COMMENT_LIMIT
    pulls: dict[int, PullRequestInfo] = field(default_factory=dict)
    comments: dict[int, list[CommentInfo]] = field(default_factory=dict)
    statuses: dict[tuple[str, str], FakeStatus] = field(default_factory=dict)
    # People's comments (``say``): comment id → author; others are the bot's own.
    authors: dict[int, str] = field(default_factory=dict)
    writers: set[str] = field(default_factory=set)  # who may write to the repository
    _next_id: int = 1

    def _id(self) -> int:
        self._next_id += 1
        return self._next_id

    def _get(self, number: int) -> PullRequestInfo:
        try:
            return self.pulls[number]
        except KeyError:
            raise ForgeNotFound(f"pull request #{number} not found") from None

    # -- the port -------------------------------------------------------------------------
    def find_pull_request(self, branch: str, marker: str) -> PullRequestInfo | None:
        check_marker(marker)
        for pr in sorted(self.pulls.values(), key=lambda p: p.number):
            if pr.state is PullRequestState.OPEN and pr.branch == branch and pr.marker == marker:
                return pr
        return None

    def open_or_update_pull_request(
        self,
        *,
        branch: str,
        base: str,
        title: str,
        body: str,
        marker: str,
        labels: Sequence[str] = (),
    ) -> PullRequestInfo:
        text = with_marker(body, marker)
        if len(text) > self.comment_limit:
            raise ForgeFailed("pull request body is too long")
        found = self.find_pull_request(branch, marker)
        if found is None:
            if any(
                p.branch == branch and p.state is PullRequestState.OPEN for p in self.pulls.values()
            ):
                raise ForgeFailed(f"an open request from {branch!r} exists without our marker")
            number = len(self.pulls) + 1
            found = PullRequestInfo(
                number=number,
                branch=branch,
                base=base,
                title=title,
                state=PullRequestState.OPEN,
                head_sha=hashlib.sha1(branch.encode()).hexdigest(),
                url=f"{self.url}/pull/{number}",
                mergeable=True,
            )
        merged_labels = tuple(dict.fromkeys((*found.labels, *labels)))
        pr = replace(found, title=title, body=text, marker=marker, labels=merged_labels)
        self.pulls[pr.number] = pr
        return pr

    def get_pull_request(self, number: int) -> PullRequestInfo:
        return self._get(number)

    def upsert_comment(self, number: int, *, marker: str, body: str) -> CommentInfo:
        self._get(number)
        texts = split_comment(body, marker, limit=self.comment_limit)
        result: list[CommentInfo] = []
        written: dict[int, CommentInfo] = {}
        for c in self.comments.setdefault(number, []):
            tag = find_marker(c.body)
            if tag is None or tag.marker != marker:
                result.append(c)  # someone else's comment: untouched
            elif tag.part <= len(texts) and tag.part not in written:
                written[tag.part] = CommentInfo(c.id, texts[tag.part - 1], c.url, len(texts))
                result.append(written[tag.part])
            # else: a stale part (or a duplicate) of ours: deleted
        for part, text in enumerate(texts, start=1):
            if part not in written:
                written[part] = CommentInfo(self._id(), text, "", len(texts))
                result.append(written[part])
        self.comments[number] = result
        return written[1]

    def set_status(
        self,
        sha: str,
        *,
        state: CommitState,
        description: str,
        context: str = POLICY_CONTEXT,
        target_url: str = "",
    ) -> None:
        self.statuses[(sha, context)] = FakeStatus(CommitState(state), description, target_url)

    def add_labels(self, number: int, labels: Sequence[str]) -> None:
        pr = self._get(number)
        self.pulls[number] = replace(pr, labels=tuple(dict.fromkeys((*pr.labels, *labels))))

    def list_merged_since(self, since: datetime) -> list[PullRequestInfo]:
        merged = [
            p
            for p in self.pulls.values()
            if p.state is PullRequestState.MERGED and p.merged_at and p.merged_at >= since
        ]
        return sorted(merged, key=lambda p: (p.merged_at, p.number))

    def close_pull_request(self, number: int, comment: str = "") -> None:
        pr = self._get(number)
        if comment:
            self.comments.setdefault(number, []).append(CommentInfo(id=self._id(), body=comment))
        self.pulls[number] = replace(pr, state=PullRequestState.CLOSED)

    # -- ports.forge.ReadsComments -------------------------------------------------------
    def list_comments(self, number: int, *, after: int = 0) -> list[PullComment]:
        self._get(number)
        found = [
            PullComment(c.id, self.authors.get(c.id, "gitopsbot"), c.body)
            for c in self.comments.get(number, [])
            if c.id > after
        ]
        return sorted(found, key=lambda c: c.id)

    def may_write(self, comment: PullComment) -> bool:
        return comment.author in self.writers or comment.author == "gitopsbot"

    # -- test controls --------------------------------------------------------------------
    def say(self, number: int, user: str, body: str) -> CommentInfo:
        """Simulate ``user`` commenting on request ``number``."""
        self._get(number)
        c = CommentInfo(id=self._id(), body=body)
        self.comments.setdefault(number, []).append(c)
        self.authors[c.id] = user
        return c

    # -- test controls --------------------------------------------------------------------
    def merge(self, number: int, *, at: datetime | None = None) -> PullRequestInfo:
        """Simulate the merge click: records merged_at and a merge commit sha."""
        pr = self._get(number)
        when = at or datetime(2026, 1, 1, tzinfo=UTC)
        sha = hashlib.sha1(f"merge-{number}-{when.isoformat()}".encode()).hexdigest()
        merged = replace(pr, state=PullRequestState.MERGED, merged_at=when, merge_commit_sha=sha)
        self.pulls[number] = merged
        return merged

    def status_of(self, sha: str, context: str = POLICY_CONTEXT) -> CommitState | None:
        found = self.statuses.get((sha, context))
        return found.state if found else None

    def comments_on(self, number: int) -> list[str]:
        return [c.body for c in self.comments.get(number, [])]

    def as_forge(self) -> Forge:
        """This fake as the port type (mypy checks here that it satisfies the Protocol)."""
        return self


# -- Cluster and Helm fakes (contract tests: tests/executor/test_{cluster,helm}_contract.py)


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


@dataclass(slots=True)
class _Injected:
    error: Exception
    times: int


class FakeCluster:
    """In-memory ``ports.cluster.Cluster``.

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
        self._failures: dict[str, list[_Injected]] = {}
        self.logs: dict[tuple[str, str, str], str] = {}  # (namespace, pod, container) → text

    # -- test controls --

    def fail(self, operation: str, error: Exception, *, times: int = 1) -> None:
        self._failures.setdefault(operation, []).append(_Injected(error, times))

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

    def read_secret(self, namespace: str, name: str, key: str) -> str:
        secret = self.get("v1", "Secret", namespace, name)
        if secret is None:
            raise KubeNotFound(f"Secret {namespace}/{name} not found")
        encoded = (secret.get("data") or {}).get(key)
        if encoded is None:
            raise KubeNotFound(f"Secret {namespace}/{name} has no key {key!r}")
        return base64.b64decode(encoded).decode("utf-8")

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
        name = helm_release_secret_name(release, revision)
        self._enter("mark_helm_release_failed", "Secret", namespace, name)
        key = self._key("v1", "Secret", namespace, name)
        current = self.objects.get(key)
        if current is None:
            raise KubeNotFound(
                f"Secret {namespace}/{name} not found: release {release} has no revision "
                f"{revision} in Helm's Secret storage"
            )
        try:
            found = failed_helm_release_patch(
                current,
                release=release,
                revision=revision,
                reason=reason,
                modified_at=int(time.time()),
            )
        except ValueError as e:
            raise KubeInvalid(f"Secret {namespace}/{name} {e}") from None
        if found is None:
            return False
        stored = self._store(key, _merge_patch(current, found[0]), previous=current)
        self._track_update(key, current, stored)
        return True

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
        queue = self._failures.get(operation)
        if queue:
            injected = queue[0]
            injected.times -= 1
            if injected.times <= 0:
                queue.pop(0)
            raise injected.error

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


@dataclass(slots=True)
class _Revision:
    info: HelmReleaseInfo
    values: dict[str, Any]
    post_render_policy: RolloutPolicy | None


class FakeHelm:
    """In-memory ``ports.helm.Helm``: a release history per (namespace, release).

    ``fail(operation, error, times)`` makes the next ``upgrade``/``rollback``/``status``...
    raise; ``set_pending`` leaves the latest revision in a pending-* state, as a killed helm
    does. ``app_versions`` maps chart version → appVersion. ``on_deploy`` (if given) is called
    with each new revision, its values and post-render policy, so a test can reflect the
    release into a FakeCluster. ``clock`` gives the ``updated`` time.

    Like HelmCli: ``transient(operation, times)`` makes the next call meet ``times``
    transient API failures, retried inside the call (``last_retries``) up to
    ``retry_attempts`` attempts, then HelmFailed; each failed upgrade/rollback attempt
    leaves a ``failed`` revision, as helm does. ``running`` holds the descriptions of helm
    operations still running (``operation_alive``). A local chart path that does not exist
    raises HelmChartUnusable. Like HelmCli, an upgrade's error (an injected one stands for
    helm's stderr) masks ``secret_values`` and the values at secret paths, nothing else;
    ``last_secret_values`` keeps what the last upgrade was given.
    """

    def __init__(
        self,
        *,
        app_versions: Mapping[str, str] | None = None,
        on_deploy: Callable[[HelmReleaseInfo, Mapping[str, Any], RolloutPolicy | None], None]
        | None = None,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        charts: Mapping[str, Path] | None = None,
        retry_attempts: int = 4,
    ) -> None:
        self.releases: dict[tuple[str, str], builtins.list[_Revision]] = {}
        self.app_versions = dict(app_versions or {})
        self.on_deploy = on_deploy
        self.clock = clock
        self.charts = dict(charts or {})  # chart version → local chart directory, for pull
        self.calls: builtins.list[str] = []
        self.retry_attempts = retry_attempts
        self.running: set[str] = set()
        self.last_secret_values: tuple[str, ...] = ()
        self._failures: dict[str, builtins.list[_Injected]] = {}
        self._transient: dict[str, int] = {}
        self._retries = 0

    def fail(self, operation: str, error: Exception, *, times: int = 1) -> None:
        self._failures.setdefault(operation, []).append(_Injected(error, times))

    def transient(self, operation: str, *, times: int = 1) -> None:
        self._transient[operation] = self._transient.get(operation, 0) + times

    @property
    def last_retries(self) -> int:
        return self._retries

    def operation_alive(self, description: str) -> bool:
        return bool(description) and description in self.running

    def set_pending(
        self,
        release: str,
        namespace: str,
        status: HelmReleaseStatus = HelmReleaseStatus.PENDING_UPGRADE,
    ) -> None:
        history = self.releases[(namespace, release)]
        history[-1].info = replace(history[-1].info, status=status)

    def status(self, release: str, namespace: str) -> HelmReleaseInfo | None:
        self._enter("status")
        history = self.releases.get((namespace, release))
        return history[-1].info if history else None

    def release_mark(self, release: str, namespace: str) -> str | None:
        # The same storage as ``status``: a failure injected for it fails this read too.
        self._enter("release_mark", failures_of="status")
        history = self.releases.get((namespace, release), [])
        return "\n".join(f"{r.info.revision}|{r.info.status}|{r.info.description}" for r in history)

    def history(self, release: str, namespace: str) -> builtins.list[HelmReleaseInfo]:
        self._enter("history")
        return [r.info for r in self.releases.get((namespace, release), [])]

    def get_values(
        self, release: str, namespace: str, revision: int | None = None
    ) -> dict[str, Any]:
        self._enter("get_values")
        found = self._revision(release, namespace, revision)
        return copy.deepcopy(found.values)

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
        self.last_secret_values = tuple(secret_values)
        try:
            return self._upgrade(
                release, namespace, chart, version, values, description, post_render_policy,
                install,
            )  # fmt: skip
        except HelmError as exc:
            text = redact_secrets(str(exc), helm_secrets(values, secret_values))
            if text == str(exc):
                raise
            raise type(exc)(text) from None

    def _upgrade(
        self,
        release: str,
        namespace: str,
        chart: ChartRef,
        version: str,
        values: Mapping[str, Any],
        description: str,
        post_render_policy: RolloutPolicy | None,
        install: bool,
    ) -> HelmReleaseInfo:
        self._enter("upgrade")
        history = self.releases.get((namespace, release), [])
        self._refuse_pending(history, release, namespace, "helm upgrade")
        if chart.path and not Path(chart.path).exists():
            raise HelmChartUnusable(
                f"helm upgrade {release}: chart {chart.label} version {version} cannot be used "
                f'(nothing was changed in the cluster): path "{chart.path}" not found'
            )
        if not history and not install:
            raise HelmFailed(f'helm upgrade {release}: "{release}" has no deployed releases')
        self._absorb_transient("upgrade", release, namespace)
        name, app_version = chart.name, self.app_versions.get(version, version)
        metadata = Path(chart.path) / "Chart.yaml" if chart.path else None
        if metadata is not None and metadata.is_file():
            # Like helm: a local chart's name, version and appVersion come from Chart.yaml.
            meta = YAML(typ="safe").load(metadata.read_text(encoding="utf-8"))
            name, version = str(meta["name"]), str(meta["version"])
            app_version = str(meta.get("appVersion", app_version))
        return self._deploy(
            release,
            namespace,
            chart_name=name or Path(chart.path).name,
            chart_version=version,
            app_version=app_version,
            values=dict(values),
            description=description,
            policy=post_render_policy,
        )

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
        self._enter("rollback")
        history = self.releases.get((namespace, release), [])
        self._refuse_pending(history, release, namespace, "helm rollback")
        target = self._revision(release, namespace, revision)
        self._absorb_transient("rollback", release, namespace)
        return self._deploy(
            release,
            namespace,
            chart_name=target.info.chart_name,
            chart_version=target.info.chart_version,
            app_version=target.info.app_version,
            values=copy.deepcopy(target.values),
            description=f"Rollback to {revision}",
            policy=target.post_render_policy,
        )

    def pull(self, chart: ChartRef, version: str, dest: Path) -> Path:
        self._enter("pull")
        source = Path(chart.path) if chart.path else self.charts.get(version)
        if source is None or not source.is_dir():
            raise HelmChartUnusable(
                f"helm pull {chart.label} {version}: chart {chart.label} version {version} "
                "cannot be used: not found"
            )
        target = dest / (chart.name or source.name)
        shutil.copytree(source, target, dirs_exist_ok=True)
        return target

    def _enter(self, operation: str, *, failures_of: str = "") -> None:
        self.calls.append(operation)
        self._retries = 0
        failing = failures_of or operation
        if operation not in ("upgrade", "rollback"):
            self._absorb_transient(failing, "", "")
        queue = self._failures.get(failing)
        if queue:
            injected = queue[0]
            injected.times -= 1
            if injected.times <= 0:
                queue.pop(0)
            raise injected.error

    def _absorb_transient(self, operation: str, release: str, namespace: str) -> None:
        """Injected transient failures: each failed upgrade/rollback attempt leaves a
        ``failed`` revision; retried while the budget lasts, then HelmFailed."""
        pending = self._transient.pop(operation, 0)
        for attempt in range(1, pending + 1):
            if release:
                self._record_failed(release, namespace, operation)
            if attempt == self.retry_attempts:
                self._transient[operation] = pending - attempt
                raise HelmFailed(
                    f"helm {operation}: exit 1: Error: Operation cannot be fulfilled: the "
                    "object has been modified; please apply your changes to the latest "
                    "version and try again"
                )
            self._retries += 1

    def _record_failed(self, release: str, namespace: str, operation: str) -> None:
        history = self.releases.get((namespace, release), [])
        if not history:
            return
        latest = history[-1]
        verb = "Upgrade" if operation == "upgrade" else "Rollback"
        info = replace(
            latest.info,
            revision=latest.info.revision + 1,
            status=HelmReleaseStatus.FAILED,
            description=f'{verb} "{release}" failed: the object has been modified',
            updated=self.clock(),
        )
        history.append(_Revision(info, copy.deepcopy(latest.values), latest.post_render_policy))

    @staticmethod
    def _refuse_pending(
        history: builtins.list[_Revision], release: str, namespace: str, what: str
    ) -> None:
        if history and history[-1].info.status.pending:
            latest = history[-1].info
            raise HelmReleaseLocked(
                f"{what}: release {namespace}/{release} revision {latest.revision} is "
                f"{latest.status}; not forcing it (R8)"
            )

    def _revision(self, release: str, namespace: str, revision: int | None) -> _Revision:
        history = self.releases.get((namespace, release), [])
        if not history:
            raise HelmFailed(f"helm {release}: release: not found")
        if revision is None:
            return history[-1]
        for entry in history:
            if entry.info.revision == revision:
                return entry
        raise HelmFailed(f"helm {release}: revision {revision} not found")

    def _deploy(
        self,
        release: str,
        namespace: str,
        *,
        chart_name: str,
        chart_version: str,
        app_version: str,
        values: dict[str, Any],
        description: str,
        policy: RolloutPolicy | None,
    ) -> HelmReleaseInfo:
        history = self.releases.setdefault((namespace, release), [])
        for entry in history:
            if entry.info.status is HelmReleaseStatus.DEPLOYED:
                entry.info = replace(entry.info, status=HelmReleaseStatus.SUPERSEDED)
        info = HelmReleaseInfo(
            name=release,
            namespace=namespace,
            revision=(history[-1].info.revision + 1) if history else 1,
            status=HelmReleaseStatus.DEPLOYED,
            chart_name=chart_name,
            chart_version=chart_version,
            app_version=app_version,
            description=description,
            updated=self.clock(),
        )
        history.append(_Revision(info, copy.deepcopy(values), policy))
        if self.on_deploy is not None:
            self.on_deploy(info, values, policy)
        return info


# -- Leases fake (contract tests: tests/leases/test_lease_contract.py) -----------------------


class FakeLeases:
    """In-memory ``ports.leases.Leases``: one store, a global resourceVersion bumped on every
    write, writes guarded as on the API server (create of an existing Lease and replace with a
    stale resourceVersion, or of one deleted since → KubeConflict; a duration
    ≤ 0 or negative transitions → KubeInvalid). Share one instance between keepers to play
    several replicas. ``fail(operation, error, times)`` makes the next ``"read"``,
    ``"create"`` or ``"replace"`` calls raise ``error``; ``delete`` plays a person removing
    the Lease."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str], dict[str, Any]] = {}
        self.calls: list[tuple[str, str]] = []  # (operation, "ns/name")
        self._version = 0
        self._failures: dict[str, list[_Injected]] = {}

    def fail(self, operation: str, error: Exception, *, times: int = 1) -> None:
        self._failures.setdefault(operation, []).append(_Injected(error, times))

    def delete(self, namespace: str, name: str) -> bool:
        return self.objects.pop((namespace, name), None) is not None

    def read(self, namespace: str, name: str) -> LeaseRecord | None:
        self._enter("read", namespace, name)
        found = self.objects.get((namespace, name))
        return record_of(copy.deepcopy(found)) if found is not None else None

    def list(self, namespace: str, labels: Mapping[str, str]) -> builtins.list[LeaseRecord]:
        self._enter("list", namespace, "")
        out = []
        for (ns, _), obj in sorted(self.objects.items()):
            have = obj["metadata"].get("labels") or {}
            if ns == namespace and all(have.get(k) == v for k, v in labels.items()):
                out.append(record_of(copy.deepcopy(obj)))
        return out

    def create(
        self,
        namespace: str,
        name: str,
        spec: LeaseSpec,
        labels: Mapping[str, str] | None = None,
    ) -> LeaseRecord:
        self._enter("create", namespace, name)
        if (namespace, name) in self.objects:
            raise KubeConflict(f'create Lease {namespace}/{name}: leases "{name}" already exists')
        base = {"metadata": {"labels": dict(labels)}} if labels else None
        return self._store(lease_body(namespace, name, spec, base), spec)

    def replace(self, current: LeaseRecord, spec: LeaseSpec) -> LeaseRecord:
        namespace, name = current.namespace, current.name
        self._enter("replace", namespace, name)
        stored = self.objects.get((namespace, name))
        # As the API server: the uid read is a precondition too, so a Lease deleted since
        # (or deleted and created again) conflicts rather than being written blindly.
        if stored is None or stored["metadata"]["resourceVersion"] != current.resource_version:
            raise KubeConflict(
                f"replace Lease {namespace}/{name}: the object has been modified; please apply "
                "your changes to the latest version and try again"
            )
        body = lease_body(namespace, name, spec, current.raw)
        for key in ("uid", "creationTimestamp"):  # the server keeps what the client cannot set
            body["metadata"][key] = stored["metadata"][key]
        return self._store(body, spec)

    def _store(self, body: dict[str, Any], spec: LeaseSpec) -> LeaseRecord:
        meta = body["metadata"]
        if spec.duration_seconds <= 0 or spec.transitions < 0:
            raise KubeInvalid(
                f"Lease {meta['namespace']}/{meta['name']}: leaseDurationSeconds must be "
                "greater than 0 and leaseTransitions must not be negative"
            )
        self._version += 1
        meta["resourceVersion"] = str(self._version)
        meta.setdefault("uid", f"lease-{self._version}")
        meta.setdefault("creationTimestamp", "2026-01-01T00:00:00Z")
        self.objects[(meta["namespace"], meta["name"])] = body
        return record_of(copy.deepcopy(body))

    def _enter(self, operation: str, namespace: str, name: str) -> None:
        self.calls.append((operation, f"{namespace}/{name}"))
        queue = self._failures.get(operation)
        if queue:
            injected = queue[0]
            injected.times -= 1
            if injected.times <= 0:
                queue.pop(0)
            raise injected.error


class FakeEvents:
    """``ports.events.Events`` in memory. ``add`` makes an object Events may regard (with a
    uid); ``fail(error)`` makes the next emits raise it; ``delay`` makes each emit take that
    long (a hung API server)."""

    def __init__(self, *, instance: str = "fake-replica") -> None:
        self.instance = instance
        self.uids: dict[tuple[str, str, str], str] = {}
        self.events: dict[tuple[str, str], dict[str, Any]] = {}  # (namespace, name) → body
        self.failures: list[Exception] = []
        self.delay = 0.0
        self.calls = 0
        self._series = ke.Series()
        self._last_nanos = 0

    def add(self, kind: str, name: str, namespace: str = "", uid: str = "") -> str:
        uid = uid or hashlib.sha256(f"{kind}/{namespace}/{name}".encode()).hexdigest()[:16]
        self.uids[(kind, namespace, name)] = uid
        return uid

    def fail(self, error: Exception, times: int = 1) -> None:
        self.failures.extend([error] * times)

    def close(self) -> None:
        pass

    def emit(self, regarding: ke.ObjectRef, event: ke.EventSpec, *, at: datetime) -> None:
        self.calls += 1
        if self.delay:
            time.sleep(self.delay)
        if self.failures:
            raise self.failures.pop(0)
        uid = self.uids.get((regarding.kind, regarding.namespace, regarding.name))
        if uid is None:
            raise KubeNotFound(f"{regarding.kind} {regarding.name}: HTTP 404 NotFound")
        ref = replace(regarding, uid=uid)
        ns = ref.event_namespace
        previous = self._series.previous(ref, event)
        if previous is not None and (ns, previous[0]) in self.events:
            name, count = previous
            self.events[(ns, name)].update(ke.series_patch(count + 1, at))
            self._series.posted(ref, event, name, count + 1)
            return
        self._last_nanos = max(ke.nanos_of(at), self._last_nanos + 1)
        name = ke.event_name(ref, self._last_nanos)
        body = ke.event_body(
            ref, event, name=name, at=at, controller=ke.REPORTING_CONTROLLER,
            instance=self.instance,
        )  # fmt: skip
        if len(event.note.encode()) > ke.NOTE_LIMIT:
            raise KubeInvalid(f"Event {name}: note: Too long: may not be more than 1024 bytes")
        self.events[(ns, name)] = body
        self._series.posted(ref, event, name)

    def recorded(self, regarding: ke.ObjectRef) -> builtins.list[ke.RecordedEvent]:
        found = [ke.recorded_of(copy.deepcopy(b)) for b in self.events.values()]
        found = [e for e in found if ke.is_about(e, regarding)]
        return sorted(found, key=lambda e: (e.event_time, e.name))


class FakeReleaseWatch:
    """The ReleaseWatch port for tests: ``healthy`` and ``change`` are set by the test;
    ``followed`` lists the clusters ``follow`` was asked for."""

    def __init__(self, *, healthy: bool = True) -> None:
        self.is_healthy = healthy
        self.changed: set[str] = set()
        self.followed: list[str] = []

    def follow(self, spec: ClusterSpec) -> None:
        if spec.name not in self.followed:
            self.followed.append(spec.name)

    def healthy(self, cluster: str) -> bool:
        return self.is_healthy and cluster in self.followed

    def change(self, cluster: str) -> None:
        """As the watch does on an event: the next pass looks at the release."""
        self.changed.add(cluster)

    def take_change(self, cluster: str) -> bool:
        found = cluster in self.changed
        self.changed.discard(cluster)
        return found
