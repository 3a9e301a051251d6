"""Effective images (F2) and the rollout timeline arithmetic (F4)."""

from __future__ import annotations

import pytest

from gitopsbot.core.charts.chart import Chart
from gitopsbot.core.charts.images import effective_images, image_changes
from gitopsbot.core.fleet.model import Component, MaintenanceWindow
from gitopsbot.core.rollouts.timeline import (
    batch_size,
    format_duration,
    pool_timeline,
    progress_steps,
)
from tests.core.plan_builders import pool, small_chart


@pytest.mark.shared
def test_real_chart_defaults(real_charts: dict[str, Chart]) -> None:
    new = effective_images({}, real_charts["1.8.7"])
    # Only the controller follows appVersion (F2).
    assert new["controller"] == "tensorfusion/tensor-fusion-operator:2.17.0"
    assert new["hypervisor"] == "tensorfusion/tensor-fusion-hypervisor:2.15.0"
    assert new["worker"] == "tensorfusion/tensor-fusion-worker:v2.15.0"
    assert new["client"] == "tensorfusion/tensor-fusion-client:v2.15.0"
    old = effective_images({}, real_charts["1.8.0"])
    assert old["controller"].endswith(":latest")  # 1.8.0 pinned tag "latest"
    assert effective_images({"controller": {"image": {"tag": "2.16.0"}}}, real_charts["1.8.7"])[
        "controller"
    ].endswith(":2.16.0")


@pytest.mark.shared
def test_real_upgrade_with_pinned_hypervisor(real_charts: dict[str, Chart]) -> None:
    pinned = {"cluster": {"hypervisorImage": "tensorfusion/tensor-fusion-hypervisor:latest"}}
    changes = {
        i.component: i
        for i in image_changes(
            deployed_values=pinned,
            deployed_chart=real_charts["1.8.0"],
            desired_values=pinned,
            target_chart=real_charts["1.8.7"],
        )
    }
    assert changes["controller"].changed and not changes["controller"].explicit
    hv = changes["hypervisor"]
    assert not hv.changed and hv.explicit and hv.default_moved
    assert changes["worker"].changed and not changes["worker"].explicit


def test_nothing_deployed_everything_new() -> None:
    changes = image_changes(
        deployed_values=None, deployed_chart=None, desired_values={}, target_chart=small_chart()
    )
    assert all(i.before == "" and i.changed for i in changes)
    assert not any(i.default_moved for i in changes)


@pytest.mark.parametrize(
    ("pct", "total", "size", "steps"),
    [
        (20, 10, 2, 5),
        (20, 3, 1, 5),  # progress steps do not depend on the node count (F4)
        (25, 4, 1, 4),
        (30, 10, 3, 4),  # ceil(100/30) = 4
        (50, 3, 2, 2),
        (100, 7, 7, 1),
        (0, 5, 5, 1),  # out of range → 100 (controller's getBatchUpdatePolicy)
        (10, 0, 0, 10),
    ],
)
def test_batch_arithmetic(pct: int, total: int, size: int, steps: int) -> None:
    assert batch_size(pct, total) == size
    assert progress_steps(pct) == steps


def test_pool_timeline_estimate_and_window() -> None:
    p = pool(
        "train",
        nodes=10,
        batch_percentage=20,
        batch_interval_seconds=60,
        auto_update_worker=True,
        phases=(Component.HYPERVISOR, Component.WORKER),
        maintenance_window=MaintenanceWindow("0 2 * * *", 600),
        max_duration_seconds=900,
    )
    tl = pool_timeline(
        p,
        (Component.WORKER, Component.HYPERVISOR),
        readiness={Component.HYPERVISOR: 100, Component.WORKER: 50},
    )
    assert [ph.component for ph in tl.phases] == [Component.HYPERVISOR, Component.WORKER]
    # 5 batches: 5 × readiness + 4 × interval
    assert tl.phases[0].estimate_seconds == 5 * 100 + 4 * 60
    assert tl.phases[1].estimate_seconds == 5 * 50 + 4 * 60
    assert tl.estimate_seconds == 740 + 490
    assert tl.fits_window is False
    assert any("maintenance window" in n for n in tl.notes)
    assert any("maxDuration" in n for n in tl.notes)


def test_short_interval_is_three_seconds_and_canary() -> None:
    p = pool(
        "p", nodes=20, batch_percentage=50, batch_interval_seconds=1, canary_batch_percentage=5
    )
    tl = pool_timeline(p, (Component.HYPERVISOR,), readiness={Component.HYPERVISOR: 10})
    ph = tl.phases[0]
    assert ph.canary_batch_size == 1
    # canary batch + pause, then 2 batches with a 3 s minimum between steps
    assert ph.estimate_seconds == (2 * 10 + 3) + (10 + 3)
    assert tl.fits_window is None


def test_empty_pool_note() -> None:
    tl = pool_timeline(pool("p", nodes=0), (Component.HYPERVISOR,))
    assert tl.estimate_seconds == 0 and "no GPU nodes" in tl.notes[0]


@pytest.mark.parametrize(("s", "text"), [(45, "45s"), (600, "10m00s"), (3725, "1h02m05s")])
def test_format_duration(s: int, text: str) -> None:
    assert format_duration(s) == text
