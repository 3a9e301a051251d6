"""The bot of the story: ``gitopsbot run`` wired to a ``StoryWorld``, in threads of this process.

``BotRunner`` wires the bot exactly as ``gitopsbot run`` does, by the composition root
(``gitopsbot.app.wire_reconciler``: GitRepo mirror, JournalStore, Reconciler, Scheduler,
WebhookReceiver, the forge provider, Events, real helm 4 and kubectl), on the world's clock,
with its own mirror so a fresh runner starts from Git alone; ``Progress``
prints the journal's transitions as it records them; ``CrashingStore`` makes it "die" at a
chosen transition (the tests of resume).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import TextIO

from gitopsbot import app
from gitopsbot.bot import report
from gitopsbot.bot.event_recorder import EventRecorder
from gitopsbot.bot.journal_store import JournalStore
from gitopsbot.bot.pass_base import PassResult
from gitopsbot.bot.pr_mirror import PullRequestMirror
from gitopsbot.bot.shared_repo import SharedRepo
from gitopsbot.core.forge.webhook_events import EventKind, WebhookEvent
from gitopsbot.core.records.journal import Journal, OperationStatus, PhaseState
from gitopsbot.core.rollouts import phase_view
from gitopsbot.fleetrepo import load_fleet
from gitopsbot.ports.repo import Repo
from gitopsbot.sandbox.story import WEBHOOK_SECRET, ShiftedClock, StoryWorld
from gitopsbot.sandbox.story_fleet import CLUSTER


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
