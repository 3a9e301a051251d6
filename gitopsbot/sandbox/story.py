"""The demo's story, and the pieces the end-to-end tests and the benchmark share.

``StoryWorld`` is everything outside the bot: the sandbox (API emulator, controller
simulator, chart repository) with the Git remote and the local GitHub forge registered as
sandbox services, the fleet repository (``story_fleet``) pushed to that remote, and a
person's clone of it driven with the ``git`` CLI (merge, revert, push). The bot wired to it
as ``gitopsbot run`` wires it is ``story_bot.BotRunner``; the waits on its journal are
``story_waits``; ``gitopsbot demo`` is ``story_demo.play``.

``StoryOptions(control_plane=...)`` plays the story on a real control plane instead of the
API emulator (see sandbox/environment.py); the bot's side does not change.

Everything started here is stopped by ``stop()``.
"""

from __future__ import annotations

import logging
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import cast

from gitopsbot import app
from gitopsbot.bot.proposal_report import Proposal
from gitopsbot.core.fleet.model import BotSettings
from gitopsbot.core.fleet.settings_file import parse_settings
from gitopsbot.errors import GitOpsBotError
from gitopsbot.ports.charts import ChartSource
from gitopsbot.ports.forge import Forge
from gitopsbot.sandbox import environment as env
from gitopsbot.sandbox.controlplane import ControlPlane
from gitopsbot.sandbox.forges.github import GitHubForge
from gitopsbot.sandbox.forges.github_apps import new_app_key
from gitopsbot.sandbox.gitremote import GitRemote, admin_git_env
from gitopsbot.sandbox.simulator.store_port import StorePort
from gitopsbot.sandbox.story_fleet import (
    CLUSTER,
    StoryFleet,
    next_window_start,
    pool_names,
    story_fleet_files,
)

log = logging.getLogger(__name__)

GIT_USER = "gitopsbot"
GIT_PASSWORD = "sandbox-git-password"  # a loopback-only server made for this run
FORGE_TOKEN = "sandbox-forge-token"
WEBHOOK_SECRET = "sandbox-webhook-secret"
OWNER, REPO = "acme", "fleet"
STATE_BRANCH = "gitopsbot/state"
TF = "tensor-fusion.ai/v1"
MARKER = ".gitopsbot-story"


APP_ID = 424242  # the story's GitHub App (``app_token_lifetime``)


class StoryError(GitOpsBotError):
    """The story did not reach the state it waited for."""


class ShiftedClock:
    """The bot's clock: real time plus an offset a test may move forward ("it is now the
    window's opening"), so a window hours away opens at once without waiting for it. The
    demo keeps the offset at 0."""

    def __init__(self) -> None:
        self.offset = timedelta(0)

    def now(self) -> datetime:
        return datetime.now(UTC) + self.offset

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)

    def monotonic(self) -> float:
        return time.monotonic()

    def jump_to(self, when: datetime) -> None:
        """From now on, the bot's ``now()`` reads ``when`` (then runs on from there)."""
        self.offset = when - datetime.now(UTC)


@dataclass(frozen=True, slots=True)
class StoryOptions:
    state_dir: Path
    pools: int = 2
    nodes: int = 3
    chart_version: str = "1.8.0"
    # Later pools' window opens this long after the fleet is written (None: no windows).
    window_lead_seconds: float | None = 40.0
    batch_percentage: int = 50
    batch_interval: str = "1s"
    on_failure: str = "rollback"
    stall_timeout: str = "10m"
    poll_interval: str = "5s"
    webhook: bool = True
    hypervisor_ready_delay: float = 0.5
    controller_ready_delay: float = 1.0
    soonest_seconds: float = 0.2  # the scheduler's floor between passes of one cluster
    # A real control plane to run on instead of the API emulator (env.SandboxOptions).
    control_plane: ControlPlane | None = None
    # The chart repository's directory (a copy a story may re-publish in); None: examples'.
    charts_dir: Path | None = None
    # The bot authenticates as a GitHub App whose installation tokens live this many seconds
    # (forge API and Git push alike); None: the fixed forge token and Git password.
    app_token_lifetime: float | None = None
    # The fleet's chart repository instead of the sandbox's (an oci:// registry), and its
    # chartRegistries login (host, username; story_fleet.REGISTRY_PASSWORD_ENV).
    chart_repo_url: str = ""
    chart_registry: tuple[str, str] | None = None
    # A public keyring the chart repository's charts must be signed with (``chartKeyrings``).
    chart_keyring: Path | None = None


