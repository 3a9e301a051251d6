"""The Cluster adapter's waits: a Deployment ready, objects changed; watched, else polled.

A wait follows a watch from the resourceVersion it read; a watch the server refuses (RBAC
without ``watch``) marks the kind unwatchable and the wait polls it from then on, and a watch
that breaks is read again after a growing pause.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable, Collection, Generator, Mapping
from contextlib import closing
from dataclasses import dataclass
from typing import Any

import urllib3

from gitopsbot.adapters.kube_access import KubeAccess
from gitopsbot.adapters.kube_request import (
    Failures,
    Served,
    open_checked,
    status_text,
    stream_lines,
    watch_query,
)
from gitopsbot.core.charts.kube_objects import deployment_readiness
from gitopsbot.core.charts.observed import DeploymentReadiness
from gitopsbot.errors import KubeNotFound

# The Cluster adapter's log, whichever of its modules writes (tests/realkube read it by name).
log = logging.getLogger("gitopsbot.adapters.kube")

# Where a watch is refused (RBAC without ``watch``) or breaks, waits poll: from
# ``poll_seconds``, doubling up to this, so a long wait costs a read a second at most.
WAIT_POLL_MAX_SECONDS = 1.0
# Beyond a watch's own timeoutSeconds, how long a silent connection is trusted before the
# wait reads again (the server ends the stream itself at timeoutSeconds).
WATCH_READ_GRACE_SECONDS = 2.0


class _WatchBroke(Exception):
    """The watch ended early (410 Gone, a dropped connection, a 5xx): read again."""


class _WatchRefused(Exception):
    """The server will not watch this kind for us (403, 404, 405): poll instead."""


@dataclass(frozen=True, slots=True)
class _Watched:
    """What a wait reads and watches: the objects of one kind in ``namespace`` (None: all, or
    cluster-scoped), those named ``names`` only (None: all; across namespaces a name is
    ``namespace/name``)."""

    api_version: str
    kind: str
    namespace: str | None
    names: frozenset[str] | None

    def one(self, resource: Served) -> str | None:
        """The name when one object is watched: it is read with ``get`` (RBAC may grant get
        alone) and watched through a field selector."""
        if self.names is None or len(self.names) != 1:
            return None
        return next(iter(self.names)) if self.namespace or not resource.namespaced else None

    def across(self, resource: Served) -> bool:
        return resource.namespaced and not self.namespace

    def holds(self, meta: Mapping[str, Any], resource: Served) -> bool:
        return self.names is None or _watch_key(meta, self.across(resource)) in self.names


class KubeWaits(KubeAccess):
    """``wait_deployment_ready`` and ``wait_for_change`` of the Cluster port."""

    def wait_deployment_ready(
        self, namespace: str, name: str, *, timeout: float
    ) -> DeploymentReadiness:
        deadline = self._monotonic() + max(timeout, 0.0)
        deployment = self._deployment(namespace, name)
        watched = _Watched("apps/v1", "Deployment", namespace, frozenset({name}))
        interval = self._poll
        while not deployment_readiness(deployment):
            left = deadline - self._monotonic()
            if left <= 0:
                break
            version = str((deployment.get("metadata") or {}).get("resourceVersion") or "")
            if self._watchable(watched, version):
                seen = self._follow(watched, version, left, until=_ready)
                if seen is not None and seen[0] != "DELETED":
                    deployment = seen[1]
                    continue  # ready: the loop ends without another read
            interval = self._back_off(deadline, interval)
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
        wanted = names if names is not None else since
        watched = _Watched(
            api_version, kind, namespace, frozenset(wanted) if wanted is not None else None
        )
        current, version = self._versions(watched)
        baseline = dict(since) if since is not None else current
        interval = self._poll
        while not _differs(baseline, current):
            left = deadline - self._monotonic()
            if left <= 0:
                return False
            if self._watchable(watched, version) and self._follow(
                watched, version, left, until=_any
            ):
                return True
            interval = self._back_off(deadline, interval)
            current, version = self._versions(watched)
        return True

    def _deployment(self, namespace: str, name: str) -> dict[str, Any]:
        deployment = self.get("apps/v1", "Deployment", namespace, name)
        if deployment is None:
            raise KubeNotFound(f"Deployment {namespace}/{name} not found")
        return deployment

    def _watchable(self, watched: _Watched, version: str) -> bool:
        """Whether to watch from ``version`` (none: nothing read yet) rather than poll: the
        kind's watch has not been refused."""
        return bool(version) and (watched.api_version, watched.kind) not in self._unwatchable

    def _back_off(self, deadline: float, interval: float) -> float:
        """Pause (growing, up to WAIT_POLL_MAX_SECONDS) before reading again: between polls,
        and after a watch that broke, so a server that keeps cutting watches is not asked
        again in a tight loop; the next pause."""
        left = deadline - self._monotonic()
        if left > 0:
            self._pause(min(interval, left))
        return min(interval * 2, WAIT_POLL_MAX_SECONDS)

    def _versions(self, watched: _Watched) -> tuple[dict[str, str], str]:
        """name → resourceVersion of the objects waited on, and the version to watch from:
        one ``get`` for one name (RBAC may grant get alone), else a list."""
        resource = self._resource(watched.api_version, watched.kind)
        if resource is None:
            return {}, ""
        name = watched.one(resource)
        if name is not None:
            found = self.get(watched.api_version, watched.kind, watched.namespace, name)
            if found is None:
                return {}, ""  # nothing to watch from: the wait polls until it appears
            version = str(found["metadata"].get("resourceVersion") or "")
            return {name: version}, version
        path = resource.path(watched.api_version, watched.namespace, None)
        try:
            data = self._json("GET", path, what=f"{watched.kind} list")
        except KubeNotFound:
            return {}, ""
        across = watched.across(resource)
        found_versions = {}
        for item in data.get("items") or []:
            meta = item.get("metadata") or {}
            if watched.holds(meta, resource):
                found_versions[_watch_key(meta, across)] = str(meta.get("resourceVersion") or "")
        return found_versions, str((data.get("metadata") or {}).get("resourceVersion") or "")

    def _follow(
        self,
        watched: _Watched,
        version: str,
        timeout: float,
        *,
        until: Callable[[str, dict[str, Any]], bool],
    ) -> tuple[str, dict[str, Any]] | None:
        """Watch from ``version`` for up to ``timeout`` seconds: the first event (type,
        object) of a watched name for which ``until`` holds; None when the watch ended
        without one (timed out, broke: the caller reads again). A refused watch marks the
        kind unwatchable for this adapter (the caller polls from then on)."""
        kind = watched.kind
        try:
            with closing(self._watch(watched, version, timeout)) as events:
                for etype, obj in events:
                    if until(etype, obj):
                        return etype, obj
        except _WatchRefused as e:
            log.info("kube: cannot watch %s (%s); polling instead", kind, e)
            self._unwatchable.add((watched.api_version, kind))
        except _WatchBroke as e:
            log.debug("kube: %s watch ended: %s; reading again", kind, e)
        return None

    def _watch(
        self, watched: _Watched, version: str, timeout: float
    ) -> Generator[tuple[str, dict[str, Any]]]:
        """The watched names' events (BOOKMARKs skipped) until the server ends the stream."""
        resource = self._resource(watched.api_version, watched.kind)
        if resource is None:
            raise _WatchRefused(f"{watched.kind} is not served")
        path = resource.path(watched.api_version, watched.namespace, None)
        query = watch_query(version, max(1, math.ceil(timeout)))
        name = watched.one(resource)
        if name is not None:
            query.append(("fieldSelector", f"metadata.name={name}"))
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
                if watched.holds(obj.get("metadata") or {}, resource):
                    yield etype, obj
        except (urllib3.exceptions.HTTPError, OSError, ValueError) as e:
            raise _WatchBroke(f"stream broke: {type(e).__name__}") from None
        finally:
            # Left mid-stream (the wait got its answer): the connection still carries the
            # watch, so it is closed rather than handed back to the pool with unread data.
            raw.close()
            raw.release_conn()


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
