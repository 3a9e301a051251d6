"""The reviewed chart is the applied chart (#30): the digests a plan records and the
comparison the apply makes with them (``core.planning.reviewed_chart``), the ``chart.digest`` pin in
the plan, and the records and journal field they travel in."""

from __future__ import annotations

import shutil
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from gitopsbot.adapters.chartrepo import LocalChartSource
from gitopsbot.adapters.localfiles import DirectoryTree
from gitopsbot.core.drift import baseline as drift_baseline
from gitopsbot.core.planning import reviewed_chart as rc
from gitopsbot.core.planning.plan import Plan, make_plan
from gitopsbot.core.planning.render import plan_to_json, render_markdown
from gitopsbot.core.policy import Decision, Outcome
from gitopsbot.core.records import journal as journal_mod
from gitopsbot.core.records.journal import Journal, OperationKind, OperationStatus
from gitopsbot.fleetrepo import load_cluster
from tests.core.plan_builders import ROOT

EXAMPLE = ROOT / "examples" / "fleet"
CHARTS = ROOT / "examples" / "charts" / "repo"
A = "sha256:" + "a" * 64
B = "sha256:" + "b" * 64
M1 = "sha256:" + "1" * 64
M2 = "sha256:" + "2" * 64
SOURCE = "https://charts.example/tensor-fusion-1.8.7.tgz"

RENDERED = """\
# Source: tensor-fusion/templates/secret.yaml
apiVersion: v1
kind: Secret
metadata:
  name: agent
  namespace: tf
data:
  token: c2VjcmV0LW9uZQ==
---
# Source: tensor-fusion/templates/cm.yaml
apiVersion: v1
kind: ConfigMap
metadata: {name: settings, namespace: tf}
data: {mode: "fast", level: "3"}
"""


def digests(archive: str = A, manifests: str = M1, pinned: str = "") -> rc.ChartDigests:
    return rc.ChartDigests("tensor-fusion", "1.8.7", SOURCE, archive, manifests, pinned=pinned)


def record(d: rc.ChartDigests, key: str = "k1") -> rc.Reviewed:
    return rc.Reviewed("staging", key, d, planned_at="f" * 40, request=7)


# -- the rendered manifests' digest -----------------------------------------------------------


def test_a_secrets_data_is_not_in_the_manifests_digest_but_its_keys_are() -> None:
    other_value = RENDERED.replace("c2VjcmV0LW9uZQ==", "b3RoZXItc2VjcmV0")
    other_key = RENDERED.replace("  token:", "  password:")
    assert rc.manifests_digest(RENDERED) == rc.manifests_digest(other_value)
    assert rc.manifests_digest(RENDERED) != rc.manifests_digest(other_key)


def test_order_formatting_and_comments_do_not_count_content_does() -> None:
    first, second = RENDERED.split("---\n")
    reordered = second + "---\n" + first.replace("# Source: tensor-fusion/templates/secret", "#")
    assert rc.manifests_digest(RENDERED) == rc.manifests_digest(reordered)
    changed = RENDERED.replace('mode: "fast"', 'mode: "slow"')
    assert rc.manifests_digest(RENDERED) != rc.manifests_digest(changed)
    assert rc.manifests_digest(RENDERED).startswith("sha256:")


def test_a_stream_that_does_not_parse_is_a_value_error() -> None:
    with pytest.raises(ValueError):
        rc.manifests_digest("kind: [unclosed\n")


def test_the_files_key_follows_the_rendering_files_only() -> None:
    files = {"release.yaml": b"chart: x\n", "values.yaml": b"a: 1\n", "credentials.yaml": None}
    assert rc.files_key(files) == rc.files_key({**files, "rollout.yaml": b"paused: true\n"})
    assert rc.files_key(files) != rc.files_key({**files, "values.yaml": b"a: 2\n"})
    assert rc.files_key(files) != rc.files_key({**files, "credentials.yaml": b""})


# -- the comparison at apply --------------------------------------------------------------


def test_a_republished_archive_is_blocked_with_both_digests_and_the_source() -> None:
    found = rc.check(fetched=digests(archive=B), planned=record(digests()), exact=True)
    assert found.failure.startswith("blocked: chart tensor-fusion 1.8.7 from " + SOURCE)
    assert A in found.failure and B in found.failure
    assert "re-published" in found.failure and "pull request #7" in found.failure


def test_manifests_that_differ_from_the_plans_for_the_same_files_are_blocked() -> None:
    found = rc.check(fetched=digests(manifests=M2), planned=record(digests()), exact=True)
    assert M1 in found.failure and M2 in found.failure and "rendered manifests" in found.failure


def test_the_same_archive_and_manifests_go_on_and_say_what_was_compared() -> None:
    found = rc.check(fetched=digests(), planned=record(digests()), exact=True)
    assert found.failure == ""
    assert found.note == f"chart archive {A}: archive and rendered manifests as in the plan of " + (
        "f" * 12 + " (pull request #7)"
    )


def test_files_no_plan_saw_compare_the_archive_only() -> None:
    # A push straight to main after a plan of the same version with other values: the
    # manifests differ by the values, which is not a re-published chart.
    ok = rc.check(fetched=digests(manifests=M2), planned=record(digests()), exact=False)
    assert ok.failure == "" and "archive as in" in ok.note
    bad = rc.check(fetched=digests(archive=B), planned=record(digests()), exact=False)
    assert A in bad.failure and B in bad.failure


