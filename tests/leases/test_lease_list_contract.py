"""The Leases port's ``list`` and labelled ``create`` (what sharing the fleet needs), on the
fake, the emulator and the real kube-apiserver (as a ServiceAccount granted get, list, create
and update on leases: docs/leases.md's RBAC, the chart's Role)."""

from __future__ import annotations

import os
from datetime import UTC, datetime
from typing import Any

from gitopsbot.core.replicas.lease import LeaseSpec, released

T0 = datetime(2026, 12, 3, 12, 0, 0, 123456, tzinfo=UTC)


def spec(holder: str) -> LeaseSpec:
    return LeaseSpec(holder, 15, T0, T0, 0)


def test_list_returns_the_leases_with_the_labels_and_keeps_them_over_replaces(
    leases: Any,
) -> None:
    port, ns, _ = leases
    role = f"role-{os.urandom(3).hex()}"
    a, b, c = (f"{x}-{os.urandom(3).hex()}" for x in "abc")
    port.create(ns, a, spec("one"), {"gitopsbot.io/role": role})
    created = port.create(ns, b, spec("two"), {"gitopsbot.io/role": role, "other": "x"})
    port.create(ns, c, spec("three"))
    port.replace(created, released(created.spec, T0))
    found = {r.name: r.spec.holder for r in port.list(ns, {"gitopsbot.io/role": role})}
    assert found == {a: "one", b: ""}
    assert all(r.namespace == ns for r in port.list(ns, {"gitopsbot.io/role": role}))
    assert port.list(ns, {"gitopsbot.io/role": role, "other": "x"})[0].name == b
    assert port.list(ns, {"gitopsbot.io/role": "nobody"}) == []
