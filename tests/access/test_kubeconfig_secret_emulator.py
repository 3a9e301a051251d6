"""A kubeconfigSecret cluster, wired as `gitopsbot run` wires it (``app.executor_factory``), on
the sandbox's API emulator: the bot outside a pod reads the Secret through its --kubeconfig
current context (namespace of that context), the cluster adapter and helm 4 reach the
"remote" cluster through it, and the private directory goes at close. (The emulator speaks
plain HTTP without authentication, so the in-cluster path, which needs TLS and a token, is
tested on the real control plane: test_in_cluster_realkube.py.)"""

from __future__ import annotations

import base64
import stat
from dataclasses import replace
from pathlib import Path

import pytest

from gitopsbot import app
from gitopsbot.adapters.cluster_access import ClusterAccess, ServiceAccountFiles
from gitopsbot.adapters.localfiles import DirectoryTree
from gitopsbot.adapters.tools import ToolSet
from gitopsbot.core.fleet.model import KubeconfigSecretRef
from gitopsbot.errors import ConfigError
from gitopsbot.fleetrepo import load_fleet
from tests.kube_pods import KubeServer, server  # noqa: F401  (the fixture)

ROOT = Path(__file__).resolve().parents[2]
CANARY = "remote-token-canary-5e1f0c"


def test_executor_for_a_kubeconfig_secret_cluster(
    server: KubeServer,  # noqa: F811
    binaries: dict[str, Path],
    tmp_path: Path,
) -> None:
    remote = server.kubeconfig.read_text().replace("token: sandbox", f"token: {CANARY}")
    server.request(
        "POST", f"/api/v1/namespaces/{server.namespace}/secrets",
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "prod-eu1-kubeconfig"},
         "data": {"kubeconfig": base64.b64encode(remote.encode()).decode()}},
    )  # fmt: skip
    spec = load_fleet(DirectoryTree(ROOT / "examples" / "fleet")).clusters["staging"]
    spec = replace(
        spec,
        release=replace(
            spec.release,
            kube_context="",
            kubeconfig_secret=KubeconfigSecretRef("prod-eu1-kubeconfig", "kubeconfig"),
        ),
    )
    options = app.RunOptions(fleet_url="unused", kubeconfig=str(server.kubeconfig), cache=tmp_path)
    access = ClusterAccess(
        kubeconfig=str(server.kubeconfig),
        service_account=ServiceAccountFiles(tmp_path / "no-pod"),
        service=None,
        temp_root=tmp_path / "tmp",
    )
    (tmp_path / "tmp").mkdir()
    tools = ToolSet(binaries["helm4"], binaries["kubectl"], "v4.1.4", "v1.33.9")
    try:
        executor = app.executor_factory(options, tools, access)(spec)
        assert executor.cluster.get("v1", "Secret", server.namespace, "prod-eu1-kubeconfig")
        assert executor.helm.history("nothing-here", server.namespace) == []
        again = app.cluster_connection(access, spec)  # as the Events recorder asks for it
        assert again is app.cluster_connection(access, spec)  # one read of the Secret
        private = access.private_dir()
        files = list(private.iterdir())
        assert [f.name for f in files] == ["staging.kubeconfig"]
        assert stat.S_IMODE(files[0].stat().st_mode) == 0o600
        with pytest.raises(ConfigError) as caught:
            access.connect(kubeconfig_secret=KubeconfigSecretRef("missing", "kubeconfig"))
        assert str(caught.value).startswith(
            f"kubeconfigSecret {server.namespace}/missing key 'kubeconfig': "
        )
        assert CANARY not in str(caught.value)
    finally:
        access.close()
    assert list((tmp_path / "tmp").iterdir()) == []
