"""A bot process reduced to its helm step, for the kill tests (test_helm_step_kill.py).

    python -m tests.executor.adapters.helm_step_child KUBECONFIG HELM HOME FLEET STARTED

Runs the helm-upgrade step of the operation ``sandbox-aaaaaaaaaaaa`` once, with the real
executor, HelmCli and KubeCluster, and a secret source that hands out the canary; prints the
outcome as JSON. The test kills it with SIGKILL at several moments.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

from gitopsbot.adapters.helm import HelmCli
from gitopsbot.adapters.kube import KubeCluster
from gitopsbot.adapters.localfiles import DirectoryTree
from gitopsbot.bot.steps.executor import Executor
from gitopsbot.core.fleet.model import ClusterSpec, SecretRef
from gitopsbot.core.operations import operation
from gitopsbot.core.records.journal import Journal, OperationKind, Step, StepState
from gitopsbot.fleetrepo import load_cluster

CLUSTER = "sandbox"
CANARY = "canary-ZXq81-never-on-disk"
T0 = datetime(2026, 12, 3, tzinfo=UTC)


class CanarySecrets:
    def resolve_all(self, refs: Sequence[SecretRef]) -> dict[str, str]:
        return {ref.values_path: CANARY for ref in refs}


def operation_of(spec: ClusterSpec, started: datetime) -> tuple[Journal, Step]:
    journal = operation.new_operation(
        kind=OperationKind.UPGRADE,
        cluster=CLUSTER,
        desired_sha="a" * 40,
        created_at=T0,
        policy=spec.rollout,
    )
    step = replace(journal.step("helm-upgrade"), state=StepState.RUNNING, started_at=started)
    return journal, step


def executor(kubeconfig: str, helm: str, home: str) -> Executor:
    cluster = KubeCluster.from_kubeconfig(kubeconfig)
    cli = HelmCli(helm, home=Path(home), kubeconfig=kubeconfig)
    return Executor(cluster=cluster, helm=cli, secrets=CanarySecrets())


def main(argv: Sequence[str]) -> int:
    kubeconfig, helm, home, fleet, started = argv
    spec = load_cluster(DirectoryTree(Path(fleet)), CLUSTER)
    journal, step = operation_of(spec, datetime.fromisoformat(started))
    out = executor(kubeconfig, helm, home).run(step, journal, spec, now=datetime.now(UTC))
    print(json.dumps({"state": str(out.state), "detail": out.detail}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
