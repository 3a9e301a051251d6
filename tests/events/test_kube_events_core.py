"""The pure mapping of a happening to an Event (core/notices/kube_events.py), and docs/events.md
listing every reason with its type."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path

import pytest

from gitopsbot.core.notices import kube_events as ke
from gitopsbot.core.notices.happenings import Happening, HappeningKind
from gitopsbot.core.records.journal import OperationKind
from tests.core.plan_builders import cluster, desired_values

DOC = Path(__file__).resolve().parents[2] / "docs" / "events.md"
SPEC = cluster(values=desired_values(cluster={"name": "gpu-eu"}))


def happening(
    kind: HappeningKind, op: OperationKind = OperationKind.UPGRADE, **kw: object
) -> Happening:
    return Happening(kind, SPEC.name, "op-1", op, "a" * 40, **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize("kind", list(HappeningKind))
def test_every_happening_is_on_the_tfc_and_a_pools_also_on_its_gpupool(
    kind: HappeningKind,
) -> None:
    plain = ke.regarding(happening(kind), SPEC)
    assert [(r.kind, r.name, r.namespace) for r in plain] == [("TensorFusionCluster", "gpu-eu", "")]
    pooled = ke.regarding(happening(kind, step="pool/a/hypervisor", pool="a"), SPEC)
    assert [(r.kind, r.name) for r in pooled] == [
        ("TensorFusionCluster", "gpu-eu"), ("GPUPool", "gpu-eu-a")]  # fmt: skip
    assert all(r.event_namespace == "default" for r in pooled)


def test_reason_type_and_action() -> None:
    halted = ke.event_of(happening(HappeningKind.POOL_HALTED, pool="a", progress=40))
    assert (halted.reason, halted.type, halted.action) == ("PoolHalted", "Warning", "Upgrade")
    rollback = ke.event_of(happening(HappeningKind.STARTED, OperationKind.ROLLBACK))
    assert (rollback.reason, rollback.type, rollback.action) == ("Started", "Warning", "Rollback")
    restart = ke.event_of(happening(HappeningKind.SUCCEEDED, OperationKind.CONTROLLER_RESTART))
    assert (restart.type, restart.action) == ("Normal", "ControllerRestart")


def test_the_body_is_what_the_api_server_validates() -> None:
    ref = ke.ObjectRef("tensor-fusion.ai/v1", "GPUPool", "gpu-eu-a", uid="u-1")
    at = datetime(2026, 12, 3, 11, 52, 7, 5, tzinfo=UTC)
    body = ke.event_body(ref, ke.event_of(happening(HappeningKind.QUEUED)),
                         name=ke.event_name(ref, ke.nanos_of(at)), at=at,
                         controller=ke.REPORTING_CONTROLLER, instance="r" * 300)  # fmt: skip
    assert body["metadata"] == {"name": f"gpu-eu-a.{1796298727000005000:x}", "namespace": "default"}
    assert body["eventTime"] == "2026-12-03T11:52:07.000005Z"
    assert body["regarding"] == {"apiVersion": "tensor-fusion.ai/v1", "kind": "GPUPool",
                                 "name": "gpu-eu-a", "uid": "u-1"}  # fmt: skip
    assert len(body["reportingInstance"]) == 128
    assert ke.series_patch(2, at) == {
        "series": {"count": 2, "lastObservedTime": "2026-12-03T11:52:07.000005Z"}}  # fmt: skip


def test_the_docs_list_every_reason_with_its_type() -> None:
    text = DOC.read_text()
    rows = dict(re.findall(r"^\| `(\w+)` \| (Normal|Warning)", text, re.M))
    for kind in HappeningKind:
        h = happening(kind)
        assert h.reason in rows, f"docs/events.md does not list {h.reason}"
        assert rows[h.reason] == ("Warning" if h.warning else "Normal"), h.reason
