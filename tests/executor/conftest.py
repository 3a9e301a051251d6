"""Fixtures for the executor: a real Git fleet repository (bare file:// remote, the GitRepo
adapter, a human clone driven with the git CLI), FakeCluster/FakeHelm/FakeForge, a fake clock,
and ``World``: a small stand-in for the chart + controller that reflects each helm revision
into the FakeCluster and rolls pools in batches while their switch is open (F4 semantics).
The sandbox simulator replaces ``World`` in the end-to-end wave."""

from __future__ import annotations

import math
import os
import subprocess
import zoneinfo
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from gitopsbot.adapters.chartrepo import LocalChartSource
from gitopsbot.adapters.git import GitRepo, GitSettings
from gitopsbot.app import apply_gate
from gitopsbot.bot.apply_gate import ApplyGate
from gitopsbot.bot.journal_store import JournalStore
from gitopsbot.bot.reconciler import Reconciler
from gitopsbot.bot.steps.executor import Executor
from gitopsbot.core.charts.observed import HelmReleaseInfo
from gitopsbot.core.fleet.model import BotSettings, RolloutPolicy
from gitopsbot.core.forge.forge_types import PullRequestDraft, PullRequestState
from gitopsbot.core.rollouts.tf_objects import GROUP, TF
from gitopsbot.fleetrepo import load_fleet
from gitopsbot.ports.helm import ChartRef, UpgradeRequest
from gitopsbot.sandbox.gitremote import create_fleet_repo
from gitopsbot.testing import FakeCluster, FakeForge, FakeHelm

NS = "tf-system"
RELEASE = "tf"
T0 = datetime(2026, 6, 10, 1, 0, tzinfo=UTC)


def git(*args: str, cwd: Path) -> str:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "Human",
        "GIT_AUTHOR_EMAIL": "human@example.com",
        "GIT_COMMITTER_NAME": "Human",
        "GIT_COMMITTER_EMAIL": "human@example.com",
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
    }
    done = subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True)
    assert done.returncode == 0, f"git {' '.join(args)}: {done.stderr}"
    return done.stdout


def rollout_yaml(
    *,
    window: str = "",
    on_failure: str = "rollback",
    stall: str = "10m",
    max_duration: str = "2h",
    canary: int = 0,
) -> str:
    win = (
        f'    maintenanceWindow:\n      cron: "{window}"\n      duration: 1h\n      timeZone: UTC\n'
        if window
        else ""
    )
    canary_line = f"    canaryBatchPercentage: {canary}\n" if canary else ""
    return (
        "order: [a, b]\nmaxParallelPools: 1\n"
        f"onFailure: {on_failure}\ncontrollerReadyTimeout: 180s\npools:\n"
        "  a:\n    autoUpdateHypervisor: true\n    batchPercentage: 50\n"
        f"    maxDuration: {max_duration}\n    stallTimeout: {stall}\n    phases: [hypervisor]\n"
        f"{canary_line}"
        "  b:\n    autoUpdateHypervisor: true\n    batchPercentage: 50\n"
        f"    maxDuration: {max_duration}\n    stallTimeout: {stall}\n    phases: [hypervisor]\n"
        f"{win}"
    )


def fleet_files(version: str, image: str, **rollout: Any) -> dict[str, str]:
    return {
        "gitopsbot.yaml": "watchedBranch: main\nstateBranch: gitopsbot/state\n",
        "clusters/lab/release.yaml": (
            "chart:\n  repository: https://charts.example.invalid\n  name: tensor-fusion\n"
            f"  version: {version}\nrelease:\n  name: {RELEASE}\n  namespace: {NS}\n"
            "environment: staging\n"
        ),
        "clusters/lab/values.yaml": (
            f"cluster:\n  name: lab-tfc\n  hypervisorImage: {image}\nagent:\n  agentId: lab\n"
        ),
        "clusters/lab/rollout.yaml": rollout_yaml(**rollout),
    }


