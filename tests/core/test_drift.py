"""core.drift: Git's desired state against a cluster snapshot, secrets by digest only."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime

from gitopsbot.core.charts.postrender import rolling_update_policy
from gitopsbot.core.drift import report as drift
from gitopsbot.core.fleet.model import PoolPolicy
from gitopsbot.core.operations.manual_revision import ManualRevision

CANARY = "canary-s3cr3t-value-0xDEADBEEF"
POLICY = rolling_update_policy(
    PoolPolicy("training", batch_percentage=25, batch_interval_seconds=60)
)


def _desired(**kw: object) -> drift.DesiredState:
    base = drift.DesiredState(
        chart_version="1.8.7",
        values={"controller": {"replicas": 1}, "agent": {"enrollToken": ""}},
        secret_digests={"agent.enrollToken": drift.secret_digest(CANARY)},
        crd_digest="sha256:crds",
        pool_policies={"training": POLICY},
        images={"hypervisor": "hv:1", "controller": "ctl:1.8.7"},
    )
    return replace(base, **kw)  # type: ignore[arg-type]


def _observed(values: dict[str, object] | None = None, **kw: object) -> drift.ObservedState:
    raw = (
        values
        if values is not None
        else {"controller": {"replicas": 1}, "agent": {"enrollToken": CANARY}}
    )
    base = drift.ObservedState(
        chart_version="1.8.7",
        revision=3,
        values=drift.observed_values(raw),
        crd_digest="sha256:crds",
        tfc_policies={"training": dict(POLICY)},
        gpupool_policies={"training": dict(POLICY)},
        gpupool_names={"training": "tensor-fusion-training"},
        pool_images={"training": {"hypervisor": "hv:1"}},
        controller_image="ctl:1.8.7",
    )
    return replace(base, **kw)  # type: ignore[arg-type]


def _everything(report: drift.DriftReport) -> str:
    return json.dumps(report.as_json()) + "\n".join(report.lines()) + repr(report)


def test_no_drift() -> None:
    report = drift.compare("staging", _desired(), _observed())
    assert not report.drifted
    assert report.summary() == "staging: no drift"


def test_a_value_set_by_hand_is_drift_with_what_git_would_write() -> None:
    observed = _observed({"controller": {"replicas": 3}, "agent": {"enrollToken": CANARY}})
    (item,) = drift.compare("staging", _desired(), observed).items
    assert (item.what, item.where, item.desired, item.observed) == (
        "values",
        "controller.replicas",
        "1",
        "3",
    )
    assert (item.git_file, item.git_path, item.value) == ("values.yaml", "controller.replicas", 3)


def test_a_removed_value_is_drift() -> None:
    observed = _observed({"agent": {"enrollToken": CANARY}})
    (item,) = drift.compare("staging", _desired(), observed).items
    assert item.removed and item.where == "controller"


def test_secret_compared_by_digest_and_never_shown() -> None:
    rotated = _observed({"controller": {"replicas": 1}, "agent": {"enrollToken": CANARY + "x"}})
    report = drift.compare("staging", _desired(), rotated)
    (item,) = report.items
    assert (item.what, item.where, item.observed) == (
        "secret",
        "agent.enrollToken",
        "differs (digest)",
    )
    assert item.value is None
    text = _everything(report)
    assert CANARY not in text and "sha256" not in text


def test_observed_values_hold_no_secret_material() -> None:
    seen = drift.observed_values({"db": {"password": CANARY}, "x": "ghp_" + "a" * 36, "y": 1})
    assert CANARY not in repr(seen) and "ghp_" not in repr(seen)
    assert set(seen.secret_digests) == {"db.password", "x"}


def test_a_secret_added_by_hand_is_drift_unless_unresolved() -> None:
    observed = _observed(
        {
            "controller": {"replicas": 1},
            "agent": {"enrollToken": CANARY},
            "db": {"password": CANARY},
        }
    )
    report = drift.compare("staging", _desired(), observed)
    assert [(i.what, i.where, i.observed) for i in report.items] == [
        ("secret", "db.password", "set (digest)")
    ]
    unresolved = _desired(secret_digests={}, unresolved_secrets=("agent.enrollToken",))
    report = drift.compare("staging", unresolved, _observed())
    assert not report.drifted
    assert report.unchecked == ("secret agent.enrollToken: its credential could not be resolved",)


def test_chart_version_and_manual_revision() -> None:
    manual = ManualRevision(4, "1.8.0", "Rollback to 2", datetime(2026, 1, 1, tzinfo=UTC))
    report = drift.compare("staging", _desired(), _observed(chart_version="1.8.0", manual=manual))
    what = {i.what: i for i in report.items}
    assert what["chart"].git_file == "release.yaml" and what["chart"].value == "1.8.0"
    assert "was made outside the bot" in what["revision"].observed


def test_not_installed() -> None:
    (item,) = drift.compare("staging", _desired(), _observed(chart_version="")).items
    assert item.observed == "not installed"


def test_crds_compared_only_when_the_bot_recorded_a_digest() -> None:
    report = drift.compare("staging", _desired(), _observed(crd_digest="sha256:other"))
    assert [i.what for i in report.items] == ["crds"]
    report = drift.compare("staging", _desired(crd_digest=""), _observed(crd_digest="sha256:other"))
    assert not report.drifted and report.unchecked


def test_gpupool_edited_by_hand() -> None:
    edited = {**POLICY, "batchPercentage": 80, "autoUpdateHypervisor": True}
    observed = _observed(gpupool_policies={"training": edited})
    items = drift.compare("staging", _desired(), observed).items
    assert {(i.where, i.observed) for i in items} == {
        ("GPUPool tensor-fusion-training: batchPercentage", "80"),
        ("GPUPool tensor-fusion-training: autoUpdateHypervisor", "true"),
    }
    batch = next(i for i in items if i.where.endswith("batchPercentage"))
    assert (batch.git_file, batch.git_path, batch.value) == (
        "rollout.yaml",
        "pools.training.batchPercentage",
        80,
    )


def test_switches_open_during_an_operation_are_not_drift() -> None:
    opened = {**POLICY, "autoUpdateHypervisor": True}
    observed = _observed(tfc_policies={"training": opened}, operation_active=True)
    assert not drift.compare("staging", _desired(), observed).drifted


def test_the_batch_and_interval_pinned_during_an_operation_are_not_drift() -> None:
    # issue 28 item 7: with a budget the bot opens at the batch it allows and pins
    # batchInterval to at least 10 s; both are its own, never drift
    pinned = {**POLICY, "autoUpdateHypervisor": True, "batchPercentage": 5, "batchInterval": "10s"}
    observed = _observed(tfc_policies={"training": pinned}, operation_active=True)
    assert not drift.compare("staging", _desired(), observed).drifted
    # without an operation the same values are drift (a person's edit)
    after = _observed(tfc_policies={"training": {**pinned, "autoUpdateHypervisor": False}})
    found = {i.where.rsplit(": ", 1)[1] for i in drift.compare("staging", _desired(), after).items}
    assert found == {"batchPercentage", "batchInterval"}


def test_missing_pool_and_images() -> None:
    observed = _observed(
        tfc_policies={}, pool_images={"training": {"hypervisor": "hv:2"}}, controller_image="ctl:x"
    )
    items = drift.compare("staging", _desired(), observed).items
    assert [i.what for i in items] == ["pool-policy", "image", "image"]


def test_digest_changes_with_the_drift() -> None:
    a = drift.compare("s", _desired(), _observed(chart_version="1.8.0"))
    b = drift.compare("s", _desired(), _observed(chart_version="1.8.1"))
    assert a.digest() != b.digest()
    assert a.digest() == drift.compare("s", _desired(), _observed(chart_version="1.8.0")).digest()


def test_empty_values_on_either_side() -> None:
    assert drift.observed_values({}).secret_digests == {}
    report = drift.compare("s", _desired(values={}, secret_digests={}), _observed({}))
    assert not report.drifted
    (item,) = drift.compare("s", _desired(secret_digests={}), _observed({})).items
    assert item.removed and item.where == "controller"
