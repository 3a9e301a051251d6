"""``gitopsbot demo``: the story played and narrated, proposal → merge → upgrade with two pools
(one held by its window) → revert → rollback, then where to look."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable
from typing import TextIO, cast

from gitopsbot import app
from gitopsbot.bot.proposal_report import Proposal
from gitopsbot.core.records.journal import OperationKind, OperationStatus
from gitopsbot.sandbox.story import STATE_BRANCH, StoryOptions, StoryWorld
from gitopsbot.sandbox.story_bot import BotRunner, Progress
from gitopsbot.sandbox.story_fleet import CLUSTER, window_cron
from gitopsbot.sandbox.story_waits import finished_op, wait_baseline, wait_for


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
    if not _succeeded(world, OperationKind.UPGRADE, say):
        return 1
    images = world.hypervisor_images()
    say(f"upgrade succeeded; hypervisors now: {_image_summary(images)}")

    say(f"reverting the merge ({merge_sha[:12]}) with `git revert -m 1` pushed to main")
    world.revert(merge_sha)
    bot.scheduler.nudge()  # the local forge sends no push events; a real one would
    if not _succeeded(world, OperationKind.ROLLBACK, say):
        return 1
    say(f"rollback succeeded; hypervisors now: {_image_summary(world.hypervisor_images())}")
    return 0


def _succeeded(world: StoryWorld, kind: OperationKind, say: Callable[[str], None]) -> bool:
    """Wait for the operation of ``kind`` to finish; whether it succeeded (its failure said)."""
    done = wait_for(world, finished_op(kind), what=f"the {kind} to finish", timeout=240)
    if done.status is not OperationStatus.SUCCEEDED:
        say(f"the {kind} failed: {done.failure}")
    return done.status is OperationStatus.SUCCEEDED


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
