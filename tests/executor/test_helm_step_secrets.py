"""The helm-upgrade step names the secrets helm's errors must mask (part of issue 11's "mask
secrets only"): the secrets it resolved from credentials.yaml, wherever they end up in the
values, go to ``Helm.upgrade`` as its request's ``secret_values``; a failed upgrade's step
detail shows the other values as they are and never a secret. Runs on FakeHelm, whose errors
mask like HelmCli's (the contract test runs both)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

from gitopsbot.bot.steps.executor import Executor
from gitopsbot.core.fleet.model import SecretRef
from gitopsbot.core.operations import operation
from gitopsbot.core.records.journal import OperationKind, StepState
from gitopsbot.errors import HelmFailed
from gitopsbot.testing import FakeCluster, FakeHelm
from tests.core.plan_builders import cluster, desired_values

TOKEN = "canary-Tk52m-agent-token"
NOW = datetime(2026, 12, 3, 9, 0, tzinfo=UTC)


class Source:
    """Resolves every reference to the canary."""

    def resolve_all(self, refs: Sequence[SecretRef]) -> dict[str, str]:
        return {ref.values_path: TOKEN for ref in refs}


def _run(helm: FakeHelm) -> tuple[StepState, str]:
    spec = cluster(values=desired_values(cluster={"name": "gpu-cluster-eu"}))
    journal = operation.new_operation(
        kind=OperationKind.UPGRADE,
        cluster=spec.name,
        desired_sha="a" * 40,
        created_at=NOW,
        policy=spec.rollout,
    )
    executor = Executor(cluster=FakeCluster(), helm=helm, secrets=Source())
    out = executor.run(journal.step("helm-upgrade"), journal, spec, now=NOW)
    return out.state, out.detail


def test_the_step_passes_the_resolved_secrets_to_helm() -> None:
    helm = FakeHelm()
    state, _ = _run(helm)
    assert state is StepState.SUCCEEDED
    assert TOKEN in helm.last_secret_values
    assert "gpu-cluster-eu" not in helm.last_secret_values  # not a secret: stays readable
    values = helm.get_values("tensor-fusion-sys", "tensor-fusion-sys")
    assert values["agent"]["enrollToken"] == TOKEN  # merged at apply time only


def test_a_failed_upgrade_reads_clearly_and_hides_the_secret() -> None:
    helm = FakeHelm()
    helm.fail(
        "upgrade",
        HelmFailed(
            'helm upgrade tensor-fusion-sys: exit 1: Error: TensorFusionCluster "gpu-cluster-eu"'
            f' is invalid: spec.token: Invalid value: "{TOKEN}"'
        ),
    )
    state, detail = _run(helm)
    assert state is StepState.FAILED
    assert '"gpu-cluster-eu" is invalid' in detail
    assert 'Invalid value: "***"' in detail
    assert TOKEN not in detail
