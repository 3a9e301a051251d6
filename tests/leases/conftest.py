"""Where the Leases contract runs: the in-memory fake, the API emulator and the real
kube-apiserver (``realkube``), each as a ``Target`` (a kubeconfig and a namespace to use)."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from gitopsbot.adapters.leases import KubeLeases
from gitopsbot.sandbox.apiserver import ApiServer
from gitopsbot.testing import FakeLeases

SERVERS = ["emulator", pytest.param("realkube", marks=pytest.mark.realkube)]


@dataclass(frozen=True, slots=True)
class Target:
    server: str
    kubeconfig: Path
    namespace: str
    delete: Callable[[str], None]  # a person deleting a Lease by name, with full rights


@pytest.fixture
def emulator_target(tmp_path: Path) -> Iterator[Target]:
    server = ApiServer()
    server.start()
    try:
        path = server.write_kubeconfig(tmp_path / "kubeconfig")

        def delete(name: str) -> None:
            assert server.store.delete("coordination.k8s.io/v1", "Lease", "default", name)

        yield Target("emulator", path, "default", delete)
    finally:
        server.stop()


@pytest.fixture
def realkube_target(control_plane: Any, realkube_namespace: str, tmp_path: Path) -> Target:
    """As the bot will run: a ServiceAccount allowed only get, list, create and update on
    leases in its namespace (the RBAC docs/leases.md names and the chart grants), not the
    admin."""
    ns = realkube_namespace
    rbac = "/apis/rbac.authorization.k8s.io/v1/namespaces/" + ns
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {"name": "gitopsbot-leases"},
        "rules": [
            {
                "apiGroups": ["coordination.k8s.io"],
                "resources": ["leases"],
                "verbs": ["get", "list", "create", "update"],
            }
        ],
    }
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": "gitopsbot-leases"},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "Role",
            "name": role["metadata"]["name"],
        },
        "subjects": [{"kind": "ServiceAccount", "name": "gitopsbot", "namespace": ns}],
    }
    token = control_plane.service_account_token(ns, "gitopsbot")
    control_plane.request("POST", f"{rbac}/roles", role)
    control_plane.request("POST", f"{rbac}/rolebindings", binding)
    path = control_plane.write_kubeconfig(tmp_path / "kubeconfig", token=token, namespace=ns)

    def delete(name: str) -> None:
        control_plane.request(
            "DELETE", f"/apis/coordination.k8s.io/v1/namespaces/{ns}/leases/{name}"
        )

    return Target("realkube", path, ns, delete)


@pytest.fixture(params=SERVERS)
def target(request: pytest.FixtureRequest) -> Target:
    """A server to run against: the emulator, or the real control plane."""
    found: Target = request.getfixturevalue(f"{request.param}_target")
    return found


@pytest.fixture(params=["fake", *SERVERS])
def leases(request: pytest.FixtureRequest) -> Iterator[Any]:
    """The Leases contract's implementations, and the namespace to use with them:
    ``(leases, namespace, delete)``, ``delete`` a person deleting a Lease by name."""
    if request.param == "fake":
        fake = FakeLeases()
        yield fake, "default", lambda name: fake.delete("default", name)
        return
    found: Target = request.getfixturevalue(f"{request.param}_target")
    adapter = KubeLeases.from_kubeconfig(found.kubeconfig)
    try:
        yield adapter, found.namespace, found.delete
    finally:
        adapter.close()


def lease_name() -> str:
    return f"lease-{os.urandom(3).hex()}"
