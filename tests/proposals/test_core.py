"""Table tests of core.proposals: scopes, R2/F5 skips, superseding, declined, the bound, edits."""

from __future__ import annotations

import pytest

from gitopsbot.core.charts.chart import ChartVersion
from gitopsbot.core.fleet.model import UpgradeScope
from gitopsbot.core.forge.forge_types import CommitState
from gitopsbot.core.policy import Decision
from gitopsbot.core.proposing.proposals import (
    ClusterInput,
    ProposalRecord,
    ProposalState,
    candidates,
    decide_cluster,
    decide_fleet,
    in_scope,
    parse_ledger,
    render_ledger,
    upsert_record,
)
from gitopsbot.core.proposing.request_texts import (
    changes_section,
    policy_status,
    proposal_body,
    proposal_edits,
)

OPEN, CLOSED, MERGED, SUPERSEDED = (
    ProposalState.OPEN,
    ProposalState.CLOSED,
    ProposalState.MERGED,
    ProposalState.SUPERSEDED,
)


def cv(version: str, app: str, changes: str = "") -> ChartVersion:
    annotations = {"artifacthub.io/changes": changes} if changes else {}
    return ChartVersion(
        name="tensor-fusion",
        version=version,
        app_version=app,
        digest="",
        created="2026-11-01T00:00:00Z",
        urls=(),
        annotations=annotations,
    )


# A chart line shaped like the real one (F5: appVersion jumps to 2.x inside chart 1.x).
INDEX = (
    cv("1.8.0", "2.13.0"),
    cv("1.8.1", "2.13.4"),
    cv("1.8.2", "2.12.0"),  # app lower than 1.8.1's (F5)
    cv("1.9.0", "2.14.0"),
    cv("1.9.1-rc.1", "2.15.0"),  # pre-release: never proposed
    cv("2.0.0", "2.16.0"),
    cv("3.0.0", "3.0.0"),  # app major 2 → 3 (R2)
    cv("1.5.0", "1.43.5"),
)


@pytest.mark.parametrize(
    ("current", "candidate", "scope", "expected"),
    [
        ("1.8.0", "1.8.1", "patch", True),
        ("1.8.0", "1.9.0", "patch", False),
        ("1.8.0", "1.9.0", "minor", True),
        ("1.8.0", "2.0.0", "minor", False),
        ("1.8.0", "2.0.0", "major", True),
        ("1.8.0", "1.8.1", "pinned", False),
        ("1.8.1", "1.8.0", "major", False),  # never downwards
        ("1.8.1", "1.8.1", "major", False),
    ],
)
def test_scope(current: str, candidate: str, scope: UpgradeScope, expected: bool) -> None:
    assert in_scope(current, candidate, scope) is expected


@pytest.mark.parametrize(
    ("current", "scope", "allowed", "skipped"),
    [
        ("1.8.0", "patch", ["1.8.1"], ["1.8.2"]),
        ("1.8.0", "minor", ["1.9.0", "1.8.1"], ["1.8.2"]),
        ("1.8.0", "major", ["2.0.0", "1.9.0", "1.8.1"], ["3.0.0", "1.8.2"]),
        ("1.5.0", "minor", [], ["1.9.0", "1.8.2", "1.8.1", "1.8.0"]),  # all R2 (app 1.x → 2.x)
        ("1.8.0", "pinned", [], []),
    ],
)
def test_candidates(
    current: str, scope: UpgradeScope, allowed: list[str], skipped: list[str]
) -> None:
    got, skips, _ = candidates(current, scope, INDEX)
    assert [v.version for v in got] == allowed
    assert [s.version for s in skips] == skipped


def test_skip_reasons_name_the_rule() -> None:
    _, skips, _ = candidates("1.8.0", "major", INDEX)
    reasons = {s.version: s.reason for s in skips}
    assert "R2" in reasons["3.0.0"]
    assert "F5" in reasons["1.8.2"]


def test_current_version_missing_from_index_proposes_nothing() -> None:
    d = decide_cluster(ClusterInput("a", "1.7.0", "minor", INDEX), [])
    assert d.target is None
    assert "not in the repository index" in d.notes[0]


