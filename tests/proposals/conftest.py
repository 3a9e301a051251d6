"""Proposal fixtures: a real bare fleet repository, a chart repository on loopback built from
examples/charts with the real helm, and the local GitHub server."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest
from ruamel.yaml import YAML

from gitopsbot.adapters.chartrepo import HttpChartSource
from gitopsbot.adapters.forge.connect import connect
from gitopsbot.adapters.forge.provider import ForgeProvider
from gitopsbot.adapters.git import GitRepo, GitSettings
from gitopsbot.bot.proposer import Proposer
from gitopsbot.core.fleet.yamledit import set_value
from gitopsbot.sandbox.chartrepo import ChartRepo
from gitopsbot.sandbox.forges.base import LocalForge
from gitopsbot.sandbox.forges.gitea import GiteaForge
from gitopsbot.sandbox.forges.github import GitHubForge
from gitopsbot.sandbox.forges.gitlab import GitLabForge
from gitopsbot.sandbox.gitremote import create_fleet_repo

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE_FLEET = ROOT / "examples" / "fleet"
EXAMPLE_CHARTS = ROOT / "examples" / "charts"
TOKEN = "ghp_canary-token-0123456789"  # a canary: must never appear in output or Git
SERVERS: dict[str, type[LocalForge]] = {
    "github": GitHubForge,
    "gitlab": GitLabForge,
    "gitea": GiteaForge,
}


@dataclass
class FakeClock:
    start: datetime = datetime(2026, 1, 1, tzinfo=UTC)
    offset: float = 0.0

    def now(self) -> datetime:
        return self.start + timedelta(seconds=self.offset)

    def sleep(self, seconds: float) -> None:
        self.offset += max(seconds, 0.0)

    def monotonic(self) -> float:
        return self.offset


def git(*args: str, cwd: Path | None = None) -> str:
    env = {
        **os.environ,
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_AUTHOR_NAME": "Human",
        "GIT_AUTHOR_EMAIL": "human@example.com",
        "GIT_COMMITTER_NAME": "Human",
        "GIT_COMMITTER_EMAIL": "human@example.com",
    }
    done = subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True)
    assert done.returncode == 0, f"git {' '.join(args)}: {done.stderr}"
    return done.stdout


class Charts:
    """A chart repository directory served on loopback; ``publish`` adds a version."""

    def __init__(self, directory: Path, work: Path, helm: Path) -> None:
        self.directory = directory
        self.work = work
        self.helm = helm
        self.reindex()
        self.server = ChartRepo(directory).start()

    @property
    def url(self) -> str:
        return self.server.url

    def add_example(self, version: str) -> None:
        shutil.copy(EXAMPLE_CHARTS / "repo" / f"tensor-fusion-{version}.tgz", self.directory)
        self.reindex()

    def publish(self, version: str, *, app: str, hypervisor: str, changes: str = "") -> None:
        """A new chart version made from the 1.8.0 example (app, hypervisor default, changes)."""
        src = self.work / f"tensor-fusion-{version}"
        shutil.copytree(EXAMPLE_CHARTS / "tensor-fusion-1.8.0", src)
        meta_path = src / "Chart.yaml"
        yaml = YAML()
        meta = yaml.load(meta_path.read_text())
        meta["version"] = version
        meta["appVersion"] = app
        if changes:
            meta["annotations"] = {"artifacthub.io/changes": changes}
        with meta_path.open("w") as fh:
            yaml.dump(meta, fh)
        values = src / "values.yaml"
        values.write_text(set_value(values.read_text(), "cluster.hypervisorImage", hypervisor))
        subprocess.run(
            [str(self.helm), "package", str(src), "-d", str(self.directory)],
            check=True,
            capture_output=True,
        )
        self.reindex()

    def reindex(self) -> None:
        subprocess.run(
            [str(self.helm), "repo", "index", str(self.directory)], check=True, capture_output=True
        )


@pytest.fixture
def charts(tmp_path: Path, binaries: dict[str, Path]) -> Iterator[Charts]:
    directory = tmp_path / "chartrepo"
    directory.mkdir()
    work = tmp_path / "chartsrc"
    work.mkdir()
    c = Charts(directory, work, binaries["helm4"])
    c.add_example("1.8.0")
    c.publish(
        "1.8.3",
        app="2.14.0",
        hypervisor="tensorfusion/tensor-fusion-hypervisor:2.14.0",
        changes="- kind: fixed\n  description: hypervisor leaks a GPU context on restart\n",
    )
    yield c
    c.server.stop()


@dataclass
class World:
    """Everything a proposal pass talks to, real: Git remote, GitHub server, chart repo."""

    tmp: Path
    remote_url: str
    bare: Path
    forge_server: LocalForge
    charts: Charts
    kind: str = "github"

    def repo(self) -> GitRepo:
        return GitRepo(
            GitSettings(
                url=self.remote_url,
                mirror_dir=self.tmp / "mirror",
                author_name="gitopsbot",
                author_email="bot@example.com",
            )
        )

    def forge(self) -> ForgeProvider:
        return connect(
            self.kind,
            url=self.forge_server.api_url,
            repository="acme/fleet",
            token=TOKEN,
            clock=FakeClock(),
        )

    def proposer(self, *, forge: object | None = None) -> Proposer:
        from gitopsbot.adapters.builtin_policies import builtin_policy_documents

        return Proposer(
            self.repo(),
            forge or self.forge(),  # type: ignore[arg-type]
            # A fresh source per pass: HttpChartSource keeps indexes for its lifetime.
            HttpChartSource(cache_dir=self.tmp / "chartcache"),
            policy_documents=builtin_policy_documents(),
        )

    def show(self, ref: str, path: str) -> str:
        return git("--git-dir", str(self.bare), "show", f"{ref}:{path}")

    def sha(self, ref: str) -> str:
        return git("--git-dir", str(self.bare), "rev-parse", ref).strip()

    def branches(self) -> list[str]:
        out = git("--git-dir", str(self.bare), "branch", "--format=%(refname:short)")
        return sorted(out.split())

    def human_commit(self, files: dict[str, str], message: str) -> None:
        self.human_commit_on("main", files, message)

    def human_commit_on(self, branch: str, files: dict[str, str], message: str) -> str:
        """A person's commit pushed to ``branch``; returns its sha."""
        work = self.tmp / "human"
        if not work.exists():
            git("clone", "--quiet", self.remote_url, str(work))
        git("fetch", "--quiet", "origin", cwd=work)
        git("checkout", "--quiet", "-B", branch, f"origin/{branch}", cwd=work)
        for path, text in files.items():
            (work / path).write_text(text)
        git("add", "--all", cwd=work)
        git("commit", "--quiet", "-m", message, cwd=work)
        git("push", "--quiet", "origin", branch, cwd=work)
        return git("rev-parse", "HEAD", cwd=work).strip()


