"""core.drift_proposal: the drift request's edits and text; nothing secret is written."""

from __future__ import annotations

from gitopsbot.core.drift import proposal as drift_proposal
from gitopsbot.core.drift import report as drift
from gitopsbot.core.drift.report import DriftItem, DriftReport

VALUES = "# the team's values\ncontroller:\n  replicas: 1  # one is enough\n"
ROLLOUT = "pools:\n  shared:\n    batchPercentage: 50\n    batchInterval: 1s\n"
RELEASE = "chart:\n  name: tensor-fusion\n  version: 1.8.7\n"
FILES = {"values.yaml": VALUES, "rollout.yaml": ROLLOUT, "release.yaml": RELEASE}
CANARY = "canary-0xFEED-never-written"


def _report() -> DriftReport:
    desired = drift.DesiredState(
        chart_version="1.8.7",
        values={"controller": {"replicas": 1}},
        pool_policies={"shared": {"batchPercentage": 50, "autoUpdateHypervisor": False}},
    )
    observed = drift.ObservedState(
        chart_version="1.8.0",
        values=drift.observed_values(
            {
                "controller": {"replicas": 3},
                "agent": {"enrollToken": CANARY},
                "x": {"token": CANARY},
            }
        ),
        tfc_policies={"shared": {"batchPercentage": 80, "autoUpdateHypervisor": True}},
    )
    return drift.compare("staging", desired, observed)


def test_make_git_match_edits_keep_comments_and_write_no_secret() -> None:
    report = _report()
    p = drift_proposal.proposal(report, FILES, reapply=False)
    assert set(p.edits) == {"values.yaml", "rollout.yaml", "release.yaml"}
    assert "replicas: 3  # one is enough" in p.edits["values.yaml"]
    assert "# the team's values" in p.edits["values.yaml"]
    assert "batchPercentage: 80" in p.edits["rollout.yaml"]
    assert "version: 1.8.0" in p.edits["release.yaml"]
    everything = p.title + p.body + p.message + "".join(p.edits.values())
    assert CANARY not in everything and "***" not in "".join(p.edits.values())
    assert "autoUpdateHypervisor" in p.body  # listed for a person, not written
    assert report.digest() in p.body


def test_reapply_bumps_rotation() -> None:
    p = drift_proposal.proposal(_report(), FILES, reapply=True)
    assert p.edits == {"credentials.yaml": "rotation: 1\n"}
    again = drift_proposal.reapply_edits({"credentials.yaml": "secrets: []\nrotation: 4\n"})
    assert again == {"credentials.yaml": "secrets: []\nrotation: 5\n"}
    assert "re-apply Git" in p.title
    assert "R8" not in p.body  # replicas is a value Git holds


def test_reapply_warns_of_r8_for_values_git_lacks() -> None:
    added = DriftItem(
        "values", "controller.extra", "(absent)", "2", "values.yaml", "controller.extra", 2
    )
    p = drift_proposal.proposal(DriftReport("staging", (added,)), FILES, reapply=True)
    assert "R8 denies" in p.body and "`controller.extra`" in p.body


def test_a_removed_value_and_a_masked_one_are_not_written() -> None:
    removed = DriftItem("values", "a", "1", "(absent)", "values.yaml", "a", None, True)
    masked = DriftItem("values", "b", "(absent)", "{}", "values.yaml", "b", {"k": "***"})
    report = DriftReport("staging", (removed, masked))
    assert drift_proposal.git_edits(report, FILES) == {}
    p = drift_proposal.proposal(report, FILES, reapply=False)
    assert "nothing Git holds differs" in p.body


def test_names() -> None:
    assert drift_proposal.branch("staging") == "gitopsbot-drift/staging"
    assert drift_proposal.marker("staging") == "drift:staging"
