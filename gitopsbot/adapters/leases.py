"""The Leases port over the Kubernetes API (coordination.k8s.io/v1), through the client's
``ApiClient`` (auth, TLS and proxy from the kubeconfig).

Plain JSON, not the typed ``CoordinationV1Api``: its models would parse ``renewTime`` into a
datetime and write it back in their own format; here the bytes on the wire are the ones
``core.replicas.lease.lease_body`` made. One request per call, no retries (the port says why), a
short timeout so a hung request cannot outlive a renew deadline.
"""

from __future__ import annotations

import builtins
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kubernetes.client import ApiClient

from gitopsbot.adapters.kube_request import kubeconfig_client, read
from gitopsbot.core.replicas.lease import LeaseRecord, LeaseSpec, lease_body, record_of
from gitopsbot.errors import KubeInvalid, KubeNotFound
from gitopsbot.ports.cluster import FIELD_MANAGER
from gitopsbot.ports.leases import Leases

_BASE = "/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"


class KubeLeases(Leases):
    """Leases over one API server (one kubeconfig context)."""

    def __init__(self, api_client: ApiClient, *, request_timeout_seconds: float = 5.0) -> None:
        self._client = api_client
        self._timeout = request_timeout_seconds

    @classmethod
    def from_kubeconfig(cls, path: Path | str, context: str = "", **kwargs: Any) -> KubeLeases:
        # (no retries by the client: a retry is the keeper's decision, on its period)
        return cls(kubeconfig_client(path, context), **kwargs)

    def close(self) -> None:
        self._client.close()  # type: ignore[no-untyped-call]

    def read(self, namespace: str, name: str) -> LeaseRecord | None:
        path = f"{_BASE.format(namespace=namespace)}/{name}"
        try:
            return self._record("GET", path, None, what=f"read Lease {namespace}/{name}")
        except KubeNotFound:
            return None

    def list(self, namespace: str, labels: Mapping[str, str]) -> builtins.list[LeaseRecord]:
        selector = ",".join(f"{k}={v}" for k, v in sorted(labels.items()))
        what = f"list Leases {namespace} ({selector})"
        data = self._send("GET", _BASE.format(namespace=namespace), None, what, selector)
        try:
            obj = json.loads(data)
            items = obj.get("items") if isinstance(obj, dict) else None
            if not isinstance(items, list):
                raise ValueError("no items")
            out = []
            for item in items:
                if isinstance(item, dict):
                    # A list's items carry neither kind nor apiVersion: the record does not care.
                    meta = item.setdefault("metadata", {})
                    meta.setdefault("namespace", namespace)
                    out.append(record_of(item))
            return out
        except ValueError as e:
            raise KubeInvalid(f"{what}: unreadable answer: {e}") from None

    def create(
        self,
        namespace: str,
        name: str,
        spec: LeaseSpec,
        labels: Mapping[str, str] | None = None,
    ) -> LeaseRecord:
        base = {"metadata": {"labels": dict(labels)}} if labels else None
        body = lease_body(namespace, name, spec, base)
        what = f"create Lease {namespace}/{name}"
        return self._record("POST", _BASE.format(namespace=namespace), body, what=what)

    def replace(self, current: LeaseRecord, spec: LeaseSpec) -> LeaseRecord:
        namespace, name = current.namespace, current.name
        body = lease_body(namespace, name, spec, current.raw)
        # Without it the server would overwrite whatever is there: the guard is the point.
        body["metadata"]["resourceVersion"] = current.resource_version
        path = f"{_BASE.format(namespace=namespace)}/{name}"
        return self._record("PUT", path, body, what=f"replace Lease {namespace}/{name}")

    def _record(self, method: str, path: str, body: Any, *, what: str) -> LeaseRecord:
        data = self._send(method, path, body, what)
        try:
            obj = json.loads(data)
            if not isinstance(obj, dict):
                raise ValueError("not a JSON object")
            return record_of(obj)
        except ValueError as e:  # JSONDecodeError is a ValueError
            raise KubeInvalid(f"{what}: unreadable answer: {e}") from None

    def _send(self, method: str, path: str, body: Any, what: str, selector: str = "") -> bytes:
        query = [("fieldManager", FIELD_MANAGER)] if method in ("POST", "PUT") else []
        if selector:
            query.append(("labelSelector", selector))
        return read(
            self._client, method, path, what=what, query=query, body=body,
            content_type="application/json" if body is not None else None,
            timeout=self._timeout,
        )  # fmt: skip
