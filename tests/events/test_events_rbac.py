"""Least privilege for Events on the real API server (docs/permissions.md, "Events: a Role in
``default``"): a ServiceAccount holding only ``get`` on tensorfusionclusters and gpupools and
the chart's Role in ``default`` (events.k8s.io events: create, patch) posts and repeats
Events; without ``create`` the first is refused, without ``patch`` the repeat is, each naming
the verb and the resource."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from gitopsbot.adapters.kube_events import KubeEvents
from gitopsbot.core.notices.kube_events import EventSpec, ObjectRef
from gitopsbot.core.rollouts import tf_objects as tf
from gitopsbot.errors import KubeForbidden
from tests import kube_pods
from tests.events.conftest import install_objects, names
from tests.realkube import tf_support as tfs

RBAC = "/apis/rbac.authorization.k8s.io/v1"
READ = [{"apiGroups": [tf.GROUP], "resources": ["tensorfusionclusters", "gpupools"],
         "verbs": ["get"]}]  # fmt: skip


def _events_rule(verbs: list[str]) -> list[dict[str, Any]]:
    return [{"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": verbs}]


def _bind(plane: Any, ns: str, verbs: list[str]) -> None:
    name = f"gitopsbot-events-{ns}"
    subject = [{"kind": "ServiceAccount", "name": tfs.SA, "namespace": ns}]
    ref = {"apiGroup": "rbac.authorization.k8s.io", "name": name}
    meta = {"name": name}
    tfs._put(plane, f"{RBAC}/clusterroles", {"apiVersion": "rbac.authorization.k8s.io/v1",
             "kind": "ClusterRole", "metadata": meta, "rules": READ})  # fmt: skip
    tfs._put(plane, f"{RBAC}/clusterrolebindings", {"apiVersion": "rbac.authorization.k8s.io/v1",
             "kind": "ClusterRoleBinding", "metadata": meta,
             "roleRef": {**ref, "kind": "ClusterRole"}, "subjects": subject})  # fmt: skip
    in_default = {**meta, "namespace": "default"}
    tfs._put(plane, f"{RBAC}/namespaces/default/roles", {"apiVersion":
             "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": in_default,
             "rules": _events_rule(verbs)})  # fmt: skip
    tfs._put(plane, f"{RBAC}/namespaces/default/rolebindings", {"apiVersion":
             "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": in_default,
             "roleRef": {**ref, "kind": "Role"}, "subjects": subject})  # fmt: skip
    deadline = time.monotonic() + 10
    for verb in ("create", "patch"):
        while tfs.allowed(plane, ns, "events.k8s.io", "events", verb, "default") != (verb in verbs):
            assert time.monotonic() < deadline, f"RBAC never settled on {verb}"
            time.sleep(0.05)


def _unbind(plane: Any, ns: str) -> None:
    name = f"gitopsbot-events-{ns}"
    for path in (f"{RBAC}/clusterroles/{name}", f"{RBAC}/clusterrolebindings/{name}",
                 f"{RBAC}/namespaces/default/roles/{name}",
                 f"{RBAC}/namespaces/default/rolebindings/{name}"):  # fmt: skip
        plane.request("DELETE", path)


@pytest.mark.realkube
def test_the_events_role_in_default_is_enough_and_each_verb_is_needed(
    control_plane: Any, realkube_namespace: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    plane, ns = control_plane, realkube_namespace
    tfc, pool = names()
    with kube_pods.open_server("realkube", request, tmp_path) as server:
        install_objects(server, tfc, pool)
        token = plane.service_account_token(ns, tfs.SA)
        config = plane.write_kubeconfig(tmp_path / "sa", token=token, namespace=ns)
        ref = ObjectRef(tf.TF, "TensorFusionCluster", tfc)
        pool_ref = ObjectRef(tf.TF, "GPUPool", pool)
        said = EventSpec("PoolHalted", "Warning", "Upgrade", "upgrade op-1: pool halted")

        def emit(what: ObjectRef, spec: EventSpec = said) -> None:
            events = KubeEvents.from_kubeconfig(config, instance="rbac")
            try:
                events.emit(what, spec, at=datetime.now(UTC))
                events.emit(what, spec, at=datetime.now(UTC))  # the repeat: a patch
            finally:
                events.close()

        try:
            _bind(plane, ns, ["create", "patch"])
            emit(ref)
            emit(pool_ref)
            admin = KubeEvents.from_kubeconfig(server.kubeconfig, instance="reader")
            assert [e.count for e in admin.recorded(ref)] == [2]
            assert [e.count for e in admin.recorded(pool_ref)] == [2]
            admin.close()

            _bind(plane, ns, ["patch"])
            with pytest.raises(KubeForbidden) as refused:
                emit(ref, EventSpec("Failed", "Warning", "Upgrade", "again"))
            assert 'cannot create resource "events"' in str(refused.value)

            _bind(plane, ns, ["create"])
            with pytest.raises(KubeForbidden) as refused:
                emit(ref, EventSpec("Failed", "Warning", "Upgrade", "once more"))
            assert 'cannot patch resource "events"' in str(refused.value)
        finally:
            _unbind(plane, ns)
