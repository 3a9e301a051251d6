"""The Cluster adapter's hold on one API server: its state, discovery and the choke point.

Discovery: a resource's plural and scope come from legacy discovery (``/api/v1``,
``/apis/<group>/<version>``), cached per group-version and refreshed once on a miss (a CRD
applied a moment ago). The choke point (style-research §6.5): every request passes
``_request``, sent as every Kubernetes adapter sends it (kube_request.py). ``KubeCluster``
(kube.py) builds on this, with its waits (kube_waits.py) and CRD checks (kube_crds.py).
"""

from __future__ import annotations

import builtins
import json
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from kubernetes.client import ApiClient

from gitopsbot.adapters.kube_request import (
    RetryPolicy,
    Served,
    discovery_path,
    read,
    retrying,
    served_kinds,
)
from gitopsbot.core.charts.observed import CrdApplyResult
from gitopsbot.errors import KubeNotFound

_DEFAULT_RETRY = RetryPolicy()  # frozen: one default serves every adapter


class KubeAccess:
    """One API server's connection, discovery cache and request path, for ``KubeCluster``."""

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

    def close(self) -> None:
        self._client.close()  # type: ignore[no-untyped-call]

    def get(
        self, api_version: str, kind: str, namespace: str | None, name: str
    ) -> dict[str, Any] | None:
        resource = self._resource(api_version, kind)
        if resource is None:
            return None
        path = resource.path(api_version, namespace, name)
        try:
            return self._json("GET", path, what=f"{kind} {_ref(namespace, name)}")
        except KubeNotFound:
            return None

    # -- discovery -------------------------------------------------------------------------

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


def _ref(namespace: str | None, name: str) -> str:
    return f"{namespace}/{name}" if namespace else name


def _sort_key(item: Mapping[str, Any]) -> tuple[str, str]:
    meta = item.get("metadata") or {}
    return (str(meta.get("namespace") or ""), str(meta.get("name") or ""))
