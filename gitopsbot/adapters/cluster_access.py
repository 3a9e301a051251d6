"""How the bot reaches each cluster (docs/cluster-access.md): three ways, one ``Connection``.

- ``kubeContext`` (or neither, outside a pod): a context of the ``--kubeconfig`` file.
- In-cluster: no ``kubeContext`` and the bot runs in a pod (``KUBERNETES_SERVICE_HOST``/
  ``_PORT`` set and the ServiceAccount files present), or ``run --in-cluster``. The Python
  client sends the token of ``<serviceaccount dir>/token``, re-read whenever the file changes
  (projected tokens rotate hourly; the kubelet swaps the file). helm and kubectl get a
  kubeconfig that *references* the token file (``tokenFile:``) and ``ca.crt`` by path: it
  holds no secret.
- ``kubeconfigSecret``: a remote cluster's kubeconfig in a Secret of the bot's own namespace
  (of the cluster it runs in, or the ``--kubeconfig`` current context outside a pod), read
  through the API. The Python client is configured from it in memory; helm and kubectl read
  it from a 0600 file.

Files (the two kubeconfigs, and the certificate/key files the Python client unpacks from
``*-data`` fields) live in one private directory (0700) under the process's temp directory,
removed at exit (atexit; on SIGTERM ``run`` stops cleanly, so atexit runs). A bot killed
with SIGKILL leaves it behind: the next start removes the directories of dead processes, and
the chart mounts the temp directory as a memory-backed ``emptyDir`` that dies with the pod.
No message, log line or exception carries a kubeconfig's content.
"""

from __future__ import annotations

import atexit
import logging
import os
import shutil
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from kubernetes import config as kube_config
from kubernetes.client import ApiClient, Configuration

from gitopsbot.adapters.kube import KubeCluster, _kubeconfig_problem
from gitopsbot.adapters.kube_request import KUBECONFIG_ERRORS, configuration_from_kubeconfig
from gitopsbot.adapters.pids import pid_exists
from gitopsbot.core.fleet.model import KubeconfigSecretRef
from gitopsbot.errors import ConfigError, KubeError

log = logging.getLogger(__name__)

PRIVATE_PREFIX = "gitopsbot-access-"
IN_CLUSTER_CONTEXT = "in-cluster"


@dataclass(frozen=True, slots=True)
class Connection:
    """One cluster: a client configuration for the Python client, and a kubeconfig file with
    a context for helm and kubectl ("" context: the file's current one)."""

    configuration: Configuration
    kubeconfig: str
    context: str
    how: str  # for messages: "kubeconfig context 'x'", "in-cluster", "kubeconfigSecret ns/n"

    def api_client(self) -> ApiClient:
        return ApiClient(self.configuration)


class ServiceAccountFiles:
    """The pod's ServiceAccount mount: ``token``, ``ca.crt``, ``namespace``."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    @property
    def token(self) -> Path:
        return self.directory / "token"

    @property
    def ca(self) -> Path:
        return self.directory / "ca.crt"

    def present(self) -> bool:
        return self.token.is_file() and self.ca.is_file()

    def namespace(self) -> str:
        try:
            return (self.directory / "namespace").read_text().strip() or "default"
        except OSError:
            return "default"


def in_cluster_configuration(files: ServiceAccountFiles, host: str, port: str) -> Configuration:
    """The Python client's configuration from the ServiceAccount files, with a hook that
    re-reads the token whenever the file changed (a ``stat`` per request; the official
    ``load_incluster_config`` re-reads only once a minute, so a request just after a rotation
    could still send the old token)."""
    missing = [str(p) for p in (files.token, files.ca) if not p.is_file()]
    if missing:
        raise ConfigError(f"in-cluster: no ServiceAccount file {', '.join(missing)}")
    configuration = Configuration()
    server_host = f"[{host}]" if ":" in host else host
    configuration.host = f"https://{server_host}:{port}"
    configuration.ssl_ca_cert = str(files.ca)
    configuration.retries = False  # each adapter decides about retries itself
    reader = _TokenFile(files.token)

    def refresh(conf: Configuration) -> None:
        conf.api_key["BearerToken"] = reader.current()
        conf.api_key_prefix["BearerToken"] = "Bearer"

    refresh(configuration)
    configuration.refresh_api_key_hook = refresh  # type: ignore[assignment]
    return configuration


class _TokenFile:
    """A token file, re-read when its identity (inode, size, mtime) changes."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._lock = threading.Lock()
        self._stamp: tuple[int, int, int, int] | None = None
        self._token = ""

    def current(self) -> str:
        with self._lock:
            try:
                st = os.stat(self._path)  # follows the kubelet's ..data symlink
                stamp = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
                if stamp != self._stamp:
                    token = self._path.read_text().strip()
                    if token:
                        self._token, self._stamp = token, stamp
            except OSError as e:
                if not self._token:
                    raise ConfigError(
                        f"in-cluster: cannot read the token file {self._path}: {type(e).__name__}"
                    ) from None
                # keep the last token: the next request tries the file again
            if not self._token:
                raise ConfigError(f"in-cluster: the token file {self._path} is empty")
            return self._token


