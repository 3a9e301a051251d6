"""A real Kubernetes control plane on loopback: etcd, kube-apiserver and kube-controller-manager.

The emulator (``sandbox/apiserver``) is ours; this is upstream's, for the tests that must know
what the real server does (the ``realkube`` tier, docs/testing.md). The binaries come from
``tests/realkube/build.sh`` (kube-apiserver, kube-controller-manager built from one Kubernetes
release) and Debian's ``etcd-server``.

    with ControlPlane(binaries, work_dir) as cp:
        cp.write_kubeconfig(path)                            # the admin (system:masters)
        cp.write_kubeconfig(path, token=cp.service_account_token("ns", "bot"))

What it sets up, and why:

- TLS from a throwaway CA made here with openssl (clients verify the server as they would
  in production; nothing is skipped).
- Authentication by bearer token only: a static token file for the admin, and ServiceAccount
  tokens from the TokenRequest API (signed with a key made here). Authorization is RBAC alone,
  so a ServiceAccount can do exactly what its Roles grant.
- kube-controller-manager with every default controller except ``nodelifecycle``: no kubelet
  heartbeats here, so it would taint and evict every pod. Deployments, ReplicaSets, garbage
  collection, namespaces and ServiceAccounts are upstream's. There is no scheduler or kubelet:
  pods stay Pending until a test binds them (``sandbox/podrunner.py``).
- An audit log of every request a ServiceAccount makes (``audit_events()``), at the Metadata
  level (no bodies: tokens and Secrets never reach it), written synchronously: what the
  least-privilege test reads to show each granted rule is used and nothing is denied.
- Each child runs as ``sandbox/server_process.py`` starts it (it dies with this process, in
  its own session), with its log in ``work_dir``; ``stop()`` ends them whatever happened.
"""

from __future__ import annotations

import json
import os
import shutil
import ssl
import subprocess
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self

from gitopsbot.errors import GitOpsBotError
from gitopsbot.sandbox import server_process as proc
from gitopsbot.sandbox.service import Service

START_TIMEOUT_SECONDS = 90.0
ADMIN_USER = "realkube-admin"
# nodelifecycle would taint nodes that never heartbeat and evict their pods.
CONTROLLERS = "*,-nodelifecycle"
# ServiceAccounts' requests at Metadata (who, verb, resource, the authorizer's decision and
# reason), once each when answered; everyone else's (the admin, the controllers) not at all.
AUDIT_POLICY = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    "omitStages": ["RequestReceived", "ResponseStarted"],
    "rules": [
        {"level": "Metadata", "userGroups": ["system:serviceaccounts"]},
        {"level": "None"},
    ],
}


class ControlPlaneError(GitOpsBotError):
    """The control plane could not start (the message carries the tail of the failing log)."""


@dataclass(frozen=True, slots=True)
class ControlPlaneBinaries:
    apiserver: Path
    controller_manager: Path
    etcd: Path

    @classmethod
    def in_dir(cls, bin_dir: Path, *, etcd: str | None = None) -> ControlPlaneBinaries:
        """The two Kubernetes binaries in ``bin_dir``; etcd from PATH unless named."""
        found = etcd or shutil.which("etcd")
        if not found:
            raise ControlPlaneError("etcd is not on PATH (Debian: apt-get install etcd-server)")
        binaries = cls(bin_dir / "kube-apiserver", bin_dir / "kube-controller-manager", Path(found))
        for path in (binaries.apiserver, binaries.controller_manager):
            if not os.access(path, os.X_OK):
                raise ControlPlaneError(f"{path}: missing (run tests/realkube/build.sh)")
        return binaries


