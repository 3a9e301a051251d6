"""The demo's story, and the pieces the end-to-end tests and the benchmark share.

``StoryWorld`` is everything outside the bot: the sandbox (API emulator, controller
simulator, chart repository) with the Git remote and the local GitHub forge registered as
sandbox services, the fleet repository (``story_fleet``) pushed to that remote, and a
person's clone of it driven with the ``git`` CLI (merge, revert, push). ``BotRunner`` is the
bot wired to it exactly as ``gitopsbot run`` wires it, by the composition root
(``gitopsbot.app.wire_reconciler``: GitRepo mirror, JournalStore, Reconciler, Scheduler,
WebhookReceiver, the forge provider, Events, real helm 4 and kubectl), with
its own mirror so a fresh runner starts from Git alone. ``play`` is ``gitopsbot demo``:
proposal → merge → upgrade with two pools (one held by its window) → revert → rollback.

``StoryOptions(control_plane=...)`` plays the story on a real control plane instead of the
API emulator (see sandbox/environment.py); the bot's side does not change.

Everything started here is stopped by ``stop()``; ``play`` stops it in a ``finally``.
Longer than ~500 lines: the world, the bot runner and the demo's narration share the
story's names and waits, and are read together.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TextIO, cast

from gitopsbot import app
from gitopsbot.bot import report
from gitopsbot.bot.event_recorder import EventRecorder
from gitopsbot.bot.journal_store import JournalStore
from gitopsbot.bot.pass_base import PassResult
from gitopsbot.bot.pr_mirror import PullRequestMirror
from gitopsbot.bot.proposal_report import Proposal
from gitopsbot.bot.shared_repo import SharedRepo
from gitopsbot.core.fleet.model import BotSettings
from gitopsbot.core.fleet.settings_file import parse_settings
from gitopsbot.core.forge.webhook_events import EventKind, WebhookEvent
from gitopsbot.core.records.journal import Journal, OperationKind, OperationStatus, PhaseState
from gitopsbot.core.rollouts import phase_view
from gitopsbot.errors import GitOpsBotError
from gitopsbot.fleetrepo import load_fleet
from gitopsbot.ports.charts import ChartSource
from gitopsbot.ports.forge import Forge
from gitopsbot.ports.repo import Repo
from gitopsbot.sandbox import environment as env
from gitopsbot.sandbox.controlplane import ControlPlane
from gitopsbot.sandbox.forges.github import GitHubForge
from gitopsbot.sandbox.forges.github_apps import new_app_key
from gitopsbot.sandbox.gitremote import GitRemote
from gitopsbot.sandbox.simulator.store_port import StorePort
from gitopsbot.sandbox.story_fleet import (
    CLUSTER,
    StoryFleet,
    next_window_start,
    pool_names,
    story_fleet_files,
    window_cron,
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


class Crash(Exception):
    """Raised where the bot's process is to die (tests of resume)."""


class CrashingStore(JournalStore):
    """A JournalStore that dies instead of recording a transition ``crash_on`` picks: the
    step's effect happened outside, its record never reached Git (a kill at that moment)."""

    def __init__(self, repo: Repo, *, branch: str, crash_on: Callable[[str], bool]) -> None:
        super().__init__(repo, branch=branch, push=True)
        self.crash_on = crash_on
        self.crashed = threading.Event()

    def save(
        self,
        journal: Journal,
        message: str,
        *,
        files: Mapping[str, bytes | None] | None = None,
        seen: str | None = None,
        push: bool = True,
    ) -> str:
        if self.crashed.is_set() or self.crash_on(message):
            self.crashed.set()
            raise Crash(message)  # what waited in the mirror unpushed dies with it
        return super().save(journal, message, files=files, seen=seen, push=push)


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


def _git_env() -> dict[str, str]:
    return {
        **os.environ,
        "GIT_AUTHOR_NAME": "Fleet Admin",
        "GIT_AUTHOR_EMAIL": "admin@example.com",
        "GIT_COMMITTER_NAME": "Fleet Admin",
        "GIT_COMMITTER_EMAIL": "admin@example.com",
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_TERMINAL_PROMPT": "0",
    }


