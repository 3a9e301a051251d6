"""Table tests of core.proposing.proposals per wave: the wave's target and members, members
left out, declined, superseded, the bound shared with per-cluster requests, retired records,
the ledger."""

from __future__ import annotations

from gitopsbot.core.proposing.proposals import (
    ClusterInput,
    ProposalRecord,
    ProposalState,
    WaveInput,
    decide,
    decide_waves,
    parse_ledger,
    render_ledger,
    upsert_record,
    wave_branch,
)
from gitopsbot.core.proposing.request_texts import wave_commit_message as commit_message
from tests.proposals.test_core import INDEX

OPEN, CLOSED, SUPERSEDED = ProposalState.OPEN, ProposalState.CLOSED, ProposalState.SUPERSEDED


def member(name: str, current: str = "1.8.0", scope: str = "minor") -> ClusterInput:
    return ClusterInput(name, current, scope, INDEX)  # type: ignore[arg-type]


def wave(name: str, *members: ClusterInput) -> WaveInput:
    return WaveInput(name, members)


def rec(
    version: str, number: int, state: ProposalState = OPEN, wave: str = "prod"
) -> ProposalRecord:
    return ProposalRecord("", version, number, state, wave=wave)


def test_one_target_for_the_wave_members_below_it_bumped_others_left_out() -> None:
    (d,) = decide_waves(
        [wave("prod", member("a"), member("b", "1.9.0"), member("c", scope="patch"))],
        [],
        max_open=3,
    )
    assert d.target is not None and d.target.version == "1.9.0"
    assert d.clusters == ("a",) and d.current == (("a", "1.8.0"),)
    assert "b: already at chart 1.9.0, left out" in d.notes
    assert "c: 1.9.0 is not an allowed upgrade, left out" in d.notes
    assert d.existing is None and d.opens_new


def test_declined_wave_request_stays_declined_and_nothing_older_replaces_it() -> None:
    (d,) = decide_waves([wave("prod", member("a"))], [rec("1.9.0", 4, CLOSED)], max_open=3)
    assert d.target is None and d.clusters == ()
    assert any("#4" in n and "not proposed again" in n for n in d.notes)


def test_newer_version_supersedes_the_open_wave_request_keeping_its_slot() -> None:
    records = [rec("1.8.1", 2), ProposalRecord("x", "1.9.0", 3)]
    (d,) = decide_waves([wave("prod", member("a"))], records, max_open=2)
    assert d.target is not None and d.target.version == "1.9.0"
    assert [(c.record.number, c.superseded_by) for c in d.close] == [(2, "1.9.0")]


def test_max_open_counts_every_open_request() -> None:
    records = [ProposalRecord("x", "1.9.0", 3), ProposalRecord("y", "1.9.0", 5)]
    first, second = decide_waves(
        [wave("staging", member("s")), wave("prod", member("a"))], records, max_open=3
    )
    assert first.target is not None
    assert second.target is None and any("maxOpen is 3" in n for n in second.notes)


def test_retired_cluster_requests_and_gone_waves_are_closed() -> None:
    records = [ProposalRecord("a", "1.9.0", 3), rec("1.9.0", 7, wave="old")]
    *_, extra = decide_waves([wave("prod", member("a"))], records, max_open=3)
    assert [(c.record.number, c.reason) for c in extra.close] == [
        (3, "cluster `a` is now proposed with its wave (proposals.groupBy)"),
        (7, "wave `old` has no proposal here any more (waves or groupBy changed)"),
    ]
    # groupBy: cluster (no wave inputs): every open wave request is closed.
    (only,) = decide_waves([], [rec("1.9.0", 7)], max_open=3)
    assert [c.record.number for c in only.close] == [7]


def test_wave_records_in_the_ledger_and_their_branch() -> None:
    records = upsert_record([ProposalRecord("prod", "1.9.0", 1)], rec("1.9.0", 2))
    assert len(records) == 2  # a cluster named like the wave is another proposal
    text = render_ledger(records)
    assert parse_ledger(text) == records
    assert '"wave"' not in render_ledger([ProposalRecord("prod", "1.9.0", 1)])  # format kept
    assert rec("1.9.0", 2).branch == "gitopsbot/upgrade/prod/1.9.0"
    assert wave_branch("Prod EU", "1.9.0") == "gitopsbot/upgrade/prod-eu/1.9.0"


def test_commit_message_has_one_trailer_per_cluster() -> None:
    text = commit_message(
        "prod", "tensor-fusion", "1.9.0", [("a", "1.8.0"), ("b", "1.8.1")], {"a": "img:2"}
    )
    assert "Gitopsbot-Proposal: a/1.9.0\nGitopsbot-Proposal: b/1.9.0\n" in text
    assert "a: chart tensor-fusion 1.8.0 → 1.9.0; hypervisor image set explicitly" in text


def test_decide_serves_the_waves_first_and_gives_the_rest_to_the_unwaved_clusters() -> None:
    records = [ProposalRecord("a", "1.9.0", 3)]
    by_cluster, by_wave = decide(
        [member("a"), member("x")], records, max_open=1, waves=[wave("prod", member("a"))]
    )
    assert by_wave[0].clusters == ("a",) and by_wave[0].opens_new
    assert [c.record.number for c in by_wave[-1].close] == [3]  # a goes with its wave now
    assert [d.cluster for d in by_cluster] == ["x"]
    assert by_cluster[0].target is None and any("maxOpen is 1" in n for n in by_cluster[0].notes)
    # Per cluster (no waves): a keeps its request, x waits for a slot.
    by_cluster, by_wave = decide([member("a"), member("x")], records, max_open=1)
    assert by_wave == ()
    assert [(d.cluster, d.existing is not None, d.target is not None) for d in by_cluster] == [
        ("a", True, True),
        ("x", False, False),
    ]


def test_a_wave_whose_indexes_cannot_be_read_keeps_its_open_request() -> None:
    """As a cluster's request is kept while its chart index cannot be read, so is a wave's:
    an index that does not answer for a while is no reason to close a request a person may be
    reviewing ("no longer an allowed upgrade" would be false)."""
    down = ClusterInput("a", "1.8.0", "minor", (), problem="index unreadable: 503")
    (d,) = decide_waves([wave("prod", down)], [rec("1.9.0", 4)], max_open=3)
    assert d.close == () and d.target is None
    assert "a: index unreadable: 503" in d.notes
    # One member readable: the wave is decided on what is known, the open request kept.
    (d,) = decide_waves([wave("prod", down, member("b"))], [rec("1.9.0", 4)], max_open=3)
    assert d.close == () and d.existing is not None and d.existing.number == 4