class ControlPlane(Service):
    """Start with ``start()``; ``stop()`` ends every child. See the module docstring."""

    def __init__(self, binaries: ControlPlaneBinaries, work_dir: Path) -> None:
        self.binaries = binaries
        self.work_dir = work_dir
        self.port = 0
        self.admin_token = ""
        self._children: list[tuple[str, subprocess.Popen[bytes]]] = []

    @property
    def url(self) -> str:
        return f"https://{proc.HOST}:{self.port}"

    @property
    def ca_file(self) -> Path:
        return self.work_dir / "pki" / "ca.crt"

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> Self:
        try:
            self.work_dir.mkdir(parents=True, exist_ok=True)
            self._pki()
            etcd_url = self._start_etcd()
            self._start_apiserver(etcd_url)
            self._start_controller_manager()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        proc.stop_all(child for _name, child in reversed(self._children))
        self._children.clear()

    @property
    def audit_log(self) -> Path:
        return self.work_dir / "audit.log"

    def audit_offset(self) -> int:
        """Where the audit log ends now: ``audit_events(since=...)`` reads what comes after."""
        try:
            return self.audit_log.stat().st_size
        except FileNotFoundError:
            return 0

    def audit_events(self, *, user: str | None = None, since: int = 0) -> list[dict[str, Any]]:
        """The audit events written after byte ``since`` (of ``user`` alone when given)."""
        try:
            with self.audit_log.open("rb") as log:
                log.seek(since)
                raw = log.read()
        except FileNotFoundError:
            return []
        events = [json.loads(line) for line in raw.splitlines() if line.strip()]
        return [e for e in events if user is None or e.get("user", {}).get("username") == user]

    def alive(self) -> dict[str, bool]:
        return {name: child.poll() is None for name, child in self._children}

    # ------------------------------------------------------------------ clients

    def write_kubeconfig(
        self,
        path: Path,
        *,
        token: str | None = None,
        context: str = "realkube",
        namespace: str = "default",
    ) -> Path:
        """A kubeconfig for this server: the admin's unless ``token`` is given."""
        path.parent.mkdir(parents=True, exist_ok=True)
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "current-context": context,
            "clusters": [
                {
                    "name": context,
                    "cluster": {"server": self.url, "certificate-authority": str(self.ca_file)},
                }
            ],
            "contexts": [
                {
                    "name": context,
                    "context": {"cluster": context, "user": context, "namespace": namespace},
                }
            ],
            "users": [{"name": context, "user": {"token": token or self.admin_token}}],
        }
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)  # holds a token
        with os.fdopen(fd, "w") as out:
            json.dump(config, out, indent=2)
        return path

    def request(self, method: str, path: str, body: Any = None, *, token: str | None = None) -> Any:
        """One admin (or ``token``) request; the decoded JSON answer. HTTP errors raise."""
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method)
        req.add_header("Authorization", f"Bearer {token or self.admin_token}")
        req.add_header("Accept", "application/json")
        if data is not None:
            req.add_header("Content-Type", "application/json")
        context = ssl.create_default_context(cafile=str(self.ca_file))
        with urllib.request.urlopen(req, context=context, timeout=30) as resp:
            raw = resp.read()
            is_json = resp.headers.get_content_type() == "application/json"
        if not raw:
            return None
        return json.loads(raw) if is_json else raw.decode(errors="replace")

    def service_account_token(
        self, namespace: str, name: str, *, seconds: int = 3600, create: bool = True
    ) -> str:
        """A bound token for ServiceAccount ``namespace/name`` (TokenRequest API)."""
        base = f"/api/v1/namespaces/{namespace}/serviceaccounts"
        if create:
            for kind, path, obj in (
                ("Namespace", "/api/v1/namespaces", {"metadata": {"name": namespace}}),
                ("ServiceAccount", base, {"metadata": {"name": name}}),
            ):
                try:
                    self.request("POST", path, {"apiVersion": "v1", "kind": kind, **obj})
                except urllib.error.HTTPError as e:
                    if e.code != 409:
                        raise
        answer = self.request(
            "POST",
            f"{base}/{name}/token",
            {
                "apiVersion": "authentication.k8s.io/v1",
                "kind": "TokenRequest",
                "spec": {"expirationSeconds": seconds},
            },
        )
        token: str = answer["status"]["token"]
        return token

    # ------------------------------------------------------------------ the pieces

    def _pki(self) -> None:
        pki = self.work_dir / "pki"
        pki.mkdir(exist_ok=True)
        ssl_cmd = ["openssl"]

        def run(*args: str) -> None:
            done = subprocess.run([*ssl_cmd, *args], cwd=pki, capture_output=True, check=False)
            if done.returncode != 0:
                raise ControlPlaneError(f"openssl {args[0]}: {done.stderr.decode()[-500:]}")

        ext = pki / "server.ext"
        ext.write_text(f"subjectAltName=IP:{proc.HOST},DNS:localhost\n")
        run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
            "-keyout", "ca.key", "-out", "ca.crt", "-subj", "/CN=realkube-ca")  # fmt: skip
        run("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key",
            "-out", "server.csr", "-subj", "/CN=kube-apiserver")  # fmt: skip
        run("x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
            "-CAcreateserial", "-days", "2", "-out", "server.crt",
            "-extfile", "server.ext")  # fmt: skip
        run("genrsa", "-out", "sa.key", "2048")
        run("rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub")
        self.admin_token = os.urandom(24).hex()
        tokens = pki / "tokens.csv"
        fd = os.open(tokens, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(f'{self.admin_token},{ADMIN_USER},{ADMIN_USER},"system:masters"\n')

    def _start_etcd(self) -> str:
        client, peer = proc.free_port(), proc.free_port()
        url = f"http://{proc.HOST}:{client}"
        self._spawn(
            "etcd",
            [
                str(self.binaries.etcd),
                "--name=realkube",
                f"--data-dir={self.work_dir / 'etcd'}",
                f"--listen-client-urls={url}",
                f"--advertise-client-urls={url}",
                f"--listen-peer-urls=http://{proc.HOST}:{peer}",
                f"--initial-advertise-peer-urls=http://{proc.HOST}:{peer}",
                f"--initial-cluster=realkube=http://{proc.HOST}:{peer}",
            ],
        )
        self._wait("etcd", lambda: proc.http_ok(f"{url}/health"))
        return url

    def _start_apiserver(self, etcd_url: str) -> None:
        pki = self.work_dir / "pki"
        self.port = proc.free_port()
        self._spawn(
            "kube-apiserver",
            [
                str(self.binaries.apiserver),
                f"--etcd-servers={etcd_url}",
                f"--bind-address={proc.HOST}",
                f"--advertise-address={proc.HOST}",
                f"--secure-port={self.port}",
                f"--cert-dir={pki}",
                f"--tls-cert-file={pki / 'server.crt'}",
                f"--tls-private-key-file={pki / 'server.key'}",
                f"--token-auth-file={pki / 'tokens.csv'}",
                "--authorization-mode=RBAC",
                "--anonymous-auth=false",
                "--service-account-issuer=https://kubernetes.default.svc",
                f"--service-account-key-file={pki / 'sa.pub'}",
                f"--service-account-signing-key-file={pki / 'sa.key'}",
                "--service-cluster-ip-range=10.96.0.0/24",
                # loopback cannot be the kubernetes Service's endpoint: keep none
                "--endpoint-reconciler-type=none",
                "--allow-privileged=true",
                f"--audit-policy-file={self._audit_policy()}",
                f"--audit-log-path={self.audit_log}",
                "--audit-log-format=json",
                "--audit-log-mode=blocking",  # written before the answer: a test reads it at once
                "--audit-log-maxsize=0",
            ],
        )
        self._wait("kube-apiserver", self._ready)

    def _audit_policy(self) -> Path:
        path = self.work_dir / "audit-policy.json"  # JSON is YAML: the server reads either
        path.write_text(json.dumps(AUDIT_POLICY))
        return path

    def _ready(self) -> bool:
        try:
            self.request("GET", "/readyz")
        except (OSError, ValueError):
            return False
        return True

    def _start_controller_manager(self) -> None:
        pki = self.work_dir / "pki"
        kubeconfig = self.write_kubeconfig(self.work_dir / "controller-manager.kubeconfig")
        self._spawn(
            "kube-controller-manager",
            [
                str(self.binaries.controller_manager),
                f"--kubeconfig={kubeconfig}",
                f"--controllers={CONTROLLERS}",
                f"--service-account-private-key-file={pki / 'sa.key'}",
                f"--root-ca-file={pki / 'ca.crt'}",
                "--leader-elect=false",
                f"--bind-address={proc.HOST}",
                "--secure-port=0",
                "--concurrent-deployment-syncs=5",
                "--concurrent-replicaset-syncs=5",
            ],
        )
        # Ready once its ServiceAccount controller made the default namespace's account.
        self._wait("kube-controller-manager", self._has_default_account)

    def _has_default_account(self) -> bool:
        try:
            self.request("GET", "/api/v1/namespaces/default/serviceaccounts/default")
        except (OSError, ValueError):
            return False
        return True

    def _spawn(self, name: str, argv: list[str]) -> None:
        self._children.append((name, proc.spawn(argv, self.work_dir / f"{name}.log")))

    def _wait(self, name: str, ready: Callable[[], bool]) -> None:
        proc.wait_ready(
            dict(self._children)[name],
            ready,
            timeout=START_TIMEOUT_SECONDS,
            failed=lambda why: ControlPlaneError(
                f"{name} {why}: {proc.log_tail(self.work_dir / f'{name}.log')}"
            ),
        )