def make_fleet(
    dest: Path,
    chart_url: str,
    *,
    max_open: int = 3,
    scope: str = "minor",
    versions: dict[str, str],
    forge_url: str = "",
    forge_kind: str = "github",
) -> Path:
    """examples/fleet with only the clusters in ``versions``, at those chart versions, their
    chart repository ``chart_url`` (no test reaches the network)."""
    shutil.copytree(EXAMPLE_FLEET, dest)
    for cluster_dir in (dest / "clusters").iterdir():
        if cluster_dir.name not in versions:
            shutil.rmtree(cluster_dir)
    for cluster, version in versions.items():
        release = dest / "clusters" / cluster / "release.yaml"
        text = set_value(release.read_text(), "chart.repository", chart_url)
        release.write_text(set_value(text, "chart.version", version))
    settings = dest / "gitopsbot.yaml"
    text = set_value(settings.read_text(), "proposals.maxOpen", max_open)
    text = set_value(text, "proposals.scope", scope)
    if forge_url:
        text = set_value(set_value(text, "forge.url", forge_url), "forge.repository", "acme/fleet")
        text = set_value(text, "forge.kind", forge_kind)
    settings.write_text(text)
    return dest


@pytest.fixture
def world_factory(tmp_path: Path, charts: Charts) -> Iterator[Callable[..., World]]:
    servers: list[LocalForge] = []

    def make(
        *,
        versions: dict[str, str] | None = None,
        max_open: int = 3,
        scope: str = "minor",
        kind: str = "github",
    ) -> World:
        server = SERVERS[kind](token=TOKEN)
        server.start()
        servers.append(server)
        fleet = make_fleet(
            tmp_path / "fleet-src",
            charts.url,
            versions=versions or {"staging": "1.8.0", "production": "1.8.0"},
            max_open=max_open,
            scope=scope,
            forge_url=server.api_url,
            forge_kind=kind,
        )
        url = create_fleet_repo(tmp_path / "remotes", "fleet", fleet)
        bare = Path(unquote(urlsplit(url).path))
        return World(tmp_path, url, bare, server, charts, kind)

    yield make
    for s in servers:
        s.stop()
