"""#29: a first pass records the baselines of the other clusters the process runs with its own,
in one commit (``Intake._baseline``, ``PassBase.peers``): a fleet's first start costs a few
state-branch commits and pushes, not one per cluster. A peer's baseline is what its own first
pass would have recorded (the watched head then), so a merge after it is taken in by the
peer's first pass, not skipped; a peer whose Lease this replica does not hold is left to its
holder. Two clusters in one fleet, real Git, fake clusters."""

from __future__ import annotations

from pathlib import Path

from gitopsbot.core.records.journal import OperationStatus
from tests.waves.test_waves_apply import Fleet2, two_clusters


def state_subjects(fleet: Fleet2) -> list[str]:
    repo = fleet.env.repo("reader")
    repo.fetch()
    return [c.message.splitlines()[0] for c in repo.log("gitopsbot/state", None, 50)]


def test_one_commit_records_every_peers_baseline_and_a_later_merge_is_not_skipped(
    tmp_path: Path,
) -> None:
    fleet = Fleet2(tmp_path)
    rec = fleet.reconciler()
    rec.peers = lambda: ("lab", "stage")
    head = fleet.env.repo("probe").head("main")
    assert rec.reconcile("lab").action == "baseline"
    assert rec.store.seen("lab") == rec.store.seen("stage") == head
    subjects = state_subjects(fleet)
    assert subjects.count(f"baseline {head[:12]} for 2 clusters") == 1
    assert not any(s.startswith("stage: baseline") for s in subjects)

    # A merge after the baseline: stage's first pass takes it in from there.
    fleet.env.merge_pr(8, "chart 1.1.0 everywhere", two_clusters("1.1.0", "hv:2"))
    first = rec.reconcile("stage")
    assert first.action == "started", first
    assert rec.store.current("stage").status is OperationStatus.RUNNING


def test_a_peer_whose_lease_another_replica_holds_is_left_to_it(tmp_path: Path) -> None:
    fleet = Fleet2(tmp_path)
    rec = fleet.reconciler()
    rec.peers = lambda: ("lab", "stage")
    rec.may_act = lambda cluster: cluster == "lab"
    assert rec.reconcile("lab").action == "baseline"
    assert rec.store.seen("lab") is not None and rec.store.seen("stage") is None
    assert any(s.startswith("lab: baseline") for s in state_subjects(fleet))


def test_without_peers_each_cluster_records_its_own(tmp_path: Path) -> None:
    fleet = Fleet2(tmp_path)
    rec = fleet.reconciler()
    assert rec.reconcile("lab").action == "baseline"
    assert rec.store.seen("stage") is None
    assert rec.reconcile("stage").action == "baseline"


def test_a_first_pass_that_read_no_baseline_while_a_peer_recorded_it_records_nothing(
    tmp_path: Path,
) -> None:
    """First passes side by side (the scheduler's workers): each read "no baseline" before the
    first commit; the later ones find it recorded under the lock and add no commit (at 1,000
    clusters three commits of every cluster's baseline were made before this)."""
    fleet = Fleet2(tmp_path)
    rec = fleet.reconciler()
    rec.peers = lambda: ("lab", "stage")
    head = fleet.env.repo("probe").head("main")
    assert head is not None
    assert rec.reconcile("lab").action == "baseline"
    before = rec.store.head()
    rec.intake._baseline("stage", head)  # as stage's own first pass, a moment too late
    assert rec.store.head() == before