@pytest.mark.parametrize(
    ("records", "target", "existing", "closed"),
    [
        # nothing yet: propose the newest allowed
        ([], "1.9.0", None, []),
        # the open proposal is the target: refresh it
        ([("1.9.0", 7, OPEN)], "1.9.0", 7, []),
        # a newer version appeared: the older open one is superseded
        ([("1.8.1", 3, OPEN)], "1.9.0", None, [(3, "superseded by chart 1.9.0")]),
        # declined: never again, and nothing older in its place
        ([("1.9.0", 4, CLOSED)], None, None, []),
        # closed by the bot as superseded: also never reopened
        ([("1.9.0", 4, SUPERSEDED)], None, None, []),
        # merged then reverted (current still below): not reopened
        ([("1.9.0", 4, MERGED)], None, None, []),
        # newest declined but an older allowed one is open: kept
        ([("1.9.0", 4, CLOSED), ("1.8.1", 2, OPEN)], "1.8.1", 2, []),
        # an open proposal at or below the current version is obsolete
        ([("1.8.0", 1, OPEN)], "1.9.0", None, [(1, "already at chart 1.8.0")]),
        # two open ones: the target is kept, the other closed
        (
            [("1.9.0", 5, OPEN), ("1.8.1", 2, OPEN)],
            "1.9.0",
            5,
            [(2, "superseded by chart 1.9.0")],
        ),
    ],
)
def test_decide_cluster(
    records: list[tuple[str, int, ProposalState]],
    target: str | None,
    existing: int | None,
    closed: list[tuple[int, str]],
) -> None:
    recs = [ProposalRecord("a", v, n, s) for v, n, s in records]
    d = decide_cluster(ClusterInput("a", "1.8.0", "minor", INDEX), recs)
    assert (d.target.version if d.target else None) == target
    assert (d.existing.number if d.existing else None) == existing
    got = [(c.record.number, c.reason) for c in d.close]
    assert len(got) == len(closed)
    for (n, reason), (en, ereason) in zip(got, closed, strict=True):
        assert n == en
        assert ereason in reason


def test_declined_note_names_the_request() -> None:
    d = decide_cluster(
        ClusterInput("a", "1.8.0", "minor", INDEX), [ProposalRecord("a", "1.9.0", 4, CLOSED)]
    )
    assert any("#4" in n and "not proposed again" in n for n in d.notes)


def test_pinned_closes_open_proposals() -> None:
    d = decide_cluster(
        ClusterInput("a", "1.8.0", "pinned", INDEX), [ProposalRecord("a", "1.9.0", 4, OPEN)]
    )
    assert d.target is None
    assert [c.record.number for c in d.close] == [4]
    assert "pinned" in d.close[0].reason


def _fleet(n: int) -> list[ClusterInput]:
    return [ClusterInput(f"c{i}", "1.8.0", "minor", INDEX) for i in range(n)]


@pytest.mark.parametrize(
    ("max_open", "open_before", "expected_new"),
    [
        (3, 0, 3),
        (2, 0, 2),
        (2, 1, 1),  # one slot taken (c0's refreshed proposal), one more opens
        (0, 0, 0),
    ],
)
def test_bound(max_open: int, open_before: int, expected_new: int) -> None:
    recs = [ProposalRecord(f"c{i}", "1.9.0", 10 + i, OPEN) for i in range(open_before)]
    decisions = decide_fleet(_fleet(4), recs, max_open=max_open)
    assert sum(1 for d in decisions if d.opens_new) == expected_new
    open_after = sum(1 for d in decisions if d.target is not None)
    assert open_after <= max(max_open, open_before)
    blocked = [d for d in decisions if d.target is None]
    assert all(any("maxOpen" in n for n in d.notes) for d in blocked)


def test_superseding_keeps_its_slot_at_the_bound() -> None:
    recs = [ProposalRecord("c0", "1.8.1", 3, OPEN)]
    decisions = decide_fleet(_fleet(2), recs, max_open=1)
    by = {d.cluster: d for d in decisions}
    assert by["c0"].target is not None and by["c0"].target.version == "1.9.0"
    assert [c.record.number for c in by["c0"].close] == [3]
    assert by["c1"].target is None  # still bounded


