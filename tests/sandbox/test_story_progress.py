"""The demo's progress lines (``sandbox.story.Progress``), pure: no sandbox started."""

from __future__ import annotations

import io
from datetime import UTC, datetime, timedelta

from gitopsbot.bot.pass_base import PassResult
from gitopsbot.core.fleet.model import PoolPolicy, RolloutPolicy
from gitopsbot.core.operations.operation import new_operation
from gitopsbot.core.records.journal import OperationKind
from gitopsbot.sandbox.story_bot import Progress

T0 = datetime(2026, 12, 2, 14, 30, tzinfo=UTC)


def test_a_pool_held_by_its_window_is_told_when_the_window_opens_not_the_next_pass() -> None:
    """#28 item 9: the pass's next_at (a poll, another pool's batch) is no window hold."""
    journal = new_operation(
        kind=OperationKind.UPGRADE,
        cluster="sandbox",
        desired_sha="c" * 40,
        created_at=T0,
        policy=RolloutPolicy(pools=(PoolPolicy("shared"), PoolPolicy("pool-2"))),
    )
    out = io.StringIO()
    opens = T0 + timedelta(minutes=11)
    progress = Progress(out, windowed=frozenset({"pool-2"}))
    progress.window_opens = opens  # as ``play`` sets it, once the story fleet is known
    next_pass = T0 + timedelta(seconds=5)
    detail = "pool/shared/hypervisor wait 40%; pool/pool-2/hypervisor wait 0%"
    progress.result(PassResult("sandbox", "pools", detail, next_pass), journal)
    text = out.getvalue()
    held = "pool/pool-2/hypervisor: held by its maintenance window, which opens at 14:41:00"
    assert held in text, text
    assert "14:30:05" not in text
