"""SecretResolver: a Kubernetes Secret (through the Cluster port, fake and real), a file, an
environment variable (R17).

Covers: each source resolves; the release namespace is the default for a Secret ref; a file's
one trailing newline is dropped; missing Secret, key, file or variable and an empty value
each raise SecretUnavailable naming the ref; the canary value never appears in any error
or log line.
"""

from __future__ import annotations

import base64
import logging
from pathlib import Path
from typing import Any

import pytest

from gitopsbot.adapters.secrets import SecretResolver
from gitopsbot.core.fleet.model import SecretRef
from gitopsbot.core.fleet.secrets import merge_secrets
from gitopsbot.errors import SecretUnavailable
from gitopsbot.ports.cluster import Cluster
from tests.executor.adapters.conftest import Target

CANARY = "canary-7Hq2-token"


def _secret(cluster: Cluster, namespace: str, name: str, **data: str) -> None:
    encoded = {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}
    meta = {"name": name, "namespace": namespace}
    cluster.create({"apiVersion": "v1", "kind": "Secret", "metadata": meta, "data": encoded})


def test_kubernetes_secret_with_default_namespace(cluster: Cluster, cluster_target: Target) -> None:
    ns = cluster_target.namespace  # "default" but on the real server: a fresh one
    _secret(cluster, ns, "tf-agent", token=CANARY)
    resolver = SecretResolver(cluster, default_namespace=ns)
    ref = SecretRef("agent.enrollToken", "kubernetes-secret", "tf-agent", key="token")
    resolved = resolver.resolve_all([ref])
    assert resolved == {"agent.enrollToken": CANARY}
    merged = merge_secrets({"agent": {"agentId": "a"}}, resolved)
    assert merged == {"agent": {"agentId": "a", "enrollToken": CANARY}}


def test_kubernetes_secret_errors_name_the_ref(
    cluster: Cluster, cluster_target: Target, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    ns = cluster_target.namespace
    _secret(cluster, ns, "tf-agent", token=CANARY)
    resolver = SecretResolver(cluster, default_namespace=ns)
    missing_key = SecretRef("agent.enrollToken", "kubernetes-secret", "tf-agent", key="other")
    with pytest.raises(SecretUnavailable, match=r"agent\.enrollToken.*tf-agent.*'other'") as e1:
        resolver.resolve(missing_key)
    missing = SecretRef("greptime.password", "kubernetes-secret", "nope", key="p", namespace="x")
    with pytest.raises(SecretUnavailable, match="x/nope") as e2:
        resolver.resolve(missing)
    for error in (e1.value, e2.value):
        assert CANARY not in str(error)
    assert CANARY not in caplog.text


def test_file_and_env(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    (tmp_path / "token").write_text(CANARY + "\n")
    env = {"TF_PASSWORD": CANARY}
    resolver = SecretResolver(base_dir=tmp_path, environment=env.get)
    assert resolver.resolve(SecretRef("agent.enrollToken", "file", "token")) == CANARY
    assert resolver.resolve(SecretRef("greptime.password", "env", "TF_PASSWORD")) == CANARY
    assert CANARY not in caplog.text


@pytest.mark.parametrize(
    ("ref", "message"),
    [
        (SecretRef("a.b", "file", "absent"), "a.b (file absent): no such file"),
        (SecretRef("a.b", "env", "UNSET_VAR"), "a.b (env UNSET_VAR): environment variable"),
        (SecretRef("a.b", "env", "EMPTY"), "a.b (env EMPTY): the value is empty"),
        (SecretRef("a.b", "kubernetes-secret", "s", key="k"), "needs a cluster"),
    ],
)
def test_unavailable(ref: SecretRef, message: str, tmp_path: Path) -> None:
    env: dict[str, Any] = {"EMPTY": ""}
    resolver = SecretResolver(base_dir=tmp_path, environment=env.get)
    with pytest.raises(SecretUnavailable) as error:
        resolver.resolve(ref)
    assert message in str(error.value)