def test_removed_cluster_proposal_is_closed() -> None:
    recs = [ProposalRecord("gone", "1.9.0", 9, OPEN)]
    decisions = decide_fleet(_fleet(1), recs, max_open=5)
    closes = [c for d in decisions for c in d.close]
    assert [c.record.number for c in closes] == [9]
    assert "no longer in the fleet" in closes[0].reason


RELEASE = """\
# chart for staging
chart:
  repository: https://charts.example   # upstream
  name: tensor-fusion
  version: 1.8.0          # bumped by gitopsbot
release:
  name: tf
  namespace: tf
"""
VALUES = """\
cluster:
  # R4: set explicitly
  hypervisorImage: tensorfusion/tensor-fusion-hypervisor:2.13.0  # pinned
other: 1
"""


def test_edits_keep_comments_and_touch_only_two_values() -> None:
    release, values = proposal_edits(
        release_text=RELEASE,
        values_text=VALUES,
        version="1.8.7",
        hypervisor_image="tensorfusion/tensor-fusion-hypervisor:2.15.0",
    )
    assert release == RELEASE.replace("version: 1.8.0 ", "version: 1.8.7 ")
    assert values == VALUES.replace("hypervisor:2.13.0", "hypervisor:2.15.0")


def test_edits_add_a_missing_hypervisor_image() -> None:
    _, values = proposal_edits(
        release_text=RELEASE, values_text="other: 1\n", version="1.8.7", hypervisor_image="hv:2"
    )
    assert values.startswith("other: 1\n")
    assert "hypervisorImage: hv:2" in values


def test_edits_without_chart_default_leave_values() -> None:
    _, values = proposal_edits(
        release_text=RELEASE, values_text=VALUES, version="1.8.7", hypervisor_image=""
    )
    assert values == VALUES


def test_changes_section_lists_each_version_in_range() -> None:
    versions = (
        cv("1.8.0", "2.13.0", "- kind: fixed\n  description: old\n"),
        cv("1.8.1", "2.13.4", "- kind: added\n  description: new scheduler flag\n"),
        cv("1.9.0", "2.14.0", "- plain string change\n"),
        cv("1.9.1", "2.14.1", "not: [a list"),
    )
    lines = changes_section("1.8.0", "1.9.0", versions)
    text = "\n".join(lines)
    assert "old" not in text  # the current version's changes are not news
    assert "- **added** new scheduler flag" in text
    assert "- plain string change" in text
    assert "1.9.1" not in text  # above the target


def test_body_carries_skips_changes_and_plan() -> None:
    d = decide_cluster(
        ClusterInput(
            "a",
            "1.8.0",
            "minor",
            (*INDEX[:2], cv("1.8.3", "2.13.5", "- kind: fixed\n  description: leak\n")),
        ),
        [],
    )
    body = proposal_body(
        d, chart="tensor-fusion", scope="minor", plan_markdown="PLAN", versions=INDEX, image="hv:2"
    )
    assert "1.8.0 → 1.8.3" in body
    assert "cluster.hypervisorImage" in body and "hv:2" in body
    assert body.rstrip().endswith("PLAN")


@pytest.mark.parametrize(
    ("decision", "state"),
    [
        (Decision.ALLOWED, CommitState.SUCCESS),
        (Decision.NEEDS_ACK, CommitState.PENDING),
        (Decision.DENIED, CommitState.FAILURE),
    ],
)
def test_policy_status(decision: Decision, state: CommitState) -> None:
    assert policy_status(decision).state is state


def test_ledger_round_trip_and_upsert() -> None:
    recs = (ProposalRecord("b", "1.9.0", 2, OPEN), ProposalRecord("a", "1.8.1", 1, CLOSED))
    text = render_ledger(recs)
    assert parse_ledger(text) == tuple(sorted(recs))
    updated = upsert_record(parse_ledger(text), ProposalRecord("b", "1.9.0", 2, SUPERSEDED))
    assert [r.state for r in updated] == [CLOSED, SUPERSEDED]
    assert parse_ledger(None) == ()
    with pytest.raises(ValueError, match=r"proposals\.json"):
        parse_ledger('{"proposals": [{"cluster": 1}]}')
