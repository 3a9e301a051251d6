"""Where the Events contract runs: the in-memory fake, the API emulator and the real
kube-apiserver (``realkube``), each with a TensorFusionCluster and a GPUPool to tell about
(cluster-scoped, as the real CRDs declare them; the CRDs here are minimal)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from gitopsbot.adapters.kube_events import KubeEvents
from gitopsbot.core.notices.kube_events import ObjectRef
from gitopsbot.core.rollouts import tf_objects as tf
from gitopsbot.testing import FakeEvents
from tests import kube_pods
from tests.kube_pods import CRDS, KubeServer

SERVERS = ["emulator", pytest.param("realkube", marks=pytest.mark.realkube)]
INSTANCE = "gitopsbot-7d9f-abc123"


def crd(kind: str, plural: str) -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{tf.GROUP}"},
        "spec": {
            "group": tf.GROUP,
            "scope": "Cluster",
            "names": {"kind": kind, "plural": plural, "singular": kind.lower()},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "x-kubernetes-preserve-unknown-fields": True,
                        }
                    },
                }
            ],
        },
    }


@dataclass
class Target:
    """An Events implementation, the objects it may tell about, and their uids."""

    name: str
    events: Any
    tfc: ObjectRef
    pool: ObjectRef
    uids: dict[str, str]
    server: KubeServer | None = None


def install_objects(server: KubeServer, tfc: str, pool: str) -> dict[str, str]:
    """The two CRDs and one object of each; their uids by kind."""
    for kind, plural in (("TensorFusionCluster", "tensorfusionclusters"), ("GPUPool", "gpupools")):
        server.request("POST", CRDS, crd(kind, plural))
    for plural in ("tensorfusionclusters", "gpupools"):
        kube_pods.wait_served(server, tf.TF, plural)
    uids = {}
    for kind, plural, name in (
        ("TensorFusionCluster", "tensorfusionclusters", tfc),
        ("GPUPool", "gpupools", pool),
    ):
        body = {"apiVersion": tf.TF, "kind": kind, "metadata": {"name": name}, "spec": {}}
        made = server.request("POST", f"/apis/{tf.TF}/{plural}", body)
        uids[kind] = made["metadata"]["uid"]
    return uids


def names() -> tuple[str, str]:
    """Fresh names: the real server's ``default`` namespace keeps Events of earlier tests."""
    tfc = f"tf-{os.urandom(3).hex()}"
    return tfc, f"{tfc}-shared"


@pytest.fixture(params=["fake", *SERVERS])
def target(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Target]:
    tfc, pool = names()
    tfc_ref = ObjectRef(tf.TF, "TensorFusionCluster", tfc)
    pool_ref = ObjectRef(tf.TF, "GPUPool", pool)
    if request.param == "fake":
        fake = FakeEvents(instance=INSTANCE)
        uids = {"TensorFusionCluster": fake.add("TensorFusionCluster", tfc),
                "GPUPool": fake.add("GPUPool", pool)}  # fmt: skip
        yield Target("fake", fake, tfc_ref, pool_ref, uids)
        return
    with kube_pods.open_server(request.param, request, tmp_path) as server:
        uids = install_objects(server, tfc, pool)
        adapter = KubeEvents.from_kubeconfig(server.kubeconfig, instance=INSTANCE)
        try:
            yield Target(request.param, adapter, tfc_ref, pool_ref, uids, server)
        finally:
            adapter.close()