def in_cluster_kubeconfig(files: ServiceAccountFiles, host: str, port: str) -> dict[str, Any]:
    """A kubeconfig for helm and kubectl that references the token and CA files by path."""
    server_host = f"[{host}]" if ":" in host else host
    name = IN_CLUSTER_CONTEXT
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": name,
        "clusters": [
            {
                "name": name,
                "cluster": {
                    "server": f"https://{server_host}:{port}",
                    "certificate-authority": str(files.ca),
                },
            }
        ],
        "users": [{"name": name, "user": {"tokenFile": str(files.token)}}],
        "contexts": [
            {
                "name": name,
                "context": {"cluster": name, "user": name, "namespace": files.namespace()},
            }
        ],
    }


class ClusterAccess:
    """Connections to the fleet's clusters, and the private directory their files live in.

    ``kubeconfig``: the ``--kubeconfig`` file ("" → ``~/.kube/config``, or in-cluster when
    the bot runs in a pod). ``in_cluster``: ``run --in-cluster`` (True: the ServiceAccount
    must be there). ``service``: ``KUBERNETES_SERVICE_HOST``/``_PORT`` (None outside a pod).
    """

    def __init__(
        self,
        *,
        kubeconfig: str = "",
        in_cluster: bool = False,
        service_account: ServiceAccountFiles,
        service: tuple[str, str] | None,
        temp_root: Path | None = None,
        home: Callable[[], Path] = Path.home,
    ) -> None:
        self._explicit_kubeconfig = kubeconfig
        self._kubeconfig = kubeconfig or str(home() / ".kube" / "config")
        self._force_in_cluster = in_cluster
        self._sa = service_account
        self._service = service
        self._temp_root = temp_root
        self._private: Path | None = None
        self._lock = threading.RLock()
        self._home: Connection | None = None
        self._connections: dict[tuple[str, KubeconfigSecretRef | None, str], Connection] = {}
        if in_cluster and not self.in_cluster_available():
            raise ConfigError(self._why_not_in_cluster("--in-cluster"))

    # -- which way ----------------------------------------------------------------------

    def in_cluster_available(self) -> bool:
        return self._service is not None and self._sa.present()

    def uses_in_cluster(self) -> bool:
        """In-cluster for clusters without kubeContext: asked for, or in a pod and no
        ``--kubeconfig`` was given."""
        if self._force_in_cluster:
            return True
        return not self._explicit_kubeconfig and self.in_cluster_available()

    def _why_not_in_cluster(self, label: str) -> str:
        parts = []
        if self._service is None:
            parts.append("KUBERNETES_SERVICE_HOST/KUBERNETES_SERVICE_PORT are not set")
        if not self._sa.token.is_file():
            parts.append(f"no token file {self._sa.token}")
        if not self._sa.ca.is_file():
            parts.append(f"no CA file {self._sa.ca}")
        return (
            f"{label}: not running in a pod ({'; '.join(parts)}); set "
            "GITOPSBOT_SERVICEACCOUNT_DIR to the ServiceAccount files' directory, or use a "
            "kubeconfig (--kubeconfig, kubeContext)"
        )

    # -- connections --------------------------------------------------------------------

    def connect(
        self,
        *,
        kube_context: str = "",
        kubeconfig_secret: KubeconfigSecretRef | None = None,
        context_source: str = "",
        cluster: str = "",
    ) -> Connection:
        """The cluster's connection, made once per process and then shared (the executor
        and the Events recorder of one cluster ask for it; a Secret is read once)."""
        if not kube_context and kubeconfig_secret is None and self.uses_in_cluster():
            return self.home()
        key = (kube_context, kubeconfig_secret, cluster if kubeconfig_secret else "")
        with self._lock:
            known = self._connections.get(key)
        if known is not None:
            return known
        if kubeconfig_secret is not None:
            made = self._from_secret(kubeconfig_secret, cluster or kubeconfig_secret.name)
        else:
            made = self._from_kubeconfig(kube_context, context_source)
        with self._lock:
            return self._connections.setdefault(key, made)

    def home(self) -> Connection:
        """The cluster the bot runs in (in-cluster), else the kubeconfig's current context."""
        with self._lock:
            if self._home is None:
                if self.uses_in_cluster():
                    self._home = self._in_cluster()
                else:
                    self._home = self._from_kubeconfig("", "")
            return self._home

    def home_namespace(self) -> str:
        """The bot's own namespace: the ServiceAccount's, else the kubeconfig context's."""
        if self.uses_in_cluster():
            return self._sa.namespace()
        try:
            _, active = kube_config.list_kube_config_contexts(  # type: ignore[no-untyped-call]
                config_file=self._kubeconfig
            )
        except KUBECONFIG_ERRORS:
            return "default"
        return str(((active or {}).get("context") or {}).get("namespace") or "default")

    def _in_cluster(self) -> Connection:
        assert self._service is not None
        host, port = self._service
        configuration = in_cluster_configuration(self._sa, host, port)
        path = self._write("in-cluster.kubeconfig", yaml.safe_dump(
            in_cluster_kubeconfig(self._sa, host, port), sort_keys=False
        ))  # fmt: skip
        return Connection(configuration, str(path), "", "in-cluster")

    def _from_kubeconfig(self, context: str, source: str) -> Connection:
        try:
            configuration = configuration_from_kubeconfig(self._kubeconfig, context)
        except KUBECONFIG_ERRORS as err:
            raise ConfigError(_kubeconfig_problem(self._kubeconfig, context, source, err)) from None
        how = f"kube context {context!r}" if context else "the kubeconfig's current context"
        return Connection(configuration, self._kubeconfig, context, how)

    def _from_secret(self, ref: KubeconfigSecretRef, cluster: str) -> Connection:
        namespace = self.home_namespace()
        label = f"kubeconfigSecret {namespace}/{ref.name} key {ref.key!r}"
        home = KubeCluster(self.home().api_client())
        try:
            text = home.read_secret(namespace, ref.name, ref.key)
        except KubeError as e:  # names the Secret, never its content
            raise ConfigError(f"{label}: {e}") from None
        finally:
            home.close()
        try:
            document = yaml.safe_load(text)
        except yaml.YAMLError:
            raise ConfigError(f"{label}: not a YAML kubeconfig") from None  # no content quoted
        if not isinstance(document, dict):
            raise ConfigError(f"{label}: not a kubeconfig (expected a mapping)")
        private = self.private_dir()
        configuration = Configuration()
        try:
            kube_config.load_kube_config_from_dict(  # type: ignore[no-untyped-call]
                document,
                client_configuration=configuration,
                persist_config=False,
                temp_file_path=str(private),
            )
        except KUBECONFIG_ERRORS as err:
            # The client's messages name keys and contexts, not values; only the first line.
            reason = str(err).splitlines()[0] if str(err) else type(err).__name__
            raise ConfigError(f"{label}: not a usable kubeconfig: {reason[:200]}") from None
        configuration.retries = False
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in cluster)
        path = self._write(f"{safe}.kubeconfig", text)
        return Connection(configuration, str(path), "", label)

    # -- the private directory ----------------------------------------------------------

    def private_dir(self) -> Path:
        """0700, created on first use, removed at exit; a dead process's are removed here."""
        with self._lock:
            if self._private is None:
                root = self._temp_root or Path(tempfile.gettempdir())
                remove_dead_leftovers(root)
                self._private = Path(
                    tempfile.mkdtemp(prefix=f"{PRIVATE_PREFIX}{os.getpid()}-", dir=root)
                )
                os.chmod(self._private, 0o700)
                atexit.register(self.close)
            return self._private

    def _write(self, name: str, text: str) -> Path:
        path = self.private_dir() / name
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(text)
        return path

    def close(self) -> None:
        with self._lock:
            if self._private is not None:
                shutil.rmtree(self._private, ignore_errors=True)
                self._private = None
            self._home = None
            self._connections.clear()


def remove_dead_leftovers(root: Path) -> None:
    """Private directories of bots that died without their atexit (SIGKILL, OOM)."""
    try:
        entries = list(root.glob(f"{PRIVATE_PREFIX}*"))
    except OSError:
        return
    for entry in entries:
        pid_text = entry.name[len(PRIVATE_PREFIX) :].split("-", 1)[0]
        if not pid_text.isdigit() or pid_exists(int(pid_text)):
            continue
        try:
            if entry.is_dir() and entry.stat().st_uid == os.getuid():
                shutil.rmtree(entry, ignore_errors=True)
        except OSError:
            pass
