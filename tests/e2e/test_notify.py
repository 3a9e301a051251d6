"""Chat notifications in the sandbox story (issue #12 part 8): a halted upgrade is posted to a
local Slack-compatible receiver and a generic JSON one, configured as ``notifications:`` in
gitopsbot.yaml would configure them, with the cluster, the op id and the pull request's link;
the pass never waits for them."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from gitopsbot.adapters.chat_notifier import from_settings
from gitopsbot.adapters.secrets import SecretResolver
from gitopsbot.core.fleet.settings_file import parse_settings
from gitopsbot.sandbox.story import StoryWorld
from gitopsbot.sandbox.story_bot import BotRunner
from gitopsbot.sandbox.story_fleet import CLUSTER
from tests.e2e.test_halt import BROKEN, _break, _halted_upgrade
from tests.notifications.receiver import Receiver

pytestmark = pytest.mark.slow

SETTINGS = """\
notifications:
  - kind: slack
    url: {env: SANDBOX_SLACK_URL}
    on: [halted, failed]
  - kind: webhook
    url: {env: SANDBOX_OTHER_URL}
    clusters: ["no-such-*"]      # filtered out
  - kind: webhook
    url: {env: SANDBOX_HOOK_URL}
    clusters: ["*"]
"""


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver().start()
    yield r
    r.stop()


def test_a_halted_upgrade_is_posted(
    make_world: Callable[..., StoryWorld],
    make_bot: Callable[..., BotRunner],
    receiver: Receiver,
) -> None:
    world = make_world(window_lead_seconds=None, stall_timeout="4s", on_failure="halt")
    _break(world, BROKEN)
    bot = make_bot(world)
    settings = parse_settings(SETTINGS)
    env = {
        "SANDBOX_SLACK_URL": f"{receiver.url}/slack/T0/B0/sandbox-hook-token",
        "SANDBOX_HOOK_URL": f"{receiver.url}/json/sandbox-hook-token",
        "SANDBOX_OTHER_URL": f"{receiver.url}/other/sandbox-hook-token",
    }
    resolver = SecretResolver(environment=env.get)
    notifier = from_settings(
        type(settings)(forge=bot.settings.forge, notifications=settings.notifications), resolver
    )
    assert notifier is not None
    bot.reconciler.announcer.listeners.append(notifier)
    try:
        _, op_id = _halted_upgrade(world)
        assert notifier.flush(30)
    finally:
        notifier.close()
    slack = [r.json for r in receiver.received if r.path.startswith("/slack/")]
    hooks = [r.json for r in receiver.received if r.path.startswith("/json/")]
    texts = "\n".join(b["text"] for b in slack)
    assert f"*halted* {CLUSTER}: upgrade {op_id}: pool shared hypervisor halted" in texts, texts
    assert f"*failed* {CLUSTER}: upgrade {op_id} failed" in texts, texts
    assert BROKEN in texts and "|PR #" in texts
    events = [e for body in hooks for e in body["events"]]
    kinds = {e["event"] for e in events}
    assert {"halted", "failed"} <= kinds and "succeeded" not in kinds
    assert all(e["cluster"] == CLUSTER and e["operation"]["id"] == op_id for e in events)
    assert all(e["pullRequest"] and "/pull/" in e["pullRequest"]["url"] for e in events)
    assert not [r for r in receiver.received if r.path.startswith("/other/")]
