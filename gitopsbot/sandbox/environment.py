"""The whole sandbox as one thing: API emulator + controller simulator + chart repository
(+ services other modules register, such as the Git remote and the local forge), the chosen
chart installed with real helm, a kubeconfig, and a state file so ``down`` can stop it.

The Kubernetes API is the emulator by default; ``SandboxOptions(control_plane=...)`` runs
the same sandbox on a real control plane (sandbox/controlplane.py) instead: the kubeconfig
is the control plane's, the simulator talks to it through ``adapters/kube_store.py`` and
plays scheduler and kubelet there, and what the sandbox made is deleted when it stops. The
bot, helm and kubectl see only the kubeconfig, so their code path is the same on both.

``python -m gitopsbot.sandbox.environment serve --state-dir DIR ...`` runs it in the
foreground until SIGTERM/SIGINT; ``gitopsbot sandbox up`` starts that process detached and
``gitopsbot sandbox down`` stops it (gitopsbot/commands/sandbox.py).

The detached process (start, stop, pid and ports) is ``sandbox/environment_detached.py``;
what ``up`` prints is ``sandbox/environment_help.py``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlsplit

from ruamel.yaml import YAML

from gitopsbot import settings
from gitopsbot.adapters.binaries import ensure
from gitopsbot.adapters.kube import KubeCluster
from gitopsbot.adapters.kube_store import KubeStore
from gitopsbot.errors import GitOpsBotError
from gitopsbot.ports.cluster import HELM_PENDING_STATUSES
from gitopsbot.sandbox.apiserver import ApiServer
from gitopsbot.sandbox.chartrepo import ChartRepo
from gitopsbot.sandbox.controlplane import ControlPlane
from gitopsbot.sandbox.fleet_services import (
    OWNER,
    REPO,
    FleetCredentials,
    FleetForgeService,
    FleetGitService,
)
from gitopsbot.sandbox.simulator import ControllerSim, SimConfig
from gitopsbot.sandbox.simulator.controller import WATCHED
from gitopsbot.sandbox.simulator.store_port import StorePort
from gitopsbot.sandbox.simulator.world_cleanup import clean_world
from gitopsbot.sandbox.story_fleet import StoryFleet, pool_names, story_fleet_files

log = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_CHARTS = ROOT / "examples" / "charts" / "repo"
STATE_FILE = "sandbox.json"
TF = "tensor-fusion.ai/v1"
LOG_FILE = "sandbox.log"
SERVE_MODULE = "gitopsbot.sandbox.environment"
FORGE_TOKEN_FILE = "forge-token"  # the fleet's gitopsbot.yaml names it (forge.token.file)
KUBE_CONTEXT = "sandbox"  # the one context of the kubeconfig written by `up`


class SandboxError(GitOpsBotError):
    """The sandbox could not start, or its state is not what ``down`` expects."""


def default_state_dir() -> Path:
    return settings.cache_dir() / "sandbox"


@dataclass(frozen=True, slots=True)
class SandboxOptions:
    state_dir: Path
    pools: int = 1
    nodes: int = 3
    chart_version: str | None = None  # None: the newest in the repository
    namespace: str = "tensor-fusion-sys"
    release: str = "tensor-fusion-sys"
    charts_dir: Path = DEFAULT_CHARTS
    controller_ready_delay: float = 1.0
    hypervisor_ready_delay: float = 0.5
    # The Git remote with the example fleet and the local GitHub forge (fleet_services.py):
    # on for `sandbox up`; off for in-process users that register their own.
    fleet_services: bool = False
    # A running real control plane to use instead of a new API emulator (tests: realkube).
    # It is shared, so the sandbox's objects are deleted before it starts and when it stops.
    control_plane: ControlPlane | None = None


class Service(Protocol):
    """Something else the sandbox runs (Git remote, forge): started, stopped, reachable."""

    url: str

    def start(self) -> Any: ...

    def stop(self) -> None: ...


# The hook for other sandbox parts: ``register_service("git", lambda sandbox: GitRemote(...))``.
# Factories run after the API server, simulator and chart repository are up and the chart is
# installed, in registration order; their ``url`` lands in the state file under "services".
ServiceFactory = Callable[["Sandbox"], Service]
SERVICE_FACTORIES: dict[str, ServiceFactory] = {}


def register_service(name: str, factory: ServiceFactory) -> None:
    SERVICE_FACTORIES[name] = factory


@dataclass(slots=True)
class SandboxState:
    """What ``sandbox.json`` holds: enough for ``down`` and for users to connect."""

    pid: int
    state_dir: str
    kubeconfig: str
    apiserver_url: str
    chart_repo_url: str
    namespace: str
    release: str
    chart_version: str
    ready: bool = False
    services: dict[str, str] = field(default_factory=dict)
    ports: list[int] = field(default_factory=list)
    # Sandbox-only credentials of the services (git_username, git_password, forge_token).
    credentials: dict[str, str] = field(default_factory=dict)

    def write(self, state_dir: Path) -> None:
        path = state_dir / STATE_FILE
        tmp = path.with_suffix(".tmp")
        # Owner-only: it holds the sandbox services' credentials.
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(json.dumps(asdict(self), indent=2) + "\n")
        tmp.replace(path)

    @classmethod
    def read(cls, state_dir: Path) -> SandboxState | None:
        path = state_dir / STATE_FILE
        if not path.is_file():
            return None
        try:
            data = json.loads(path.read_text())
            return cls(**data)
        except (ValueError, TypeError) as e:
            raise SandboxError(f"{path}: unreadable sandbox state ({e})") from e


class Sandbox:
    """Start with ``start()``, stop with ``stop()``; ``state`` describes what runs."""

    def __init__(self, options: SandboxOptions, *, helm: Path | None = None) -> None:
        self.options = options
        self.state_dir = options.state_dir.resolve()
        self.helm = helm
        self.api: ApiServer | None = None
        self.kube_store: KubeStore | None = None
        self.sim: ControllerSim | None = None
        self.repo: ChartRepo | None = None
        self.services: dict[str, Service] = {}
        self.state: SandboxState | None = None

    @property
    def kubeconfig(self) -> Path:
        return self.state_dir / "kubeconfig"

    @property
    def store(self) -> StorePort:
        """The cluster's objects, in process: the emulator's Store or the real server's."""
        if self.kube_store is not None:
            return self.kube_store
        assert self.api is not None, "the sandbox is not running"
        return self.api.store

    def set_console_tokens(self, tokens: frozenset[str] | None) -> None:
        """The enroll tokens the simulated TensorFusion console accepts from the controller
        pods' cluster-agent from now on (``SimConfig.console_tokens``; None: any non-empty
        token). Pods made later log connected or rejected by it (simulator/agent.py). On a
        real server the agent is not played: no kubelet serves a bound pod's log there."""
        assert self.sim is not None, "the sandbox is not running"
        self.sim.set_console_tokens(tokens)

    def helm_env(self) -> dict[str, str]:
        """A private helm home under the state dir: the user's helm config is not touched."""
        home = self.state_dir / "helm"
        return {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(home),
            "HELM_CACHE_HOME": str(home / "cache"),
            "HELM_CONFIG_HOME": str(home / "config"),
            "HELM_DATA_HOME": str(home / "data"),
            "KUBECONFIG": str(self.kubeconfig),
        }

    def start(self) -> SandboxState:
        opts = self.options
        self.state_dir.mkdir(parents=True, exist_ok=True)
        try:
            self.repo = ChartRepo(opts.charts_dir).start()
            version = opts.chart_version or newest_version(opts.charts_dir)
            config = SimConfig(
                nodes_per_pool=opts.nodes,
                operator_namespace=opts.namespace,
                require_controller=True,
                controller_ready_delay=opts.controller_ready_delay,
                hypervisor_ready_delay=opts.hypervisor_ready_delay,
                real_server=opts.control_plane is not None,
            )
            if opts.control_plane is not None:
                url, ports = self._start_real(opts.control_plane, config)
            else:
                url, ports = self._start_emulator(config)
            self.state = SandboxState(
                pid=os.getpid(),
                state_dir=str(self.state_dir),
                kubeconfig=str(self.kubeconfig),
                apiserver_url=url,
                chart_repo_url=self.repo.url,
                namespace=opts.namespace,
                release=opts.release,
                chart_version=version,
                ports=[*ports, self.repo.port],
            )
            self.state.write(self.state_dir)
            self.install(version)
            self.wait_cluster_running()
            for name, factory in self._service_factories().items():
                service = factory(self)
                service.start()
                self.services[name] = service
                self.state.services[name] = service.url
                port = _port_of(service.url)
                if port is not None:
                    self.state.ports.append(port)
            self.state.ready = True
            self.state.write(self.state_dir)
            return self.state
        except BaseException:
            self.stop()
            raise

    def _start_emulator(self, config: SimConfig) -> tuple[str, list[int]]:
        opts = self.options
        self.api = ApiServer(state_dir=self.state_dir / "cluster")
        self.api.start()
        self.api.write_kubeconfig(self.kubeconfig, context=KUBE_CONTEXT, namespace=opts.namespace)
        controller = f"{opts.release}-controller"
        # The simulator owns the controller Deployment's readiness, from the first write.
        self.api.kubelet.exclude("Deployment", opts.namespace, controller)
        self.sim = ControllerSim(self.api.store, config, kubelet=self.api.kubelet).start()
        return self.api.url, [self.api.port]

    def _start_real(self, plane: ControlPlane, config: SimConfig) -> tuple[str, list[int]]:
        """The simulator on the real server; what an earlier sandbox left there is deleted
        first (its names are fixed). The control plane's port is not ours to record."""
        plane.write_kubeconfig(
            self.kubeconfig, context=KUBE_CONTEXT, namespace=self.options.namespace
        )
        self.kube_store = KubeStore.from_kubeconfig(self.kubeconfig, watch_kinds=WATCHED)
        self._clean_real()
        self.sim = ControllerSim(self.kube_store, config).start()
        return plane.url, []

    def _clean_real(self) -> None:
        if self.kube_store is not None:
            clean_world(
                self.kube_store,
                (self.options.namespace,),
                kubelet_node=SimConfig().kubelet_node,
            )

    def _service_factories(self) -> dict[str, ServiceFactory]:
        if not self.options.fleet_services:
            return dict(SERVICE_FACTORIES)
        assert self.state is not None
        creds = FleetCredentials.generate()
        self.state.credentials = {
            "git_username": creds.git_username,
            "git_password": creds.git_password,
            "forge_token": creds.forge_token,
        }
        token_file = self.state_dir / FORGE_TOKEN_FILE
        token_file.unlink(missing_ok=True)
        fd = os.open(token_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)  # owner-only
        with os.fdopen(fd, "w") as out:
            out.write(creds.forge_token + "\n")
        # The forge first: the fleet's gitopsbot.yaml names its URL.
        own: dict[str, ServiceFactory] = {
            "github": lambda _sb: FleetForgeService(creds),
            "git": lambda sb: FleetGitService(
                sb.state_dir / "git", creds, files=sb.fleet_files(token_file)
            ),
        }
        return {**own, **SERVICE_FACTORIES}

    def fleet_files(self, token_file: Path) -> dict[str, str]:
        """The fleet repository of this sandbox (story_fleet): its chart repository at the
        installed version, the kube context of its kubeconfig, its pools and nodes, no
        maintenance windows (so a bump applies at once), the local forge with its token file.
        The values reference no Secret, so none needs creating."""
        assert self.state is not None and self.repo is not None
        opts = self.options
        return story_fleet_files(
            StoryFleet(
                chart_repo_url=self.repo.url,
                kube_context=KUBE_CONTEXT,
                forge_api_url=self.services["github"].url,
                forge_repository=f"{OWNER}/{REPO}",
                chart_version=self.state.chart_version,
                namespace=opts.namespace,
                release=opts.release,
                pools=pool_names(opts.pools),
                nodes=opts.nodes,
                window_opens=None,
                forge_token_file=str(token_file),
            )
        )

    def install(self, version: str) -> None:
        """``helm upgrade --install`` of the chosen version (idempotent on a kept state dir,
        after ``recover``)."""
        assert self.repo is not None
        self.recover()
        opts = self.options
        helm = str(self.helm or ensure("helm4", settings.cache_dir()))
        args = [
            helm,
            "upgrade",
            "--install",
            opts.release,
            "tensor-fusion",
            "--repo",
            self.repo.url,
            "--version",
            version,
            "--namespace",
            opts.namespace,
            "--create-namespace",
            "--kubeconfig",
            str(self.kubeconfig),
        ]
        for i in range(1, opts.pools):
            args += ["--set", f"cluster.extraPools[{i - 1}].name=pool-{i + 1}"]
        proc = subprocess.run(
            args, env=self.helm_env(), capture_output=True, text=True, timeout=180, check=False
        )
        if proc.returncode != 0:
            raise SandboxError(f"helm install of tensor-fusion {version} failed: {proc.stderr}")

    def recover(self) -> None:
        """On a kept state dir, the break-glass steps a person takes before their own
        ``helm upgrade`` (docs/sandbox.md), so the install cannot fail on what the bot or a
        dead helm left behind:

        - a revision of the release left pending-* (a helm still running when the last
          sandbox stopped) is marked failed; no helm can be working on it, since this process
          has only just started the API server;
        - the bot's field ownership of every TensorFusionCluster is released: its merge patches
          of pool switches own ``.spec.gpuPools``, and helm 4's server-side apply would
          conflict with "gitopsbot" there.
        """
        opts = self.options
        kube = KubeCluster.from_kubeconfig(self.kubeconfig, context=KUBE_CONTEXT)
        try:
            selector = f"owner=helm,name={opts.release}"
            for secret in kube.list("v1", "Secret", opts.namespace, label_selector=selector):
                labels = secret["metadata"].get("labels") or {}
                if labels.get("status") in HELM_PENDING_STATUSES:
                    kube.mark_helm_release_failed(  # logs what it did
                        opts.namespace,
                        opts.release,
                        int(labels.get("version") or 0),
                        "marked failed by `gitopsbot sandbox up`: its helm died with the sandbox",
                    )
            for tfc in kube.list(TF, "TensorFusionCluster"):
                name = tfc["metadata"]["name"]
                if kube.release_fields(TF, "TensorFusionCluster", None, name):
                    log.info("TensorFusionCluster %s: the bot's fields released", name)
        finally:
            kube.close()

    def wait_cluster_running(self, timeout: float = 120.0) -> None:
        """Until every TFC is Running, its pools match their templates and no rollout runs.

        On a kept state dir with another chart version, that includes the hypervisor rollout
        the upgrade starts.
        """
        store = self.store
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if _settled(store.list(TF, "TensorFusionCluster"), store.list(TF, "GPUPool")):
                return
            time.sleep(0.1)
        raise SandboxError(f"the TensorFusionCluster did not become Running in {timeout:.0f}s")

    def stop(self) -> None:
        for name, service in reversed(list(self.services.items())):
            try:
                service.stop()
            except Exception:  # stop the rest regardless
                log.exception("stopping sandbox service %s", name)
        self.services.clear()
        if self.sim is not None:
            self.sim.close()
            self.sim = None
        if self.kube_store is not None:
            try:
                self._clean_real()
            finally:
                self.kube_store.close()
                self.kube_store = None
        if self.api is not None:
            self.api.stop()
            self.api = None
        if self.repo is not None:
            self.repo.stop()
            self.repo = None
        (self.state_dir / STATE_FILE).unlink(missing_ok=True)


