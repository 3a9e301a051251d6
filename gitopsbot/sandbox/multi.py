"""Several sandbox clusters side by side, for a fleet of more than one cluster (waves).

``MultiSandbox(state_dir, names)`` starts one ``Sandbox`` per name (environment.py), each
with its own API emulator, controller simulator and chart repository on ports of its own, and
the chosen chart installed with real helm; then it writes one kubeconfig with one context per
cluster, named after the cluster, so the bot reaches each through the ``kubeContext`` of its
``release.yaml``. Nothing else: the Git remote and the forge are the caller's.

The sandboxes start one after the other (six with one pool of one node: about 30 s on a
busy 2-core machine, most of it the six helm installs) and ``stop()`` stops every one that
started, the last first. Services registered with ``environment.register_service`` would
start once per cluster: register none while a MultiSandbox starts.
"""

from __future__ import annotations

import logging
import subprocess
from collections.abc import Iterable
from pathlib import Path

from gitopsbot.sandbox import environment as env

log = logging.getLogger(__name__)


class MultiSandbox:
    """``start()`` then ``stop()``; ``sandboxes`` maps a cluster name to its running Sandbox."""

    def __init__(
        self,
        state_dir: Path,
        names: Iterable[str],
        *,
        pools: int = 1,
        nodes: int = 1,
        chart_version: str = "1.8.0",
        hypervisor_ready_delay: float = 0.2,
        controller_ready_delay: float = 0.5,
    ) -> None:
        self.state_dir = state_dir.resolve()
        self.names = tuple(names)
        if len(set(self.names)) != len(self.names) or not self.names:
            raise env.SandboxError(f"cluster names must be distinct and given: {self.names}")
        self.options = {
            name: env.SandboxOptions(
                state_dir=self.state_dir / name,
                pools=pools,
                nodes=nodes,
                chart_version=chart_version,
                hypervisor_ready_delay=hypervisor_ready_delay,
                controller_ready_delay=controller_ready_delay,
            )
            for name in self.names
        }
        self.sandboxes: dict[str, env.Sandbox] = {}

    @property
    def kubeconfig(self) -> Path:
        """One context per cluster, each named after its cluster."""
        return self.state_dir / "kubeconfig"

    def start(self) -> MultiSandbox:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        try:
            for name in self.names:
                sandbox = env.Sandbox(self.options[name])
                sandbox.start()  # stops what it started itself when it fails
                self.sandboxes[name] = sandbox
            self._write_kubeconfig()
        except BaseException:
            self.stop()
            raise
        return self

    def _write_kubeconfig(self) -> None:
        clusters, contexts, users = [], [], []
        for name, sandbox in self.sandboxes.items():
            assert sandbox.state is not None
            namespace = sandbox.options.namespace
            clusters.append(
                f"- name: {name}\n  cluster:\n    server: {sandbox.state.apiserver_url}\n"
            )
            contexts.append(
                f"- name: {name}\n  context:\n    cluster: {name}\n    user: {name}\n"
                f"    namespace: {namespace}\n"
            )
            # The emulator takes any token.
            users.append(f"- name: {name}\n  user:\n    token: sandbox\n")
        path = self.kubeconfig
        path.write_text(
            "apiVersion: v1\nkind: Config\n"
            f"current-context: {self.names[0]}\n"
            "clusters:\n" + "".join(clusters) + "contexts:\n" + "".join(contexts)
            + "users:\n" + "".join(users)
        )  # fmt: skip
        path.chmod(0o600)

    def helm(self, name: str, helm: Path, *args: str) -> str:
        """``helm ARGS`` against cluster ``name`` through the shared kubeconfig's context."""
        sandbox = self.sandboxes[name]
        done = subprocess.run(
            [str(helm), *args, "--kubeconfig", str(self.kubeconfig), "--kube-context", name],
            env=sandbox.helm_env(),
            capture_output=True,
            text=True,
            check=False,
            timeout=120,
        )
        if done.returncode != 0:
            raise env.SandboxError(f"helm {' '.join(args)} on {name}: {done.stderr.strip()}")
        return done.stdout

    def stop(self) -> None:
        for name in reversed(list(self.sandboxes)):
            try:
                self.sandboxes.pop(name).stop()
            except Exception:  # stop the rest regardless
                log.exception("stopping sandbox %s", name)
