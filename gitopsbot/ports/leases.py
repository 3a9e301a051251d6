"""Kubernetes Leases (coordination.k8s.io/v1) as replicas of the bot share them.

Implemented by ``gitopsbot.adapters.leases.KubeLeases`` (kubernetes Python client) and by
``gitopsbot.testing.FakeLeases`` in memory; the same contract tests (tests/leases) run against
both, and against the emulator and the real kube-apiserver. Who should write what is decided
in ``gitopsbot.core.replicas.lease``; this port only reads and writes.

Writes are guarded: two replicas racing on one Lease, exactly one wins and the other gets
``KubeConflict`` (409: AlreadyExists on create, a stale resourceVersion on replace), reads
again and decides again. Other errors are ``gitopsbot.errors.Kube*``: KubeInvalid (422, or
an object we cannot read), KubeFailed (400: e.g. a time not in MicroTime format),
KubeForbidden (RBAC: the bot needs get, create and update on leases, and list to share the
fleet), KubeTooManyRequests, KubeServerError (5xx, transport, timeout). Nothing is retried
here: a replica retries on its own period, and a write that lingers past its renew deadline is
worth nothing.
"""

from __future__ import annotations

import builtins
from collections.abc import Mapping
from typing import Protocol

from gitopsbot.core.replicas.lease import LeaseRecord, LeaseSpec


class Leases(Protocol):
    def read(self, namespace: str, name: str) -> LeaseRecord | None:
        """The Lease, or None when it does not exist."""
        ...

    def list(self, namespace: str, labels: Mapping[str, str]) -> builtins.list[LeaseRecord]:
        """The Leases of the namespace carrying every label in ``labels`` (one request; the
        replicas' membership and cluster Leases; needs ``list`` on leases)."""
        ...

    def create(
        self,
        namespace: str,
        name: str,
        spec: LeaseSpec,
        labels: Mapping[str, str] | None = None,
    ) -> LeaseRecord:
        """Create the Lease with ``spec`` (and ``labels``); KubeConflict when it exists
        already."""
        ...

    def replace(self, current: LeaseRecord, spec: LeaseSpec) -> LeaseRecord:
        """Write ``spec`` over the Lease as read in ``current``, guarded by its
        resourceVersion and uid: KubeConflict when it changed since or was deleted (the
        real server checks the uid first and answers 409, not 404). Labels, annotations and
        spec fields ``spec`` does not name are kept."""
        ...