@dataclass
class Human:
    path: Path

    def commit(self, message: str, files: dict[str, str]) -> str:
        for name, text in files.items():
            full = self.path / name
            full.parent.mkdir(parents=True, exist_ok=True)
            full.write_text(text)
        git("add", "--all", cwd=self.path)
        git("commit", "--quiet", "-m", message, cwd=self.path)
        git("push", "--quiet", "origin", "main", cwd=self.path)
        return git("rev-parse", "HEAD", cwd=self.path).strip()

    def revert(self, sha: str) -> str:
        git("fetch", "--quiet", "origin", cwd=self.path)
        git("merge", "--quiet", "--ff-only", "origin/main", cwd=self.path)
        git("revert", "--no-edit", sha, cwd=self.path)
        git("push", "--quiet", "origin", "main", cwd=self.path)
        return git("rev-parse", "HEAD", cwd=self.path).strip()

    def pull(self) -> None:
        git("fetch", "--quiet", "origin", cwd=self.path)
        git("merge", "--quiet", "--ff-only", "origin/main", cwd=self.path)


@dataclass
class Clock:
    t: datetime = T0

    def now(self) -> datetime:
        return self.t

    def sleep(self, seconds: float) -> None:
        self.t += timedelta(seconds=seconds)

    def monotonic(self) -> float:
        return self.t.timestamp()