def git(*args: str, cwd: Path) -> str:
    done = subprocess.run(
        ["git", *args], cwd=cwd, env=_git_env(), capture_output=True, text=True, check=False
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


# -------------------------------------------------------------------------------- the bot


@dataclass
class Progress:
    """Prints the journal's transitions as the bot records them."""

    out: TextIO | None
    t0: float = field(default_factory=time.monotonic)
    seen: dict[str, str] = field(default_factory=dict)
    windowed: frozenset[str] = frozenset()  # pools with a maintenance window
    window_opens: datetime | None = None  # when their window opens (the story's cron)

    def say(self, text: str) -> None:
        if self.out is not None:
            self.out.write(f"  [{time.monotonic() - self.t0:6.1f}s] {text}\n")
            self.out.flush()

    def result(self, r: PassResult, j: Journal) -> None:
        """A pass that waits says why (a window, a queue), once per reason."""
        if r.action in ("wait", "queued") and r.detail and self.seen.get("wait") != r.detail:
            self.seen["wait"] = r.detail
            self.say(f"  waiting: {r.detail}"[:160])
        if r.action != "pools" or r.next_at is None:
            return
        for s in j.steps:
            held = j.phase(s.name).state in (PhaseState.PENDING, PhaseState.PAUSED)
            key = f"{j.op_id}:{s.name}:held"
            waiting = s.pool in self.windowed and f"{s.name} wait" in r.detail
            if held and waiting and key not in self.seen:
                self.seen[key] = "yes"
                # When the window opens, not the pass's next_at: that is only when the bot
                # looks again (a poll, another pool's batch), often well before it opens.
                opens = self.window_opens
                when = f", which opens at {opens.astimezone(UTC):%H:%M:%S} UTC" if opens else ""
                self.say(f"  {s.name}: held by its maintenance window{when}")

    def journal(self, j: Journal) -> None:
        key = f"{j.op_id}:status"
        if self.seen.get(key) != j.status:
            self.seen[key] = j.status
            extra = f" until {j.queue.queued_until:%H:%M:%S}" if j.queue.queued_until else ""
            self.say(f"{j.kind} {j.op_id}: {j.status}{extra}")
        now = report.as_of(j)
        for s in j.steps:
            state = str(s.state)
            shown = ""
            if s.pool:
                ph = j.phase(s.name)
                if ph.state is not PhaseState.PENDING:
                    # one line per batch: "rolling · batch 2/2 of 2 nodes · 2/3 nodes done …"
                    shown = f" · {phase_view.view(ph, s, now).summary(now)}"
                state = f"{ph.state} {ph.progress}%" if not s.state.finished else state
            if self.seen.get(f"{j.op_id}:{s.name}") != state:
                self.seen[f"{j.op_id}:{s.name}"] = state
                detail = f" — {s.detail}" if s.detail and s.state.finished else ""
                self.say(f"  {s.name}: {state}{shown}{detail}"[:220])
        if j.status is OperationStatus.FAILED and j.failure:
            key = f"{j.op_id}:failure"
            if self.seen.get(key) != j.failure:
                self.seen[key] = j.failure
                self.say(f"  failure: {j.failure}"[:200])


class BotRunner:
    """``gitopsbot run`` for the story's fleet, in threads of this process."""

    def __init__(
        self,
        world: StoryWorld,
        *,
        name: str = "bot",
        progress: Progress | None = None,
        webhook: bool = True,
        on_pass: Callable[[PassResult, Journal | None], None] | None = None,
        crash_on: Callable[[str], bool] | None = None,
        may_act: Callable[[str], bool] | None = None,
        release_watch: bool = False,
    ) -> None:
        """``may_act``: whether this replica holds the cluster's Lease (``run``'s
        ``ShardKeeper.held``); None: one replica, always. ``release_watch``: idle releases
        watched as ``gitopsbot run``'s long-running loop does (``app.release_watches``)."""
        self.world = world
        self.progress = progress
        self.on_pass = on_pass
        self.repo = SharedRepo(world.git_repo(name))  # as ``gitopsbot run`` wraps it
        self.repo.fetch()
        fleet = load_fleet(self.repo.tree(self.repo.head("main") or "main"))
        self.settings = fleet.settings
        branch = self.settings.state_branch
        self.store: JournalStore = (
            JournalStore(self.repo, branch=branch, push=True)
            if crash_on is None
            else CrashingStore(self.repo, branch=branch, crash_on=crash_on)
        )
        forge = world.forge_client()
        options = world.run_options()
        access = app.cluster_access(options)
        world._closers.append(access.close)
        # Wired exactly as ``gitopsbot run`` wires it (gitopsbot.app), on the world's clock.
        self.wired = app.wire_reconciler(
            options,
            repo=self.repo,
            store=self.store,
            bot_settings=self.settings,
            clock=world.clock,
            tools=world.tools(),
            forge=forge,
            charts=world.chart_source(),
            access=access,
            instance=name,
            may_act=may_act,
        )
        self.reconciler = self.wired.reconciler
        # The scheduler runs on real time (apscheduler compares with it); ``_pass`` turns the
        # bot clock's "come back at" into real time.
        self.scheduler = app.loop(
            self._pass,
            follow_up=self._follow_up,  # no fetch, as ``gitopsbot run`` wires it
            clock=ShiftedClock(),  # offset 0: real time
            interval_seconds=self.settings.poll_interval_seconds,
            jitter_seconds=0,
            workers=1,  # GitRepo is not thread-safe: one pass at a time
            soonest_seconds=world.options.soonest_seconds,
        )
        self.watches = app.release_watches(access, self.scheduler.nudge) if release_watch else None
        self.reconciler.release_watch = self.watches
        self.receiver: app.WebhookReceiver | None = None
        if webhook:
            self.receiver = app.receiver({"github": WEBHOOK_SECRET}, self._nudge)
        self.passes: list[PassResult] = []
        self.first_action_at: float | None = None  # monotonic time of the first non-idle pass
        self.stopped = threading.Event()
        self._busy = threading.Lock()  # held for the whole of a pass

    @property
    def mirror(self) -> PullRequestMirror:
        assert self.wired.mirror is not None  # the story always has its forge
        return self.wired.mirror

    @property
    def events(self) -> EventRecorder:
        assert self.wired.events is not None  # RunOptions.events is on
        return self.wired.events

    def _nudge(self, event: WebhookEvent) -> None:
        if (event.kind is EventKind.PUSH and event.branch == self.settings.watched_branch) or (
            event.merged
        ):
            self.scheduler.nudge()

    def _pass(self, cluster: str, *, fetch: bool = True) -> PassResult:
        with self._busy:
            if self.stopped.is_set():
                return PassResult(cluster, "stopped")
            try:
                result = self.reconciler.reconcile(cluster, fetch=fetch)
            except Crash:
                self.stopped.set()  # the process "died": no further pass
                return PassResult(cluster, "crashed")
            self.passes.append(result)
            if result.action not in ("idle", "baseline") and self.first_action_at is None:
                self.first_action_at = time.monotonic()
            journal = self.store.current(cluster)
            if self.progress is not None and journal is not None:
                self.progress.journal(journal)
                self.progress.result(result, journal)
            if self.on_pass is not None:
                self.on_pass(result, journal)
            if self.stopped.is_set() or result.next_at is None:
                # No "come back at" once stopping: see stop().
                return replace(result, next_at=None)
            return replace(result, next_at=result.next_at - self.world.clock.offset)

    def _follow_up(self, cluster: str) -> PassResult:
        """The scheduler's pass right after one that asked to come back at once: no fetch."""
        return self._pass(cluster, fetch=False)

    def start(self) -> BotRunner:
        if self.receiver is not None:
            self.receiver.start()
            assert self.world.forge is not None
            self.world.forge.hooks.clear()
            self.world.forge.add_webhook(f"{self.receiver.url}/webhooks/github", WEBHOOK_SECRET)
        self.scheduler.set_clusters([CLUSTER])
        self.scheduler.start()
        return self

    def stop(self) -> None:
        """Stop at a step boundary: the running pass finishes and records first.

        ``Scheduler.shutdown`` now avoids apscheduler's shutdown deadlock itself (see
        gitopsbot/bot/scheduler.py); this runner keeps its own guard as well, because
        ``stopped`` also marks a simulated crash: no new pass starts and none asks to be
        moved once it is set; the scheduler is shut down without waiting; then the
        in-flight pass, if any, is waited for."""
        self.stopped.set()
        self.scheduler.shutdown(wait=False)
        with self._busy:  # the in-flight pass has recorded its outcome
            crashed = isinstance(self.store, CrashingStore) and self.store.crashed.is_set()
            if not crashed:  # as ``gitopsbot run`` stops: what waited is pushed
                self.store.flush()
        self.wired.close()
        if self.watches is not None:
            self.watches.close()
        if self.receiver is not None:
            self.receiver.stop()
            if self.world.forge is not None:
                self.world.forge.hooks.clear()


# ---------------------------------------------------------------------- waiting and reading


def state_reader(world: StoryWorld) -> JournalStore:
    """A read-only view of the state branch through its own mirror."""
    return JournalStore(world.git_repo("reader"), branch=STATE_BRANCH, push=False)


def wait_for(
    world: StoryWorld,
    predicate: Callable[[JournalStore], Journal | None],
    *,
    what: str,
    timeout: float,
    interval: float = 0.5,
) -> Journal:
    """Fetch the state branch until ``predicate`` returns a journal."""
    reader = state_reader(world)
    deadline = time.monotonic() + timeout
    while True:
        reader.refresh()
        found = predicate(reader)
        if found is not None:
            return found
        if time.monotonic() > deadline:
            current = reader.current(CLUSTER)
            raise StoryError(
                f"timed out after {timeout:.0f}s waiting for {what}; the journal says: "
                + (f"{current.kind} {current.status} {current.failure}" if current else "nothing")
            )
        time.sleep(interval)


def finished_op(
    kind: OperationKind, *, after: str = ""
) -> Callable[[JournalStore], Journal | None]:
    """The current operation, once it is of ``kind`` and finished (not ``after``'s id)."""

    def check(store: JournalStore) -> Journal | None:
        j = store.current(CLUSTER)
        if j is None or j.kind is not kind or j.op_id == after:
            return None
        return j if j.status in (OperationStatus.SUCCEEDED, OperationStatus.FAILED) else None

    return check


# ------------------------------------------------------------------------------ the demo


def play(
    options: StoryOptions, *, out: TextIO, keep: Callable[[StoryWorld], None] | None = None
) -> int:
    """``gitopsbot demo``: the whole story, printed step by step. Stops everything it
    started before returning (``keep`` is called first, with everything still running)."""
    progress = Progress(out)
    say = progress.say
    world = StoryWorld(options)
    bot: BotRunner | None = None
    try:
        say(
            f"starting the sandbox: Kubernetes API emulator, controller simulator "
            f"({options.pools} pools x {options.nodes} GPU nodes), chart repository, Git "
            "remote, local GitHub"
        )
        world.start()
        assert world.fleet is not None and world.forge is not None
        say(f"tensor-fusion {options.chart_version} installed with helm 4")
        say(f"fleet repository {world.fleet_url} (clusters/{CLUSTER}: {options.pools} pools)")
        if world.fleet.window_opens is not None:
            progress.windowed = frozenset(world.fleet.pools[1:])
            progress.window_opens = world.fleet.window_opens
            say(
                f"pool {world.fleet.pools[-1]}'s maintenance window opens at "
                f"{world.fleet.window_opens:%H:%M:%S} UTC (cron '{_cron(world)}')"
            )
        bot = BotRunner(world, progress=progress, webhook=options.webhook).start()
        wait_baseline(world)
        say(
            "the bot is running (webhook receiver + poll every "
            f"{bot.settings.poll_interval_seconds}s); it recorded its baseline"
        )

        say("proposer: checking the chart repository for a newer tensor-fusion")
        proposal = world.propose()
        say(
            f"pull request #{proposal.number} opened: '{world.forge.pull(proposal.number).title}' "
            f"(plan decision: {proposal.decision}; the plan is its body and its plan comment)"
        )
        for line in plan_summary(world.forge.pull(proposal.number).body):
            say(f"    | {line}"[:150])  # a long row shortened, never dropped

        # On a terminal, the operation is redrawn in place below the story's lines
        # (docs/progress.md); the lines go through sys.stdout, which the view keeps above it.
        live = contextlib.ExitStack()
        if out.isatty():
            live.enter_context(app.live_view(bot.reconciler, out))
            progress.out = cast(TextIO, _Stdout())
        with live:
            code = _merge_and_revert(world, bot, proposal, progress)
        progress.out = out
        if code:
            return code
        bot.stop()
        _where_to_look(world, proposal.number, out)
        if keep is not None:
            keep(world)
        return 0
    finally:
        if bot is not None:
            bot.stop()
        world.stop()


class _Stdout:
    """Writes to whatever ``sys.stdout`` is now: under the live view, its proxy that prints
    above the redrawn region."""

    def write(self, text: str) -> int:
        return sys.stdout.write(text)

    def flush(self) -> None:
        sys.stdout.flush()


def _merge_and_revert(
    world: StoryWorld, bot: BotRunner, proposal: Proposal, progress: Progress
) -> int:
    """The story's middle: merge, the upgrade, the revert, the rollback. 0 when both
    succeeded, else 1 (said)."""
    say = progress.say
    assert world.forge is not None
    say(f"merging pull request #{proposal.number} (a person clicks Merge; webhook to the bot)")
    merge_sha = world.merge(proposal.number)
    upgrade = wait_for(
        world,
        finished_op(OperationKind.UPGRADE),
        what="the upgrade to finish",
        timeout=240,
    )
    if upgrade.status is not OperationStatus.SUCCEEDED:
        say(f"the upgrade failed: {upgrade.failure}")
        return 1
    images = world.hypervisor_images()
    say(f"upgrade succeeded; hypervisors now: {_image_summary(images)}")

    say(f"reverting the merge ({merge_sha[:12]}) with `git revert -m 1` pushed to main")
    world.revert(merge_sha)
    bot.scheduler.nudge()  # the local forge sends no push events; a real one would
    rollback = wait_for(
        world,
        finished_op(OperationKind.ROLLBACK),
        what="the rollback to finish",
        timeout=240,
    )
    if rollback.status is not OperationStatus.SUCCEEDED:
        say(f"the rollback failed: {rollback.failure}")
        return 1
    say(f"rollback succeeded; hypervisors now: {_image_summary(world.hypervisor_images())}")
    return 0


def wait_baseline(world: StoryWorld, timeout: float = 60) -> None:
    reader = state_reader(world)
    deadline = time.monotonic() + timeout
    while reader.seen(CLUSTER) is None:
        if time.monotonic() > deadline:
            raise StoryError("the bot recorded no baseline")
        time.sleep(0.2)
        reader.refresh()


def _cron(world: StoryWorld) -> str:
    assert world.fleet is not None and world.fleet.window_opens is not None
    return window_cron(world.fleet.window_opens)


def _comments(world: StoryWorld, number: int) -> list[str]:
    assert world.forge is not None
    with world.forge.lock:
        return [c.body for c in world.forge.comments.values() if c.number == number]


def _image_summary(images: dict[str, list[str]]) -> str:
    counts: dict[str, int] = {}
    for imgs in images.values():
        for image in imgs:
            tag = image.rsplit(":", 1)[-1]
            counts[tag] = counts.get(tag, 0) + 1
    return ", ".join(f"{n} on {tag}" for tag, n in sorted(counts.items())) or "none"


def plan_summary(body: str) -> list[str]:
    """The pull request body's lines up to the plan's first section (``### Policy``...):
    the proposal, the plan's heading and its whole deployed/target table; no HTML comment,
    no run of blank lines."""
    lines: list[str] = []
    in_plan = False
    for line in body.splitlines():
        if line.startswith("## "):
            in_plan = True
        elif in_plan and line.startswith("### "):
            break
        if line.startswith("<!--") or (not line.strip() and (not lines or not lines[-1])):
            continue
        lines.append(line.rstrip())
    while lines and not lines[-1]:
        lines.pop()
    return lines


def _where_to_look(world: StoryWorld, number: int, out: TextIO) -> None:
    assert world.forge is not None
    log_lines = world.state_log().splitlines()
    out.write("\nwhere to look:\n")
    out.write(f"  the state branch: git -C {world.human} log origin/{STATE_BRANCH}\n")
    for line in log_lines[:8]:
        out.write(f"      {line}\n")
    if len(log_lines) > 8:
        out.write(f"      ... {len(log_lines) - 8} more\n")
    where = f"git -C {world.human} show origin/{STATE_BRANCH}:clusters/{CLUSTER}"
    out.write(f"  the journal: {where}/journal.yaml\n  history:     {where}/history/\n")
    out.write(f"  pull request #{number} comments:\n")
    for body in _comments(world, number):
        first = next(
            (ln for ln in body.splitlines() if ln.strip() and not ln.startswith("<!--")), ""
        )
        out.write(f"      - {first[:120]}\n")
    with world.forge.lock:
        latest = {(st.sha, st.context): st for st in world.forge.statuses}  # the forge shows
    for (sha, context), st in latest.items():  # the newest per commit and context
        out.write(f"  status {context} on {sha[:12]}: {st.state} ({st.description[:70]})\n")
    out.flush()
