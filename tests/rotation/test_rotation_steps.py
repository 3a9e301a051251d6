"""A rotation's own steps against the in-memory cluster (bot/steps/rotation.py): the vendor
Secret written twice (a repeat after a kill), an API error that echoes the value, and the
hypervisor restart looked at again before the controller recreated the deleted pods."""

from __future__ import annotations

import base64
from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from gitopsbot.bot.steps import rotation as steps
from gitopsbot.core.fleet.model import CredentialsSpec, SecretRef
from gitopsbot.core.records.journal import Step, StepKind, StepState
from gitopsbot.errors import KubeInvalid, KubeServerError
from gitopsbot.testing import FakeCluster
from tests.core.plan_builders import cluster, pool

AK = "canary-ak-77c1"
SK = "canary-sk-0e9d"
REFS = (
    SecretRef("cloudVendorCredentials.accessKey", "env", "AK"),
    SecretRef("cloudVendorCredentials.secretKey", "env", "SK"),
)
T0 = datetime(2026, 12, 5, 2, 0, tzinfo=UTC)
NS = "tensor-fusion-sys"


class Source:
    def __init__(self) -> None:
        self.calls = 0

    def resolve_all(self, refs: Sequence[SecretRef]) -> dict[str, str]:
        self.calls += 1
        known = {"cloudVendorCredentials.accessKey": AK, "cloudVendorCredentials.secretKey": SK}
        return {r.values_path: known[r.values_path] for r in refs}


def vendor_spec(refs: tuple[SecretRef, ...] = REFS) -> Any:
    spec = cluster()
    return replace(spec, credentials=CredentialsSpec(secrets=refs))


def chart_secret(fake: FakeCluster, namespace: str) -> None:
    """The Secret as the chart left it: helm's manager owns the old keys."""
    old = {"ak": base64.b64encode(b"old-ak").decode(), "sk": base64.b64encode(b"old-sk").decode()}
    fake.apply(
        {"apiVersion": "v1", "kind": "Secret",
         "metadata": {"name": "tf-cloud-vendor-credentials", "namespace": namespace},
         "type": "Opaque", "data": old},
        field_manager="helm",
    )  # fmt: skip


def test_the_vendor_secret_is_taken_over_and_a_repeat_writes_the_same() -> None:
    fake, spec = FakeCluster(), vendor_spec()
    ns = spec.release.namespace
    chart_secret(fake, ns)
    for _ in range(2):  # the second: the bot killed after the write, before it was recorded
        out = steps.vendor_secret(fake, Source(), spec)
        assert out.state is StepState.SUCCEEDED
        assert AK not in out.detail and SK not in out.detail
        assert fake.read_secret(ns, "tf-cloud-vendor-credentials", "ak") == AK
        assert fake.read_secret(ns, "tf-cloud-vendor-credentials", "sk") == SK
    stored = fake.get("v1", "Secret", ns, "tf-cloud-vendor-credentials")
    assert stored is not None
    assert stored["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"


@pytest.mark.parametrize("error", [KubeServerError, KubeInvalid])
def test_an_api_error_echoing_the_value_is_reduced_to_its_class(error: type[Exception]) -> None:
    fake, spec = FakeCluster(), vendor_spec()
    chart_secret(fake, spec.release.namespace)
    fake.fail("apply", error(f'Secret "x" is invalid: data[ak]: {AK}'))
    with pytest.raises(error) as raised:
        steps.vendor_secret(fake, Source(), spec)
    text = str(raised.value) + repr(raised.value)
    assert AK not in text and SK not in text
    assert error.__name__ in text
    assert raised.value.__cause__ is None and raised.value.__suppress_context__


def test_one_vendor_key_alone_fails_without_reading_a_secret() -> None:
    fake, source = FakeCluster(), Source()
    out = steps.vendor_secret(fake, source, vendor_spec(REFS[:1]))
    assert out.state is StepState.FAILED and "secretKey" in out.detail
    assert source.calls == 0
    assert fake.get("v1", "Secret", NS, "tf-cloud-vendor-credentials") is None


def _hypervisor_world(nodes: int) -> tuple[FakeCluster, Any]:
    spec = cluster(pools=(pool("inference", batch_percentage=50, batch_interval_seconds=0),))
    fake = FakeCluster()
    gp = "tensor-fusion-inference"
    fake.put({"apiVersion": "tensor-fusion.ai/v1", "kind": "GPUPool", "metadata": {"name": gp},
              "spec": {"componentConfig": {"hypervisor": {"enableVector": True}}}})  # fmt: skip
    for i in range(nodes):
        label = {f"tensor-fusion.ai/pool-{gp}": "true"}
        fake.put({"apiVersion": "tensor-fusion.ai/v1", "kind": "GPUNode",
                  "metadata": {"name": f"node-{i}", "labels": label}})  # fmt: skip
        fake.put({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {
                "name": f"hypervisor-node-{i}", "namespace": NS,
                "labels": {"tensor-fusion.ai/component": "hypervisor", **label},
                "creationTimestamp": (T0 - timedelta(days=1)).isoformat(),
            },
            "spec": {"nodeName": f"node-{i}"},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]},
        })  # fmt: skip
    return fake, spec


def test_a_look_again_before_the_pods_are_back_deletes_nothing_more() -> None:
    fake, spec = _hypervisor_world(4)
    assert spec.rollout.pools[0].name == "inference"
    step = Step(
        name="hypervisor-restart/inference", kind=StepKind.HYPERVISOR_RESTART,
        state=StepState.RUNNING, started_at=T0, pool="inference",
    )  # fmt: skip
    first = steps.hypervisor_restart_step(fake, step, spec, T0 + timedelta(seconds=5))
    assert first.state is StepState.RUNNING
    left = sorted(p["metadata"]["name"] for p in fake.list("v1", "Pod", NS))
    assert left == ["hypervisor-node-2", "hypervisor-node-3"]  # ceil(50% of 4), oldest names
    # The bot was killed and looks again; the controller has not recreated them yet.
    again = steps.hypervisor_restart_step(fake, step, spec, T0 + timedelta(seconds=9))
    assert again.state is StepState.RUNNING
    assert sorted(p["metadata"]["name"] for p in fake.list("v1", "Pod", NS)) == left


def test_vector_off_skips_and_touches_nothing() -> None:
    fake, spec = _hypervisor_world(2)
    gp = fake.get("tensor-fusion.ai/v1", "GPUPool", None, "tensor-fusion-inference")
    assert gp is not None
    gp["spec"]["componentConfig"]["hypervisor"]["enableVector"] = False
    fake.put(gp)
    step = Step(name="hypervisor-restart/inference", kind=StepKind.HYPERVISOR_RESTART,
                started_at=T0, pool="inference")  # fmt: skip
    out = steps.hypervisor_restart_step(fake, step, spec, T0 + timedelta(seconds=5))
    assert out.state is StepState.SKIPPED and "vector" in out.detail
    assert len(fake.list("v1", "Pod", NS)) == 2