def _port_of(url: str) -> int | None:
    try:
        parts = urlsplit(url)
        return parts.port if parts.scheme in ("http", "https") else None
    except ValueError:
        return None


def _settled(tfcs: list[dict[str, Any]], pools: list[dict[str, Any]]) -> bool:
    if not tfcs:
        return False
    by_name = {p["metadata"]["name"]: p for p in pools}
    for tfc in tfcs:
        if (tfc.get("status") or {}).get("phase") != "Running":
            return False
        for entry in (tfc.get("spec") or {}).get("gpuPools") or []:
            pool = by_name.get(f"{tfc['metadata']['name']}-{entry['name']}")
            if pool is None or pool.get("spec") != entry.get("specTemplate"):
                return False
            if (pool.get("status") or {}).get("phase") != "Running":
                return False
            annotations = pool["metadata"].get("annotations") or {}
            if any(k.endswith("-update-in-progress") and v for k, v in annotations.items()):
                return False
    return True


def newest_version(charts_dir: Path) -> str:
    index: Any = YAML(typ="safe").load((charts_dir / "index.yaml").read_text())
    versions = [str(e["version"]) for e in index["entries"]["tensor-fusion"]]
    return max(versions, key=lambda v: tuple(int(x) for x in v.split(".")))


def serve(
    options: SandboxOptions, *, on_ready: Callable[[SandboxState], None] | None = None
) -> int:
    """Run the sandbox in this process until SIGTERM or SIGINT."""
    stop = threading.Event()

    def _signal(signum: int, _frame: object) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, _signal)
    signal.signal(signal.SIGINT, _signal)
    sandbox = Sandbox(options)
    state = sandbox.start()
    try:
        if on_ready is not None:
            on_ready(state)
        while not stop.wait(0.5):
            pass
    finally:
        sandbox.stop()
    return 0


