"""helm killed mid-upgrade on the real server (issue 16 part 5c), helm 3 and helm 4.

A SIGKILLed helm records nothing more: the release's latest revision stays
``pending-upgrade`` in helm's Secret storage, and the next ``helm upgrade`` is refused
("another operation is in progress"). That is the state the bot's recovery expects
(``bot/steps/helm_upgrade.py settle_pending``): the resumed helm-upgrade step sees its own
pending revision with no helm alive, marks it ``failed`` through
``KubeCluster.mark_helm_release_failed`` and upgrades again; the next operation's upgrade then
works too. All as the bot's ServiceAccount with deploy/rbac/rules.yaml.

The bot's helm runs without ``--wait``; the killed helm here is the same call (same helm
home, description and chart) with ``wait=True``, so that it is certainly inside its upgrade
when the kill lands: it has written its pending revision and applied the chart, and waits
for a controller that never becomes ready (no kubelet). helm's wait lists and watches pods
and ReplicaSets, which the bot's rules do not grant (the bot never waits with helm), so that
helm runs with the admin's kubeconfig; the recovery runs as the ServiceAccount. The other
moment, ``written``, kills helm as soon as the pending revision exists, before or while it
applies the chart's objects. (Without ``--wait`` helm 4 finishes the whole upgrade faster
than a poll sees the pending revision: the kill then lands after it recorded ``deployed``.)
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from gitopsbot.adapters.secrets import SecretResolver
from gitopsbot.bot.steps.executor import Executor
from gitopsbot.core.charts.observed import HelmReleaseStatus
from gitopsbot.core.operations import operation
from gitopsbot.core.records.journal import OperationKind, StepState
from gitopsbot.errors import GitOpsBotError
from gitopsbot.ports.helm import ChartRef, UpgradeRequest
from gitopsbot.sandbox.chartrepo import ChartRepo
from tests.realkube import tf_support as tfs

pytestmark = [pytest.mark.realkube, pytest.mark.slow, pytest.mark.timeout(300)]

T0 = datetime(2026, 12, 3, tzinfo=UTC)


@pytest.fixture
def bot(
    control_plane: Any,
    realkube_namespace: str,
    binaries: dict[str, Path],
    tensor_fusion: Path,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> Iterator[tfs.Bot]:
    with tfs.bot_as_service_account(
        control_plane, realkube_namespace, binaries, tmp_path, helm=request.param
    ) as found:
        assert all(r.ok for r in found.kubectl.apply_crds(tfs.real_crds(tensor_fusion)))
        try:
            yield found
        finally:
            tfs.delete_cluster_objects(control_plane, f"tfc-{realkube_namespace}")


def _storage(plane: Any, ns: str) -> list[tuple[int, str]]:
    """(revision, status label) of the release's Secrets in helm's storage, by revision."""
    items = plane.request(
        "GET", f"/api/v1/namespaces/{ns}/secrets?labelSelector=owner%3Dhelm,name%3D{tfs.RELEASE}"
    )["items"]
    return sorted((int(s["metadata"]["labels"]["version"]), s["metadata"]["labels"]["status"])
                  for s in items)  # fmt: skip


def _helm_pids(home: Path) -> list[int]:
    pids = []
    for record in (home / "run").glob("helm-*.json"):
        try:
            pids.append(int(json.loads(record.read_text())["pid"]))
        except (OSError, ValueError, KeyError):
            continue  # being written or removed
    return pids


def _wait(what: str, condition: Callable[[], object], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


@pytest.mark.parametrize("moment", ["written", "waiting"])
@pytest.mark.parametrize("bot", ["helm3", "helm4"], indirect=True)
def test_a_killed_helm_leaves_pending_upgrade_and_the_bot_recovers(
    bot: tfs.Bot, moment: str, control_plane: Any, tmp_path: Path
) -> None:
    ns = bot.namespace
    with ChartRepo(tfs.CHART_REPO) as repo:
        old = tfs.fleet_spec(tmp_path / "f0", namespace=ns, repo=repo, tfc=f"tfc-{ns}",
                             version="1.8.0")  # fmt: skip
        spec = tfs.fleet_spec(tmp_path / "f1", namespace=ns, repo=repo, tfc=f"tfc-{ns}")
        ex = Executor(cluster=bot.kube, helm=bot.helm, secrets=SecretResolver(bot.kube))

        def op(sha: str) -> Any:
            return operation.new_operation(kind=OperationKind.UPGRADE, cluster=tfs.CLUSTER,
                                           desired_sha=sha * 40, created_at=T0,
                                           policy=spec.rollout)  # fmt: skip

        first = op("a")
        out = ex.run(first.step("helm-upgrade"), first, old, now=datetime.now(UTC))
        assert out.state is StepState.SUCCEEDED, out.detail  # revision 1, chart 1.8.0

        # The step starts (recorded in Git before helm runs), then its helm is killed.
        journal = op("b")
        step = replace(journal.step("helm-upgrade"), state=StepState.RUNNING,
                       started_at=datetime.now(UTC))  # fmt: skip
        values = dict(spec.values)
        errors: list[GitOpsBotError] = []

        admin = control_plane.write_kubeconfig(tmp_path / "admin.kubeconfig")
        killed = tfs.RealCrdsHelm(
            bot.helm.binary, home=bot.helm.home, kubeconfig=admin, retry_delays=()
        )

        def upgrade() -> None:
            try:
                killed.upgrade(
                    UpgradeRequest(
                        release=tfs.RELEASE,
                        namespace=ns,
                        chart=ChartRef(name="tensor-fusion", repo_url=repo.url),
                        version="1.8.7",
                        values=values,
                        description=operation.helm_description(journal.op_id),
                        post_render_policy=spec.rollout,
                        wait=True,  # helm stays inside its upgrade until it is killed
                        timeout_seconds=600,
                    )
                )
            except GitOpsBotError as e:  # the kill: helm exits -9
                errors.append(e)

        runner = threading.Thread(target=upgrade)
        runner.start()
        try:
            _wait(
                "the pending revision",
                lambda: (2, "pending-upgrade") in _storage(control_plane, ns),
            )
            if moment == "waiting":
                # helm applied the chart (the Deployment has 1.8.7's labels) and now waits.
                _wait(
                    "helm to apply the chart",
                    lambda: _chart_label(control_plane, ns) == "tensor-fusion-1.8.7",
                )
                time.sleep(1.0)
            pids = _helm_pids(bot.helm.home)
            assert len(pids) == 1, pids
            os.kill(pids[0], signal.SIGKILL)
        finally:
            runner.join(60)
        assert errors, "helm finished before it was killed"

        # What the kill left: helm's storage says pending-upgrade, and real helm refuses.
        assert _storage(control_plane, ns) == [(1, "deployed"), (2, "pending-upgrade")]
        latest = bot.helm.status(tfs.RELEASE, ns)
        assert latest is not None and latest.status is HelmReleaseStatus.PENDING_UPGRADE
        refused = subprocess.run(
            [bot.helm.binary, "--kubeconfig", str(bot.kubeconfig), "upgrade", tfs.RELEASE,
             str(tfs.EXAMPLE_CHART), "-n", ns, "--reuse-values"],
            capture_output=True, text=True, env={"PATH": os.environ["PATH"],
                                                  "HOME": str(tmp_path / "person")},
        )  # fmt: skip
        assert refused.returncode != 0
        assert "another operation (install/upgrade/rollback) is in progress" in refused.stderr

        # The resumed step: its own revision, no helm alive → marked failed, upgraded again.
        out = ex.run(step, journal, spec, now=datetime.now(UTC))
        assert out.state is StepState.SUCCEEDED, out.detail
        assert "recovered release" in out.detail and "marked failed" in out.detail, out.detail
        assert _storage(control_plane, ns) == [(1, "superseded"), (2, "failed"), (3, "deployed")]
        history = bot.helm.history(tfs.RELEASE, ns)
        assert "left pending by a helm that died with the bot" in history[1].description
        assert history[2].description == operation.helm_description(journal.op_id)

        # The next operation's upgrade works as on any release.
        nxt = op("c")
        out = ex.run(nxt.step("helm-upgrade"), nxt, old, now=datetime.now(UTC))
        assert out.state is StepState.SUCCEEDED, out.detail
        assert _storage(control_plane, ns)[-1] == (4, "deployed")


def _chart_label(plane: Any, ns: str) -> str:
    try:
        deployment = plane.request(
            "GET", f"/apis/apps/v1/namespaces/{ns}/deployments/tf-controller"
        )
    except OSError:
        return ""
    return str(deployment["metadata"]["labels"].get("helm.sh/chart", ""))
