"""core.canary_marks: the failed-version mark a failed GPU canary leaves on the state branch,
the clearing rule (clearedVersions in gitopsbot.yaml) and how the promotion gate holds it."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from gitopsbot.core.fleet.model import BotSettings, ClearedVersion, FailedVersion
from gitopsbot.core.fleet.settings_file import parse_cleared_versions, parse_settings
from gitopsbot.core.rollouts.canary_smoke import CanaryEvidence, CanaryResult, CanaryVerdict
from gitopsbot.core.waves import canary_marks as cm
from gitopsbot.core.waves import promotion_gate
from gitopsbot.core.waves.canary_marks import CanaryFailure
from gitopsbot.errors import FleetError
from tests.canary_smoke.helpers import spec

AT = datetime(2026, 12, 4, 18, 0, tzinfo=UTC)
FAIL = CanaryFailure("1.8.7", "c1", "a", "op-1", AT, "GPU canary smoke pod p failed", "n1")


def _result(verdict: CanaryVerdict) -> CanaryResult:
    return CanaryResult(verdict, "why", CanaryEvidence(pod="p", namespace="ns", node="n1"))


def test_only_a_failed_canary_marks() -> None:
    kw = {"version": "1.8.7", "cluster": "c1", "pool": "a", "op_id": "op-1", "at": AT}
    assert cm.failure_of(_result(CanaryVerdict.PASSED), **kw) is None  # type: ignore[arg-type]
    assert cm.failure_of(_result(CanaryVerdict.RUNNING), **kw) is None  # type: ignore[arg-type]
    mark = cm.failure_of(_result(CanaryVerdict.FAILED), **kw)  # type: ignore[arg-type]
    assert mark == CanaryFailure("1.8.7", "c1", "a", "op-1", AT, "why", "n1")


def test_record_round_trip_and_path() -> None:
    assert FAIL.path == "canary-failures/1.8.7.yaml"
    text = cm.dumps(FAIL)
    assert text.startswith("kind: GpuCanaryFailure\nversion: 1.8.7\n")
    assert cm.loads(text, FAIL.path) == FAIL
    marks, problems = cm.read_all({FAIL.path: text, "canary-failures/x.yaml": "a: 1\n", "o": ""})
    assert marks == (FAIL,) and problems == (
        "canary-failures/x.yaml: not a GpuCanaryFailure record",
    )
    with pytest.raises(ValueError):
        cm.record_path("../1.8.7")
    with pytest.raises(ValueError, match="operation"):
        cm.loads(text.replace("operation: op-1\n", ""), "f")


def test_clearing_rule() -> None:
    later = CanaryFailure("1.8.7", "c2", "b", "op-2", AT, "again")
    other = CanaryFailure("1.9.0", "c1", "a", "op-3", AT, "x")
    all_of_it = ClearedVersion("1.8.7", "fixed")
    only_op1 = ClearedVersion("1.8.7", "fixed", operation="op-1")
    assert cm.standing([FAIL, later, other], []) == (FAIL, later, other)
    assert cm.standing([FAIL, later, other], [all_of_it]) == (other,)
    assert cm.standing([FAIL, later, other], [only_op1]) == (later, other)
    assert cm.hold_for("1.8.7", [FAIL], []) == FAIL
    assert cm.hold_for("1.8.7", [FAIL], [all_of_it]) is None
    assert cm.hold_for("1.8.8", [FAIL], []) is None
    # The first failure is the record while it stands; a cleared one is replaced.
    assert cm.to_record(None, FAIL, []) == FAIL
    assert cm.to_record(FAIL, later, []) is None
    assert cm.to_record(FAIL, later, [only_op1]) == later


def test_a_standing_mark_holds_the_version_on_every_cluster() -> None:
    settings = cm.with_canary_marks(BotSettings(), [FAIL], [])
    assert settings.failed_versions == (FailedVersion("1.8.7", "", FAIL.reason(), 0),)
    assert promotion_gate.applies(settings)
    s = spec()
    decision = promotion_gate.decide_change(
        settings=settings, clusters=[s], evidence={}, spec=s, before="1.8.0", now=AT
    )
    assert not decision.allowed
    assert decision.message.startswith("1.8.7 is marked failed for every cluster: GPU canary")
    assert (
        "clearedVersions" in decision.message and "canary-failures/1.8.7.yaml" in decision.message
    )
    verdict = promotion_gate.verdict(decision, s)
    assert verdict is not None and verdict.location is None
    cleared = cm.with_canary_marks(BotSettings(), [FAIL], [ClearedVersion("1.8.7", "ok")])
    assert cleared == BotSettings()


def test_cleared_versions_in_gitopsbot_yaml() -> None:
    text = (
        "clearedVersions:\n"
        "  - version: 1.8.7\n"
        "    reason: driver fixed\n"
        "  - {version: 1.9.0, reason: retry, operation: op-3}\n"
    )
    parse_settings(text)  # accepted by the settings reader
    assert parse_cleared_versions(text) == (
        ClearedVersion("1.8.7", "driver fixed", "", 2),
        ClearedVersion("1.9.0", "retry", "op-3", 4),
    )
    assert parse_cleared_versions("") == ()
    with pytest.raises(FleetError) as err:
        parse_settings("clearedVersions:\n  - version: 1.8.7\n")
    assert "clearedVersions[0].reason" in str(err.value)
    with pytest.raises(FleetError) as err:
        parse_cleared_versions("clearedVersions:\n  - {version: x, reason: r, op: 1}\n")
    assert "clearedVersions[0].version" in str(err.value) and "clearedVersions[0].op" in str(
        err.value
    )