@dataclass
class World:
    """The chart and the controller, reduced to what the executor observes.

    A helm revision renders the TensorFusionCluster (pools from the post-render policy with
    every switch closed, F1) and the controller Deployment. ``tick`` is one controller beat:
    for each pool whose hypervisor switch is open and whose pods are outdated, one batch of
    ceil(batch% × nodes) pods moves to the new image; progress = batches × batch%, synced at
    100 (F4). A Pending GPUNode stops the pool (F4)."""

    cluster: FakeCluster
    nodes: dict[str, int] = field(default_factory=lambda: {"a": 2, "b": 2})
    batches: dict[str, int] = field(default_factory=dict)
    pending: set[str] = field(default_factory=set)
    # The controller sees a new template only at its next beat: until then the GPUPool
    # status still says "synced at 100" from the last rollout.
    notice_late: int = 0  # beats before the controller notices
    unnoticed: dict[str, int] = field(default_factory=dict)

    def deploy(self, info: HelmReleaseInfo, values: Any, policy: RolloutPolicy | None) -> None:
        c = self.cluster
        c.put(
            {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": {"name": f"{RELEASE}-controller", "namespace": NS},
                "spec": {
                    "replicas": 1,
                    "template": {"metadata": {"labels": {"v": info.chart_version}}},
                },
            }
        )
        image = values["cluster"]["hypervisorImage"]
        pools = []
        for pool in policy.pools if policy else ():
            pools.append(
                {
                    "name": pool.name,
                    "specTemplate": {
                        "componentConfig": {"hypervisor": {"image": image}},
                        "nodeManagerConfig": {
                            "nodePoolRollingUpdatePolicy": {
                                "autoUpdateHypervisor": False,
                                "batchPercentage": pool.batch_percentage,
                            }
                        },
                    },
                }
            )
        tfc = {
            "apiVersion": TF,
            "kind": "TensorFusionCluster",
            "metadata": {"name": "lab-tfc"},
            "spec": {"gpuPools": pools},
            "status": {"phase": "Running"},
        }
        first = c.get(TF, "TensorFusionCluster", None, "lab-tfc") is None
        c.kinds[(TF, "TensorFusionCluster")] = False
        c.kinds[(TF, "GPUPool")] = False
        c.kinds[(TF, "GPUNode")] = False
        c.put(tfc)
        for pool in pools:
            name = pool["name"]
            gp_name = f"lab-tfc-{name}"
            for i in range(self.nodes[name]):
                node = f"{name}-gpu-{i}"
                c.put(
                    {
                        "apiVersion": TF,
                        "kind": "GPUNode",
                        "metadata": {"name": node, "labels": {f"{GROUP}/pool-{gp_name}": "true"}},
                        "status": {"phase": "Pending" if node in self.pending else "Running"},
                    }
                )
                if first or self.cluster.get("v1", "Pod", NS, f"hypervisor-{node}") is None:
                    self._pod(node, name, self._pool_image(name) or image)
            synced = first or self._pool_image(name) == image
            self.batches[name] = 0
            if self.notice_late and not first:
                self.unnoticed[name] = self.notice_late
                continue
            c.put(
                {
                    "apiVersion": TF,
                    "kind": "GPUPool",
                    "metadata": {"name": gp_name},
                    "status": {
                        "phase": "Running",
                        "componentStatus": {
                            "hypervisorConfigSynced": synced,
                            **({"hypervisorUpdateProgress": 100} if synced else {}),
                        },
                    },
                }
            )

    def _pod(self, node: str, pool: str, image: str) -> None:
        self.cluster.put(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": f"hypervisor-{node}",
                    "namespace": NS,
                    "labels": {
                        f"{GROUP}/component": "hypervisor",
                        f"{GROUP}/pool-lab-tfc-{pool}": "true",
                    },
                },
                "spec": {"nodeName": node, "containers": [{"name": "hv", "image": image}]},
                "status": {"phase": "Running"},
            }
        )

    def _pool_image(self, pool: str) -> str:
        pod = self.cluster.get("v1", "Pod", NS, f"hypervisor-{pool}-gpu-0")
        return pod["spec"]["containers"][0]["image"] if pod else ""

    def images(self) -> set[str]:
        return {p["spec"]["containers"][0]["image"] for p in self.cluster.list("v1", "Pod", NS)}

    def switch(self, pool: str) -> bool:
        tfc = self.cluster.get(TF, "TensorFusionCluster", None, "lab-tfc")
        for entry in tfc["spec"]["gpuPools"]:
            if entry["name"] == pool:
                policy = entry["specTemplate"]["nodeManagerConfig"]["nodePoolRollingUpdatePolicy"]
                return bool(policy.get("autoUpdateHypervisor"))
        raise KeyError(pool)

    def tick(self) -> None:
        tfc = self.cluster.get(TF, "TensorFusionCluster", None, "lab-tfc")
        if tfc is None:
            return
        for entry in tfc["spec"]["gpuPools"]:
            name = entry["name"]
            policy = entry["specTemplate"]["nodeManagerConfig"]["nodePoolRollingUpdatePolicy"]
            image = entry["specTemplate"]["componentConfig"]["hypervisor"]["image"]
            nodes = [f"{name}-gpu-{i}" for i in range(self.nodes[name])]
            for n in nodes:  # nodes added by a test after the first render
                if self.cluster.get("v1", "Pod", NS, f"hypervisor-{n}") is None:
                    self._pod(n, name, self._pool_image(name))
            outdated = [
                n
                for n in nodes
                if self.cluster.get("v1", "Pod", NS, f"hypervisor-{n}")["spec"]["containers"][0][
                    "image"
                ]
                != image
            ]
            if outdated and self.unnoticed.get(name):
                self.unnoticed[name] -= 1
                continue
            if outdated and self.notice_late:
                self.cluster.patch_merge(
                    TF,
                    "GPUPool",
                    None,
                    f"lab-tfc-{name}",
                    {"status": {"componentStatus": {"hypervisorConfigSynced": False}}},
                )
            if not outdated or not policy.get("autoUpdateHypervisor"):
                continue
            if any(n in self.pending for n in nodes):
                continue  # F4: a Pending GPUNode pauses the rollout, forever
            pct = int(policy.get("batchPercentage", 100))
            size = math.ceil(pct * len(nodes) / 100)
            for n in outdated[:size]:
                self._pod(n, name, image)
            self.batches[name] = self.batches.get(name, 0) + 1
            progress = min(100, self.batches[name] * pct)
            done = len(outdated) <= size
            progress = 100 if done else progress
            self.cluster.patch_merge(
                TF,
                "GPUPool",
                None,
                f"lab-tfc-{name}",
                {
                    "status": {
                        "componentStatus": {
                            "hypervisorUpdateProgress": progress,
                            "hypervisorConfigSynced": done,
                        }
                    }
                },
            )


CRD = """apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: gpupools.tensor-fusion.ai
spec:
  group: tensor-fusion.ai
  scope: Cluster
  names: {kind: GPUPool, plural: gpupools}
  versions:
  - name: v1
    served: true
    storage: true
"""


