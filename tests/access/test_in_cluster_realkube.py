"""In-cluster authentication on the real control plane (issue 12 part 2).

A fake ServiceAccount mount (a TokenRequest token, the control plane's CA, the namespace,
laid out as the kubelet does: ``..data`` symlink swapped atomically on rotation) and
KUBERNETES_SERVICE_HOST/PORT pointing at the real kube-apiserver; no kubeconfig anywhere.
KubeCluster, KubeLeases, helm 3, helm 4 and kubectl all authenticate through it, and a
rotated token is used by the very next request. A remote cluster's kubeconfig kept in a
Secret (the same server, another ServiceAccount's token as the canary) is read through the
API and works, and its token never reaches output, exceptions or a file left after exit.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import stat
import subprocess
import sys
import time
import urllib.error
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from gitopsbot import app
from gitopsbot.adapters.helm import HelmCli
from gitopsbot.adapters.kube import KubeCluster
from gitopsbot.adapters.kube_request import send
from gitopsbot.adapters.leases import KubeLeases
from gitopsbot.core.fleet.model import KubeconfigSecretRef
from gitopsbot.core.replicas.lease import LeaseSpec
from gitopsbot.errors import ConfigError, HelmError, KubeForbidden

pytestmark = [pytest.mark.realkube, pytest.mark.slow, pytest.mark.timeout(300)]
ROOT = Path(__file__).resolve().parents[2]


def write_service_account(directory: Path, token: str, ca: Path, namespace: str) -> None:
    """What the kubelet does for a projected volume: a fresh timestamped directory, then an
    atomic swap of the ``..data`` symlink; ``token`` etc. are symlinks through ``..data``."""
    directory.mkdir(parents=True, exist_ok=True)
    fresh = directory / f"..{os.urandom(6).hex()}"
    fresh.mkdir()
    (fresh / "token").write_text(token)
    shutil.copyfile(ca, fresh / "ca.crt")
    (fresh / "namespace").write_text(namespace)
    tmp_link = directory / "..data_tmp"
    tmp_link.symlink_to(fresh.name)
    old = os.readlink(directory / "..data") if (directory / "..data").is_symlink() else None
    os.replace(tmp_link, directory / "..data")
    for name in ("token", "ca.crt", "namespace"):
        if not (directory / name).is_symlink():
            (directory / name).symlink_to(f"..data/{name}")
    if old:
        shutil.rmtree(directory / old)


def bind(cp: Any, namespace: str, account: str, role: str = "admin") -> None:
    """A RoleBinding of the built-in ClusterRole ``role`` to ServiceAccount ``account``."""
    cp.request(
        "POST",
        f"/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}/rolebindings",
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": f"{account}-{role}"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                        "name": role},
            "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": namespace}],
        },
    )  # fmt: skip
    # The RBAC authorizer sees a new binding through its informer, a moment later: on a busy
    # machine the first request could still be refused. Wait until the server says allowed.
    deadline = time.monotonic() + 30
    while not _allowed(cp, namespace, account):
        assert time.monotonic() < deadline, f"RoleBinding {account}-{role} never took effect"
        time.sleep(0.05)


def _allowed(cp: Any, namespace: str, account: str) -> bool:
    review = cp.request(
        "POST",
        "/apis/authorization.k8s.io/v1/subjectaccessreviews",
        {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": {
                "user": f"system:serviceaccount:{namespace}:{account}",
                "resourceAttributes": {"namespace": namespace, "resource": "configmaps",
                                       "verb": "create"},
            },
        },
    )  # fmt: skip
    return bool(review["status"].get("allowed"))


def whoami(access_client: Any) -> str:
    """The username the API server authenticated this client as (SelfSubjectReview)."""
    response = send(
        access_client, "POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews",
        body={"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"},
        content_type="application/json", timeout=10,
    )  # fmt: skip
    return str(json.loads(response.read())["status"]["userInfo"]["username"])


@pytest.fixture
def pod(
    control_plane: Any, realkube_namespace: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> dict[str, Any]:
    """This process as a pod of ServiceAccount ``bot`` (admin of its namespace)."""
    ns = realkube_namespace
    token = control_plane.service_account_token(ns, "bot")
    bind(control_plane, ns, "bot")
    sa_dir = tmp_path / "serviceaccount"
    write_service_account(sa_dir, token, control_plane.ca_file, ns)
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", str(control_plane.port))
    monkeypatch.setenv("GITOPSBOT_SERVICEACCOUNT_DIR", str(sa_dir))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # no ~/.kube/config to fall back on
    monkeypatch.delenv("KUBECONFIG", raising=False)
    return {"ns": ns, "sa_dir": sa_dir, "token": token, "tmp": tmp_path}


def test_the_python_client_and_leases_use_the_service_account_and_follow_rotation(
    control_plane: Any, pod: dict[str, Any]
) -> None:
    ns = pod["ns"]
    access = app.cluster_access(app.RunOptions(fleet_url="unused"))
    try:
        assert access.uses_in_cluster()  # no --kubeconfig, in a "pod"
        connection = access.connect(cluster="home")
        assert connection.how == "in-cluster"
        cluster = KubeCluster(connection.api_client())
        cluster.create(
            {"apiVersion": "v1", "kind": "ConfigMap",
             "metadata": {"name": "probe", "namespace": ns}, "data": {"a": "1"}}
        )  # fmt: skip
        probe = cluster.get("v1", "ConfigMap", ns, "probe")
        assert probe is not None and probe["data"] == {"a": "1"}
        leases = KubeLeases(connection.api_client())
        now = datetime.now(UTC).replace(microsecond=0)
        lease = leases.create(ns, "cluster-lab", LeaseSpec("replica-a", 15, now, now, 0))
        read = leases.read(ns, "cluster-lab")
        assert read is not None and read.spec.holder == lease.spec.holder == "replica-a"
        client = connection.api_client()
        assert whoami(client) == f"system:serviceaccount:{ns}:bot"
        # `run --leases-namespace` in a pod: its Leases through the same ServiceAccount.
        replicas = app.lease_client(app.RunOptions(fleet_url="unused"), access)
        seen = replicas.read(ns, "cluster-lab")
        assert seen is not None and seen.spec.holder == "replica-a"

        # The kubelet rotates the token: the next request (same client) sends the new one.
        rotated = control_plane.service_account_token(ns, "bot-next")
        write_service_account(pod["sa_dir"], rotated, control_plane.ca_file, ns)
        assert whoami(client) == f"system:serviceaccount:{ns}:bot-next"
        with pytest.raises(KubeForbidden):  # bot-next has no rights: the new token it is
            cluster.get("v1", "ConfigMap", ns, "probe")
        write_service_account(
            pod["sa_dir"], control_plane.service_account_token(ns, "bot"), control_plane.ca_file,
            ns,
        )  # fmt: skip
        assert cluster.get("v1", "ConfigMap", ns, "probe") is not None
        assert leases.read(ns, "cluster-lab") is not None
    finally:
        access.close()


@pytest.mark.parametrize("major", ["helm3", "helm4"])
def test_helm_and_kubectl_read_the_token_file_through_a_kubeconfig_without_a_secret(
    control_plane: Any, pod: dict[str, Any], binaries: dict[str, Path], major: str
) -> None:
    ns = pod["ns"]
    access = app.cluster_access(app.RunOptions(fleet_url="unused"))
    try:
        connection = access.connect(cluster="home")
        kubeconfig = Path(connection.kubeconfig)
        text = kubeconfig.read_text()
        assert "tokenFile" in text and pod["token"] not in text  # a reference, no secret
        assert stat.S_IMODE(kubeconfig.stat().st_mode) == 0o600
        assert stat.S_IMODE(kubeconfig.parent.stat().st_mode) == 0o700

        helm = HelmCli(
            binaries[major], home=pod["tmp"] / major, kubeconfig=connection.kubeconfig,
            kube_context=connection.context, retry_delays=(),
        )  # fmt: skip
        assert helm.history("nothing-here", ns) == []  # authenticated, allowed, empty
        kubectl = [str(binaries["kubectl"]), "--kubeconfig", connection.kubeconfig]
        who = subprocess.run(
            [*kubectl, "auth", "whoami", "-o", "jsonpath={.status.userInfo.username}"],
            capture_output=True, text=True, timeout=60, check=True,
        )  # fmt: skip
        assert who.stdout == f"system:serviceaccount:{ns}:bot"

        # Rotated to an account without rights: the next helm and kubectl use the new token.
        write_service_account(
            pod["sa_dir"], control_plane.service_account_token(ns, "bot-next"),
            control_plane.ca_file, ns,
        )  # fmt: skip
        with pytest.raises(HelmError) as refused:
            helm.history("nothing-here", ns)
        assert f"system:serviceaccount:{ns}:bot-next" in str(refused.value)
        who = subprocess.run(
            [*kubectl, "auth", "whoami", "-o", "jsonpath={.status.userInfo.username}"],
            capture_output=True, text=True, timeout=60, check=True,
        )  # fmt: skip
        assert who.stdout == f"system:serviceaccount:{ns}:bot-next"
    finally:
        access.close()
    assert not kubeconfig.exists() and not kubeconfig.parent.exists()


# -- a remote cluster's kubeconfig in a Secret -----------------------------------------------

CHILD = """
import json, logging, sys
logging.basicConfig(level=logging.DEBUG)
from gitopsbot import app
from gitopsbot.core.fleet.model import KubeconfigSecretRef
from gitopsbot.adapters.kube import KubeCluster
from gitopsbot.errors import ConfigError
access = app.cluster_access(app.RunOptions(fleet_url="unused"))
conn = access.connect(kubeconfig_secret=KubeconfigSecretRef(sys.argv[1], "kubeconfig"),
                      cluster="prod-eu1")
