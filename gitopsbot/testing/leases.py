"""FakeLeases: the Leases port in memory (contract tests: tests/leases/test_lease_contract.py)."""

from __future__ import annotations

import builtins
import copy
from collections.abc import Mapping
from typing import Any

from gitopsbot.core.replicas.lease import LeaseRecord, LeaseSpec, lease_body, record_of
from gitopsbot.errors import (
    KubeConflict,
    KubeInvalid,
)
from gitopsbot.ports.leases import Leases
from gitopsbot.testing.injected_failures import InjectedFailures


class FakeLeases(Leases):
    """Leases in memory: one store, a global resourceVersion bumped on every
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
        self._failures = InjectedFailures()

    def fail(self, operation: str, error: Exception, *, times: int = 1) -> None:
        self._failures.add(operation, error, times)

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
        self._failures.raise_next(operation)