def add_options(p: argparse.ArgumentParser) -> None:
    """The options ``sandbox up`` and ``serve`` share."""
    p.add_argument("--pools", type=int, default=1, help="GPU pools in the cluster (default 1)")
    p.add_argument("--nodes", type=int, default=3, help="GPU nodes per pool (default 3)")
    p.add_argument(
        "--chart-version", default=None, help="tensor-fusion chart version (default: newest)"
    )
    p.add_argument(
        "--state-dir",
        type=Path,
        default=None,
        help=f"where state, kubeconfig and logs go (default {default_state_dir()})",
    )
    p.add_argument("--namespace", default="tensor-fusion-sys", help=argparse.SUPPRESS)
    p.add_argument("--release", default="tensor-fusion-sys", help=argparse.SUPPRESS)
    p.add_argument("--charts", type=Path, default=DEFAULT_CHARTS, help=argparse.SUPPRESS)
    p.add_argument(
        "--no-fleet",
        dest="fleet_services",
        action="store_false",
        help="do not start the Git remote (fleet repository) and the local GitHub forge",
    )


def options_from(args: argparse.Namespace) -> SandboxOptions:
    if args.pools < 1 or args.nodes < 0:
        raise SandboxError("--pools must be at least 1 and --nodes at least 0")
    return SandboxOptions(
        state_dir=(args.state_dir or default_state_dir()).resolve(),
        pools=args.pools,
        nodes=args.nodes,
        chart_version=args.chart_version,
        namespace=args.namespace,
        release=args.release,
        charts_dir=args.charts,
        fleet_services=args.fleet_services,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=f"python -m {SERVE_MODULE}")
    sub = parser.add_subparsers(dest="cmd", required=True)
    add_options(sub.add_parser("serve", help="run the sandbox until SIGTERM"))
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    try:
        return serve(options_from(args))
    except GitOpsBotError as e:
        sys.stderr.write(f"sandbox: {e}\n")
        return 1


if __name__ == "__main__":
    sys.exit(main())