cluster = KubeCluster(conn.api_client())
print("configmaps:", len(cluster.list("v1", "ConfigMap", sys.argv[2])))
print("kubeconfig:", conn.kubeconfig)
try:
    access.connect(kubeconfig_secret=KubeconfigSecretRef(sys.argv[1], "nope"), cluster="x")
except ConfigError as e:
    print("error:", e)
try:
    access.connect(kubeconfig_secret=KubeconfigSecretRef(sys.argv[3], "kubeconfig"), cluster="y")
except ConfigError as e:
    print("error:", e)
"""


def _remote_kubeconfig(control_plane: Any, tmp: Path, remote_ns: str) -> tuple[str, str]:
    token = control_plane.service_account_token(remote_ns, "remote-bot")
    bind(control_plane, remote_ns, "remote-bot")
    path = control_plane.write_kubeconfig(tmp / "remote.kubeconfig", token=token, context="eu1")
    config = json.loads(path.read_text())
    path.unlink()  # it lives only in the Secret from now on
    # The CA inline, as kubeconfigs made for a Secret are: the Python client unpacks it into a
    # file, which must go to the private directory too.
    cluster = config["clusters"][0]["cluster"]
    ca = Path(cluster.pop("certificate-authority")).read_bytes()
    cluster["certificate-authority-data"] = base64.b64encode(ca).decode()
    return token, json.dumps(config)


def _secret(cp: Any, ns: str, name: str, data: dict[str, str]) -> None:
    cp.request(
        "POST", f"/api/v1/namespaces/{ns}/secrets",
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name},
         "data": {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}},
    )  # fmt: skip


def test_a_kubeconfig_secret_reaches_a_remote_cluster_and_its_token_leaks_nowhere(
    control_plane: Any, pod: dict[str, Any], binaries: dict[str, Path]
) -> None:
    ns, tmp = pod["ns"], pod["tmp"]
    remote_ns = f"{ns}-remote"
    canary, text = _remote_kubeconfig(control_plane, tmp, remote_ns)
    try:
        _secret(control_plane, ns, "prod-eu1-kubeconfig", {"kubeconfig": text})
        # A broken one: the YAML error must not quote the token either.
        _secret(control_plane, ns, "broken", {"kubeconfig": f"users: [{{token: {canary}"})

        # In this process: the client from memory, kubectl from the 0600 file.
        access = app.cluster_access(app.RunOptions(fleet_url="unused"))
        try:
            conn = access.connect(
                kubeconfig_secret=KubeconfigSecretRef("prod-eu1-kubeconfig", "kubeconfig"),
                cluster="prod-eu1",
            )
            assert whoami(conn.api_client()) == f"system:serviceaccount:{remote_ns}:remote-bot"
            assert stat.S_IMODE(Path(conn.kubeconfig).stat().st_mode) == 0o600
            who = subprocess.run(
                [str(binaries["kubectl"]), "--kubeconfig", conn.kubeconfig, "auth", "whoami",
                 "-o", "jsonpath={.status.userInfo.username}"],
                capture_output=True, text=True, timeout=60, check=True,
            )  # fmt: skip
            assert who.stdout == f"system:serviceaccount:{remote_ns}:remote-bot"
            helm = HelmCli(
                binaries["helm4"], home=tmp / "helm-remote", kubeconfig=conn.kubeconfig,
                retry_delays=(),
            )  # fmt: skip
            assert helm.history("nothing-here", remote_ns) == []  # authenticated and allowed
        finally:
            access.close()

        # A whole process: its output, its errors and the files it leaves behind.
        child_tmp = tmp / "child-tmp"
        child_tmp.mkdir()
        done = subprocess.run(
            [sys.executable, "-c", CHILD, "prod-eu1-kubeconfig", remote_ns, "broken"],
            capture_output=True, text=True, timeout=120, cwd=ROOT,
            env={**os.environ, "TMPDIR": str(child_tmp)},
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-2000:]
        assert "configmaps: " in done.stdout
        assert f"error: kubeconfigSecret {ns}/prod-eu1-kubeconfig key 'nope': " in done.stdout
        assert f"error: kubeconfigSecret {ns}/broken key 'kubeconfig': not a YAML" in done.stdout
        assert canary not in done.stdout + done.stderr
        leftovers = [p for p in child_tmp.rglob("*")]
        assert leftovers == [], leftovers  # the private directory went at exit
        for path in tmp.rglob("*"):
            if path.is_file() and not path.is_symlink():
                assert canary.encode() not in path.read_bytes(), path
    finally:
        try:
            control_plane.request("DELETE", f"/api/v1/namespaces/{remote_ns}")
        except urllib.error.HTTPError:
            pass


def test_in_cluster_asked_for_outside_a_pod_says_what_is_missing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("GITOPSBOT_SERVICEACCOUNT_DIR", str(tmp_path / "none"))
    with pytest.raises(ConfigError) as caught:
        app.cluster_access(app.RunOptions(fleet_url="unused", in_cluster=True))
    message = str(caught.value)
    assert message.startswith("--in-cluster: not running in a pod (")
    assert "KUBERNETES_SERVICE_HOST" in message and str(tmp_path / "none" / "token") in message
