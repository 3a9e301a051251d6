"""The pull-request comment of a change held by waves says it starts by itself, and when
(#28 item 9); a change a policy refused still asks for a newer commit."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

from gitopsbot.bot import report
from gitopsbot.core.fleet.model import PoolPolicy, RolloutPolicy
from gitopsbot.core.operations.operation import new_operation
from gitopsbot.core.records.journal import Journal, OperationKind, OperationStatus

T0 = datetime(2026, 12, 1, 10, 0, tzinfo=UTC)
WAVES = (
    "clusters/prod/release.yaml:5: WAVES denied: wave production waits for wave staging: "
    "stage verified 1.1.0 at 09:50 UTC, soak ends 10:50 UTC"
)
F3 = "clusters/prod/rollout.yaml:9: F3 denied: pool a: phase worker would never finish (F3)"


def blocked(*verdicts: str) -> Journal:
    fresh = new_operation(
        kind=OperationKind.UPGRADE,
        cluster="prod",
        desired_sha="b" * 40,
        created_at=T0,
        policy=RolloutPolicy(pools=(PoolPolicy("a"),)),
        pr_number=8,
    )
    return replace(
        fresh,
        status=OperationStatus.BLOCKED,
        failure=f"blocked by policy (denied): {verdicts[0]}",
        verdicts=verdicts,
    )


def test_a_change_held_by_waves_starts_by_itself_and_says_when() -> None:
    text = report.markdown(blocked(WAVES))
    assert "newer commit for this cluster" not in text
    assert "it starts by itself, without a newer commit" in text
    assert "Waiting for: wave production waits for wave staging" in text
    assert "soak ends 10:50 UTC" in text


def test_a_change_a_policy_also_refused_still_needs_a_newer_commit() -> None:
    text = report.markdown(blocked(F3, WAVES))
    assert "A newer commit for this cluster" in text
    assert "starts by itself" not in text
