"""The bot as a GitHub App whose installation tokens live three seconds (docs/forges.md, GitHub
App): a proposal, its merge and the whole upgrade go through while tokens expire again and
again under it.

The forge client and Git over HTTPS share one installation token cache: tokens are refreshed
ahead of expiry, and after every pass the local forge also expires every token it issued (as
a revocation would), so the next pass's first API request and its first fetch or push meet
a 401 with a token the bot still thinks good. Each is refreshed and retried: no step fails,
the plan comment and the commit statuses are written, the journal reaches the state branch.
Neither the app's private key nor any token minted appears in the log, in any commit of the
fleet repository, or in a pull request's body or comments.
"""

from __future__ import annotations

import logging
import subprocess
from collections.abc import Callable

import pytest

from gitopsbot.bot.pass_base import PassResult
from gitopsbot.core.records.journal import Journal, OperationKind, OperationStatus, StepState
from gitopsbot.sandbox.story import StoryWorld
from gitopsbot.sandbox.story_bot import BotRunner
from gitopsbot.sandbox.story_waits import finished_op, wait_for

pytestmark = pytest.mark.slow


def test_an_upgrade_as_a_github_app_while_its_tokens_keep_expiring(
    make_world: Callable[..., StoryWorld],
    make_bot: Callable[..., BotRunner],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    world = make_world(window_lead_seconds=None, app_token_lifetime=3.0)
    forge, remote = world.forge, world.remote
    assert forge is not None and remote is not None and remote.accepts_token is not None
    live = remote.accepts_token
    git_refused: list[str] = []

    def counting(token: str) -> bool:
        ok = live(token)
        if not ok:
            git_refused.append("refused")
        return ok

    remote.accepts_token = counting

    def revoke_after_each_pass(result: PassResult, journal: Journal | None) -> None:
        forge.apps.expire_tokens()

    bot = make_bot(world, on_pass=revoke_after_each_pass)
    proposal = world.propose()
    world.merge(proposal.number)
    journal = wait_for(world, finished_op(OperationKind.UPGRADE), what="the upgrade", timeout=180)
    bot.mirror.flush()

    assert journal.status is OperationStatus.SUCCEEDED, journal.failure
    assert all(s.state is StepState.SUCCEEDED for s in journal.steps), [
        (s.name, s.state, s.detail) for s in journal.steps if s.state is not StepState.SUCCEEDED
    ]
    # Tokens were minted over and over, and refused tokens were met on both paths.
    assert forge.apps.minted >= 3
    api_refused = [r for r in forge.log if r.status == 401]
    assert api_refused, "no API request met an expired token"
    assert git_refused, "no Git transfer met an expired token"
    # ... and the bot kept writing to the forge as the installation.
    with forge.lock:
        comments = [c.body for c in forge.comments.values() if c.number == proposal.number]
        states = {s.state for s in forge.statuses}
    assert comments and "success" in states

    # The canary sweep: the key's PEM lines and every token minted, nowhere to be seen.
    secrets = [ln for ln in world.app_key.splitlines() if "-----" not in ln]
    secrets += list(forge.apps.issued)
    history = subprocess.run(
        ["git", "log", "--all", "-p", "--format=%H %s%n%b"],
        cwd=remote.root / "fleet.git",
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    with forge.lock:
        bodies = [p.body for p in forge.pulls.values()]
        bodies += [c.body for c in forge.comments.values()]
    shown = "\n".join([caplog.text, history, *bodies])
    assert "gitopsbot/state" in history or "journal" in history  # the sweep read something
    leaked = [s[:8] for s in secrets if s in shown]
    assert not leaked, leaked