def test_without_any_plan_the_operation_goes_on_and_says_so() -> None:
    found = rc.check(fetched=digests(), planned=None, exact=False)
    assert found.failure == "" and found.note == f"chart archive {A}: no plan recorded for it"


def test_a_pinned_digest_is_enforced_plan_or_no_plan() -> None:
    for planned in (None, record(digests(archive=B))):
        found = rc.check(fetched=digests(archive=B, pinned=A), planned=planned, exact=True)
        assert "does not match chart.digest" in found.failure
        assert A in found.failure and B in found.failure and SOURCE in found.failure
    ok = rc.check(fetched=digests(pinned=A), planned=None, exact=False)
    assert ok.failure == "" and "(matches chart.digest)" in ok.note


def test_among_other_files_plans_the_one_that_saw_the_fetched_archive_is_taken() -> None:
    older = record(digests(archive=B), key="k0")
    newer = record(digests(archive=A), key="k9")
    other_version = rc.Reviewed("staging", "k5", rc.ChartDigests("tensor-fusion", "1.8.0", "", A))
    assert rc.for_version([older, newer, other_version], digests()) == newer
    assert rc.for_version([older], digests()) == older
    assert rc.for_version([other_version], digests()) is None


def test_a_record_reads_back_as_written_and_a_bad_one_is_a_value_error() -> None:
    r = record(digests(pinned=A))
    assert rc.loads(r.dumps()) == r
    for bad in ("[]", "{}", "not json", '{"cluster": "x"}'):
        with pytest.raises(ValueError):
            rc.loads(bad)


def test_the_journal_keeps_the_admitted_archive_and_old_journals_keep_their_bytes() -> None:
    j = Journal("op", OperationKind.UPGRADE, "staging", "a" * 40, datetime(2026, 1, 1, tzinfo=UTC))
    assert "chart_archive" not in journal_mod.dumps(j)
    assert journal_mod.loads(journal_mod.dumps(replace(j, chart_archive=A))).chart_archive == A


# -- chart.digest in the plan ---------------------------------------------------------------


@pytest.fixture
def staging(tmp_path: Path) -> Path:
    root = tmp_path / "fleet"
    shutil.copytree(EXAMPLE, root)
    return root


def _pin(root: Path, digest: str) -> int:
    release = root / "clusters" / "staging" / "release.yaml"
    lines = release.read_text().splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("  version: "))
    lines.insert(at + 1, f"  digest: {digest}")
    release.write_text("\n".join(lines) + "\n")
    return at + 2


def _plan(root: Path) -> tuple[Plan, str]:
    spec = load_cluster(DirectoryTree(root), "staging")
    charts = LocalChartSource([CHARTS])
    target = charts.chart("", "tensor-fusion", spec.release.version)
    plan = make_plan(
        deployed=None,
        desired=spec,
        target_chart=target,
        deployed_chart=None,
        index=charts.index(""),
        chart_source=str(CHARTS),
    )
    return plan, rc.archive_digest(target.digest)


def test_a_pin_that_does_not_match_the_archive_is_a_located_deny_in_the_plan(
    staging: Path,
) -> None:
    line = _pin(staging, B)
    plan, archive = _plan(staging)
    deny = [v for v in plan.verdicts if v.rule_id == rc.PIN_RULE]
    assert len(deny) == 1 and deny[0].outcome is Outcome.DENIED
    assert deny[0].location is not None
    assert (deny[0].location.file, deny[0].location.line) == (
        "clusters/staging/release.yaml",
        line,
    )
    assert B in deny[0].message and archive in deny[0].message and str(CHARTS) in deny[0].message
    assert plan.decision is Decision.DENIED


def test_a_pin_that_matches_is_no_verdict(staging: Path) -> None:
    archive = rc.archive_digest(
        LocalChartSource([CHARTS]).chart("", "tensor-fusion", "1.8.7").digest
    )
    _pin(staging, archive)
    plan, _ = _plan(staging)
    assert not [v for v in plan.verdicts if v.rule_id == rc.PIN_RULE]


def test_the_plan_shows_the_digests_and_where_the_chart_came_from(staging: Path) -> None:
    plan, _ = _plan(staging)
    shown = replace(plan, chart_digests=digests(pinned=A))
    text = render_markdown(shown)
    assert f"- chart archive: `{A}` (tensor-fusion 1.8.7 from {SOURCE})" in text
    assert f"- rendered manifests: `{M1}` (Secrets' data excluded)" in text
    assert f"- pinned by chart.digest: `{A}` (matches the archive)" in text
    assert plan_to_json(shown)["chart_digests"]["archive"] == A
    assert "chart_digests" not in plan_to_json(plan)


def test_a_change_blocked_for_a_republished_chart_is_pending_not_drift() -> None:
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    applied = Journal(
        "op-a", OperationKind.UPGRADE, "staging", "a" * 40, t0, status=OperationStatus.SUCCEEDED
    )
    failure = rc.check(fetched=digests(archive=B), planned=record(digests()), exact=True).failure
    blocked = Journal(
        "op-b",
        OperationKind.UPGRADE,
        "staging",
        "b" * 40,
        t0 + timedelta(hours=1),
        status=OperationStatus.BLOCKED,
        failure=failure,
    )
    base = drift_baseline.of([blocked, applied])
    assert (base.applied, base.held) == (applied, blocked)
    assert base.pending_why() == f"operation op-b {failure}"  # both digests, never drift