@dataclass
class Env:
    tmp: Path
    human: Human
    url: str
    clock: Clock
    cluster: FakeCluster
    helm: FakeHelm
    forge: FakeForge
    world: World
    base_sha: str

    def repo(self, name: str = "mirror") -> GitRepo:
        repo = GitRepo(
            GitSettings(url=self.url, mirror_dir=self.tmp / name, author_email="bot@example.com")
        )
        repo.fetch()
        return repo

    def gate(self, repo: GitRepo) -> ApplyGate:
        """The policy gate as ``gitopsbot run`` builds it, over the test charts on disk."""
        charts = LocalChartSource(sorted((self.tmp / "charts").glob("*/tensor-fusion")))
        return apply_gate(repo, charts)

    def reconciler(
        self, *, store_cls: type[JournalStore] = JournalStore, name: str = "mirror"
    ) -> Reconciler:
        repo = self.repo(name)
        secrets = type("NoSecrets", (), {"resolve_all": lambda self, refs: {}})()
        executor = Executor(cluster=self.cluster, helm=self.helm, secrets=secrets)
        return Reconciler(
            repo=repo,
            store=store_cls(repo, branch="gitopsbot/state"),
            executor_for=lambda spec: executor,
            gate=self.gate(repo),
            clock=self.clock,
            load_fleet=load_fleet,
            resolve_tz=zoneinfo.ZoneInfo,
            settings=BotSettings(),
            forge=self.forge,
        )

    def merge_pr(self, number: int, title: str, files: dict[str, str]) -> str:
        sha = self.human.commit(f"{title} (#{number})", files)
        pr = self.forge.open_or_update_pull_request(
            PullRequestDraft(
                branch=f"change-{number}", base="main", title=title, body="", marker=f"t{number}"
            )
        )
        del self.forge.pulls[pr.number]
        self.forge.pulls[number] = replace(
            pr,
            number=number,
            state=PullRequestState.MERGED,
            merged_at=self.clock.t,
            merge_commit_sha=sha,
        )
        return sha


@pytest.fixture
def env(tmp_path: Path) -> Env:
    return make_env(tmp_path)


def make_env(tmp_path: Path) -> Env:
    src = tmp_path / "src"
    src.mkdir()
    for name, text in fleet_files("1.0.0", "hv:1").items():
        (src / name).parent.mkdir(parents=True, exist_ok=True)
        (src / name).write_text(text)
    url = create_fleet_repo(tmp_path / "remote", "fleet", src)
    human_path = tmp_path / "human"
    git("clone", "--quiet", url, str(human_path), cwd=tmp_path)
    clock = Clock()
    cluster = FakeCluster()
    world = World(cluster)
    charts = {}
    for version in ("1.0.0", "1.1.0"):
        chart = tmp_path / "charts" / version / "tensor-fusion"
        (chart / "crds").mkdir(parents=True)
        (chart / "crds" / "gpupools.yaml").write_text(CRD)
        (chart / "Chart.yaml").write_text(
            f"apiVersion: v2\nname: tensor-fusion\nversion: {version}\nappVersion: {version}\n"
        )
        (chart / "values.yaml").write_text("controller:\n  replicaCount: 2\n")
        charts[version] = chart
    helm = FakeHelm(on_deploy=world.deploy, clock=clock.now, charts=charts)
    # What is deployed before the bot starts: chart 1.0.0 with hv:1.
    fleet = load_fleet_dir(src)
    spec = fleet.clusters["lab"]
    helm.upgrade(
        UpgradeRequest(
            release=RELEASE,
            namespace=NS,
            chart=ChartRef.of(spec.release),
            version="1.0.0",
            values=spec.values,
            description="install by hand",
            post_render_policy=spec.rollout,
        )
    )
    cluster.apply_crds({"gpupools.yaml": CRD})
    base = git("rev-parse", "HEAD", cwd=human_path).strip()
    return Env(tmp_path, Human(human_path), url, clock, cluster, helm, FakeForge(), world, base)


def load_fleet_dir(path: Path):
    from gitopsbot.adapters.localfiles import DirectoryTree

    return load_fleet(DirectoryTree(path))