def git(*args: str, cwd: Path) -> str:
    done = subprocess.run(
        ["git", *args], cwd=cwd, env=admin_git_env(), capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise StoryError(f"git {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout


class StoryWorld:
    """The sandbox plus the fleet repository on its Git remote and the local forge."""

    def __init__(self, options: StoryOptions) -> None:
        self.options = options
        self.state_dir = options.state_dir.resolve()
        self.sandbox: env.Sandbox | None = None
        self.remote: GitRemote | None = None
        self.forge: GitHubForge | None = None
        self.fleet: StoryFleet | None = None
        self.fleet_url = ""
        self.human = self.state_dir / "fleet-clone"
        self.clock = ShiftedClock()
        # Clients with keep-alive connections to the servers: closed before the servers stop,
        # or their handler threads would wait on the idle connections.
        self._closers: list[Callable[[], None]] = []
        self._tools: app.ToolSet | None = None
        self.app_key = ""  # the GitHub App's private key (PEM), with ``app_token_lifetime``
        self._app: app.ForgeAccess | None = None

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> StoryWorld:
        opts = self.options
        marker = self.state_dir / MARKER
        if self.state_dir.exists() and any(self.state_dir.iterdir()):
            if not marker.exists():  # never empty a directory the story did not make
                raise StoryError(f"{self.state_dir}: not empty and not a story directory")
            shutil.rmtree(self.state_dir)  # every story starts from nothing
        self.state_dir.mkdir(parents=True, exist_ok=True)
        marker.write_text("made by gitopsbot demo; emptied by the next run\n")
        # env.Service declares ``url`` a plain attribute; GitRemote and the forge have a
        # read-only property, which mypy rejects as a Service, hence the casts.
        git_remote = GitRemote(self.state_dir / "git", username=GIT_USER, password=GIT_PASSWORD)
        forge = GitHubForge(
            token=FORGE_TOKEN,
            owner=OWNER,
            repo=REPO,
            token_lifetime=opts.app_token_lifetime or 3600.0,
        )
        if opts.app_token_lifetime is not None:
            self.app_key, public = new_app_key()
            forge.register_app(APP_ID, public)
            git_remote.accepts_token = forge.installation_token_live
        env.register_service("git", lambda _s: cast(env.Service, git_remote))
        env.register_service("github", lambda _s: cast(env.Service, forge))
        self.sandbox = env.Sandbox(
            env.SandboxOptions(
                state_dir=self.state_dir / "sandbox",
                pools=opts.pools,
                nodes=opts.nodes,
                chart_version=opts.chart_version,
                hypervisor_ready_delay=opts.hypervisor_ready_delay,
                controller_ready_delay=opts.controller_ready_delay,
                control_plane=opts.control_plane,
                charts_dir=opts.charts_dir or env.DEFAULT_CHARTS,
            )
        )
        try:
            self.sandbox.start()
            self.remote, self.forge = git_remote, forge
            self.push_fleet()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        while self._closers:
            try:
                self._closers.pop()()
            except Exception:  # close the rest regardless
                log.exception("closing a client")
        for name in ("git", "github"):
            env.SERVICE_FACTORIES.pop(name, None)
        if self.sandbox is not None:
            self.sandbox.stop()  # stops the registered services too
            self.sandbox = None

    # -- the fleet repository --------------------------------------------------------------

    @property
    def chart_repo_url(self) -> str:
        assert self.sandbox is not None and self.sandbox.repo is not None
        return self.sandbox.repo.url

    @property
    def kubeconfig(self) -> Path:
        assert self.sandbox is not None
        return self.sandbox.kubeconfig

    def push_fleet(self) -> None:
        """Write the story fleet (window relative to now) and push it as a new repository."""
        assert self.remote is not None and self.forge is not None
        opts = self.options
        opens = (
            None
            if opts.window_lead_seconds is None
            else next_window_start(self.clock.now(), lead_seconds=opts.window_lead_seconds)
        )
        self.fleet = StoryFleet(
            chart_repo_url=opts.chart_repo_url or self.chart_repo_url,
            chart_registry=opts.chart_registry,
            chart_keyring=str(opts.chart_keyring) if opts.chart_keyring else None,
            kube_context="sandbox",
            forge_api_url=self.forge.api_url,
            forge_repository=f"{OWNER}/{REPO}",
            chart_version=opts.chart_version,
            pools=pool_names(opts.pools),
            nodes=opts.nodes,
            batch_percentage=opts.batch_percentage,
            batch_interval=opts.batch_interval,
            window_opens=opens,
            on_failure=opts.on_failure,
            stall_timeout=opts.stall_timeout,
            poll_interval=opts.poll_interval,
        )
        source = self.state_dir / "fleet-source"
        for path, text in story_fleet_files(self.fleet).items():
            target = source / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)
        self.remote.create_fleet_repo("fleet", source)
        self.fleet_url = self.remote.repo_url("fleet")
        # The forge follows the repository: heads are the pushed tips, merges real commits.
        self.forge.attach_repo(self.remote.root / "fleet.git")
        forge = self.forge
        self.remote.on_push.append(lambda _name: forge.pushed())
        authed = self.fleet_url.replace("http://", f"http://{GIT_USER}:{GIT_PASSWORD}@", 1)
        git("clone", "--quiet", authed, str(self.human), cwd=self.state_dir)

    # -- what a person does ----------------------------------------------------------------

    def merge(self, number: int) -> str:
        """Merge pull request ``number`` as the forge's button does: the forge makes the merge
        commit on main in the remote and calls the "merged" webhooks. Returns the merge
        commit."""
        assert self.forge is not None
        return self.forge.merge(number).merge_commit_sha

    def revert(self, sha: str) -> str:
        """``git revert`` of a merge commit (first parent), pushed to main."""
        h = self.human
        git("fetch", "--quiet", "origin", cwd=h)
        git("checkout", "--quiet", "main", cwd=h)
        git("merge", "--quiet", "--ff-only", "origin/main", cwd=h)
        parents = git("rev-list", "--parents", "-n", "1", sha, cwd=h).split()
        mainline = ["-m", "1"] if len(parents) > 2 else []
        git("revert", "--no-edit", *mainline, sha, cwd=h)
        git("push", "--quiet", "origin", "main", cwd=h)
        return git("rev-parse", "HEAD", cwd=h).strip()

    def state_log(self) -> str:
        """``git log`` of the state branch in the person's clone (fetched first)."""
        git(
            "fetch",
            "--quiet",
            "origin",
            f"+{STATE_BRANCH}:refs/remotes/origin/{STATE_BRANCH}",
            cwd=self.human,
        )
        return git("log", "--format=%h %s", f"origin/{STATE_BRANCH}", cwd=self.human)

    # -- the bot's connections -------------------------------------------------------------

    def git_repo(self, name: str) -> app.GitRepo:
        if self.app_key:
            return app.token_mirror(
                self.fleet_url,
                self.state_dir / "mirrors" / name,
                self._app_access().tokens,  # type: ignore[arg-type]  # an app's always has them
                author_name="gitopsbot",
                author_email="gitopsbot@sandbox.invalid",
            )
        return app.password_mirror(
            self.fleet_url,
            self.state_dir / "mirrors" / name,
            username=GIT_USER,
            password=GIT_PASSWORD,
            author_name="gitopsbot",
            author_email="gitopsbot@sandbox.invalid",
        )

    def _app_access(self) -> app.ForgeAccess:
        """The GitHub App's client: one token cache for the forge and every Git mirror."""
        assert self.forge is not None
        if self._app is None:
            self._app = app.github_app_client(
                url=self.forge.api_url,
                repository=f"{OWNER}/{REPO}",
                app_id=APP_ID,
                private_key=self.app_key,
                closers=self._closers,
            )
        return self._app

    def forge_client(self) -> Forge:
        assert self.forge is not None
        if self.app_key:
            forge = self._app_access().forge
            assert forge is not None
            return forge
        return app.forge_client(
            "github",
            url=self.forge.api_url,
            repository=f"{OWNER}/{REPO}",
            token=FORGE_TOKEN,
            closers=self._closers,
        )

    def chart_source(self) -> ChartSource:
        """The charts the bot reads, cached in the story's directory (the chart repository's
        address changes from one sandbox to the next)."""
        assert self.fleet is not None
        settings = parse_settings(story_fleet_files(self.fleet)["gitopsbot.yaml"])
        charts = app.chart_source(
            self.state_dir / "chart-cache",
            helm=lambda: self.tools().helm,
            registries=app.registry_logins(settings),
            keyrings=app.chart_keyrings(settings),
        )
        close = getattr(charts, "close", None)
        if close is not None:
            self._closers.append(close)
        return charts

    def propose(self) -> Proposal:
        """One proposal pass (``gitopsbot propose --once``): opens the upgrade request."""
        repo = self.git_repo("proposer")
        wiring = app.ProposalWiring(repo, self.forge_client(), BotSettings())
        proposer = app.proposer(
            wiring,
            "main",
            [],
            charts=self.chart_source(),
            renderer=app.renderer(self.tools().helm, self.state_dir / "tools"),
        )
        report = proposer.run_once()
        if not report.proposals:
            raise StoryError("the proposer opened nothing: " + "; ".join(report.lines()))
        proposal = report.proposals[0]
        proposer.comment(CLUSTER, proposal.number)  # `gitopsbot comment`: the plan comment
        return proposal

    def run_options(self) -> app.RunOptions:
        """What ``gitopsbot run`` would be told for this world: its kubeconfig, and helm's and
        kubectl's homes under the state dir."""
        return app.RunOptions(
            fleet_url=self.fleet_url,
            kubeconfig=str(self.kubeconfig),
            cache=self.state_dir / "tools",
        )

    def tools(self) -> app.ToolSet:
        """helm and kubectl as the sandbox runs them: GITOPSBOT_HELM/_KUBECTL, else the pinned
        ones (downloaded and verified once into the user's cache)."""
        if self._tools is None:
            self._tools = app.resolve_tools(app.RunOptions(fleet_url="", download_binaries=True))
        return self._tools

    # -- reading the world (tests, demo) ---------------------------------------------------

    def store(self) -> StorePort:
        """The cluster's objects: the emulator's Store, or the real server's (KubeStore)."""
        assert self.sandbox is not None
        return self.sandbox.store

    def hypervisor_images(self) -> dict[str, list[str]]:
        """GPU node → images of the hypervisor pods on it (one each, when all is well)."""
        store = self.store()
        out: dict[str, list[str]] = {n["metadata"]["name"]: [] for n in store.list(TF, "GPUNode")}
        for pod in store.list("v1", "Pod", label_selector="tensor-fusion.ai/component=hypervisor"):
            node = pod["spec"].get("nodeName", "")
            images = [c["image"] for c in pod["spec"]["containers"]]
            out.setdefault(node, []).extend(images)
        return out

    def helm(self, *args: str) -> str:
        assert self.sandbox is not None
        done = subprocess.run(
            [str(self.tools().helm), *args, "--kubeconfig", str(self.kubeconfig)],
            env=self.sandbox.helm_env(),
            capture_output=True,
            text=True,
            check=False,
            timeout=120,
        )
        if done.returncode != 0:
            raise StoryError(f"helm {' '.join(args)}: {done.stderr.strip()}")
        return done.stdout
