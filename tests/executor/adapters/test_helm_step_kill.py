"""kill -9 of the bot inside the helm step, with real helm 3 and helm 4 against the emulator
(issue 10 part 2): whatever the moment, a fresh bot resumes the step and the change ends
deployed once, with no revert and no rollback; and no secret is left on disk (part 5).

The "bot" is ``helm_step_child``: a process that runs the real executor's helm step. The
emulator is slowed (latency fault) so that helm is mid-upgrade when the kill lands. Moments:

- ``at-start``: as soon as helm's run record appears (helm just started);
- ``mid``: half a second later, while helm applies the chart;
- ``helm-too``: once helm wrote its pending revision, helm itself is SIGKILLed as well, so
  nothing records the cancel and the release is left ``pending-upgrade`` (the case Helm's
  guidance calls stuck);
- ``after``: once the child has printed its outcome (dead before recording it in Git).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from gitopsbot.adapters.helm import HelmCli
from gitopsbot.adapters.localfiles import DirectoryTree
from gitopsbot.core.charts.observed import HelmReleaseStatus
from gitopsbot.core.records.journal import StepState
from gitopsbot.fleetrepo import load_cluster
from gitopsbot.ports.helm import ChartRef, UpgradeRequest
from gitopsbot.sandbox.apiserver import ApiServer
from gitopsbot.sandbox.chartrepo import ChartRepo
from gitopsbot.sandbox.story_fleet import StoryFleet, story_fleet_files
from tests.executor.adapters import helm_step_child as child

ROOT = Path(__file__).resolve().parents[3]
REPO = ROOT / "examples" / "charts" / "repo"
RELEASE, NS = "tf", "default"
LANDED = (HelmReleaseStatus.DEPLOYED, HelmReleaseStatus.SUPERSEDED)

# slow: each test runs the command line, a Git remote or real helm in subprocesses (seconds)
pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


@pytest.fixture
def chart_repo() -> object:
    with ChartRepo(REPO) as repo:
        yield repo


def write_fleet(root: Path, repo_url: str) -> Path:
    fleet = StoryFleet(
        chart_repo_url=repo_url,
        kube_context="sandbox",
        forge_api_url="http://127.0.0.1:9",
        chart_version="1.8.7",
        namespace=NS,
        release=RELEASE,
    )
    for name, text in story_fleet_files(fleet).items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    (root / "clusters" / child.CLUSTER / "credentials.yaml").write_text(
        "secrets:\n  agent.enrollToken:\n    env: GITOPSBOT_TEST_ENROLL_TOKEN\n"
    )
    return root


def run_records(home: Path) -> list[dict[str, object]]:
    found = []
    for path in (home / "run").glob("helm-*.json"):
        try:
            found.append(json.loads(path.read_text()))
        except (OSError, ValueError):
            continue  # being written or removed
    return found


def wait(predicate: object, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def grep(root: Path, needle: bytes) -> list[Path]:
    hits = []
    for path in root.rglob("*"):
        try:
            if path.is_file() and not path.is_symlink() and needle in path.read_bytes():
                hits.append(path)
        except OSError:
            continue
    return hits


@pytest.mark.parametrize("moment", ["at-start", "mid", "helm-too", "after"])
@pytest.mark.parametrize("major", ["helm3", "helm4"])
def test_kill_9_inside_the_helm_step_ends_deployed_once(
    major: str,
    moment: str,
    binaries: dict[str, Path],
    chart_repo: ChartRepo,
    tmp_path: Path,
) -> None:
    api = ApiServer()
    api.start()
    try:
        kubeconfig = api.write_kubeconfig(tmp_path / "kubeconfig")
        fleet = write_fleet(tmp_path / "fleet", chart_repo.url)
        spec = load_cluster(DirectoryTree(fleet), child.CLUSTER)
        home = tmp_path / "cache" / "clusters" / child.CLUSTER / "helm"
        helm = str(binaries[major])
        by_hand = HelmCli(helm, home=tmp_path / "person", kubeconfig=kubeconfig)
        by_hand.upgrade(
            UpgradeRequest(
                release=RELEASE,
                namespace=NS,
                chart=ChartRef(name="tensor-fusion", repo_url=chart_repo.url),
                version="1.8.0",
                values=spec.values,
                description="installed by hand",
            )
        )
        api.faults.latency(0.05)  # helm's upgrade takes seconds: the kill lands inside it
        started = datetime.now(UTC)
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        bot = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.executor.adapters.helm_step_child",
                str(kubeconfig),
                helm,
                str(home),
                str(fleet),
                started.isoformat(),
            ],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        try:
            if moment == "after":
                assert bot.stdout is not None
                line = bot.stdout.readline()
                assert json.loads(line)["state"] == "succeeded", line
            else:
                wait(lambda: run_records(home), 60, "helm to start")
                if moment == "mid":
                    time.sleep(0.5)
                if moment == "helm-too":
                    wait(lambda: _pending(by_hand), 60, "helm to write its pending revision")
                    for record in run_records(home):
                        os.kill(int(str(record["pid"])), signal.SIGKILL)
            bot.kill()
        finally:
            bot.wait(timeout=30)
            if bot.stdout is not None:
                bot.stdout.close()
        # The helm child dies with the bot (its death signal) or was killed with it.
        wait(lambda: not [r for r in run_records(home) if _alive(r)], 30, "helm to stop")
        api.faults.clear()

        # A fresh bot (a new process would do the same: new HelmCli on the same home).
        journal, step = child.operation_of(spec, started)
        ex = child.executor(str(kubeconfig), helm, str(home))
        deadline = time.monotonic() + 120
        while True:
            out = ex.run(step, journal, spec, now=datetime.now(UTC))
            if out.state is not StepState.RUNNING:
                break
            assert time.monotonic() < deadline, out.detail
            time.sleep(0.5)
        assert out.state is StepState.SUCCEEDED, out.detail
        assert not out.blocked

        history = by_hand.history(RELEASE, NS)
        mine = f"gitopsbot op={journal.op_id} step=helm-upgrade"
        landed = [h for h in history if h.description == mine and h.status in LANDED]
        assert len(landed) == 1, history  # deployed once
        assert history[-1].status is HelmReleaseStatus.DEPLOYED
        assert history[-1].chart_version == "1.8.7"
        assert not [h for h in history if h.description.startswith("Rollback")], history
        if moment == "helm-too":
            assert "recovered" in out.detail, out.detail
        # No secret on disk: the whole cache, state and fleet directories.
        assert grep(tmp_path, child.CANARY.encode()) == []
    finally:
        api.stop()


def _pending(helm: HelmCli) -> bool:
    latest = helm.status(RELEASE, NS)
    return latest is not None and latest.status.pending


def _alive(record: dict[str, object]) -> bool:
    try:
        os.kill(int(str(record["pid"])), 0)
    except (ProcessLookupError, ValueError):
        return False
    except PermissionError:
        return True
    stat = Path(f"/proc/{record['pid']}/stat")
    try:
        return ") Z " not in stat.read_text()  # a zombie is dead
    except OSError:
        return False


@pytest.mark.parametrize("major", ["helm3", "helm4"])
def test_a_transient_409_in_upgrade_and_in_rollback_is_retried_not_a_failure(
    major: str, binaries: dict[str, Path], chart_repo: ChartRepo, tmp_path: Path
) -> None:
    """Issue 10 part 4: one 409 on the TensorFusionCluster during the bot's upgrade, and
    another during its rollback, are retried inside the step; both steps succeed."""
    from gitopsbot.core.operations import operation
    from gitopsbot.core.records.journal import OperationKind, RollbackPoint

    api = ApiServer()
    api.start()
    try:
        kubeconfig = api.write_kubeconfig(tmp_path / "kubeconfig")
        fleet = write_fleet(tmp_path / "fleet", chart_repo.url)
        spec = load_cluster(DirectoryTree(fleet), child.CLUSTER)
        helm = str(binaries[major])
        home = tmp_path / "helm"
        ex = child.executor(str(kubeconfig), helm, str(home))
        journal, step = child.operation_of(spec, datetime.now(UTC))
        first = ex.run(step, journal, spec, now=datetime.now(UTC))  # the install, rev 1
        assert first.state is StepState.SUCCEEDED, first.detail

        api.faults.error(409, path="*tensorfusionclusters*", method="PATCH", times=1)
        upgrade = operation.new_operation(
            kind=OperationKind.UPGRADE,
            cluster=child.CLUSTER,
            desired_sha="b" * 40,
            created_at=child.T0,
            policy=spec.rollout,
        )
        out = ex.run(upgrade.step("helm-upgrade"), upgrade, spec, now=datetime.now(UTC))
        assert out.state is StepState.SUCCEEDED, out.detail
        assert "after 1 retry" in out.detail, out.detail

        api.faults.error(409, path="*tensorfusionclusters*", method="PATCH", times=1)
        back = operation.new_operation(
            kind=OperationKind.ROLLBACK,
            cluster=child.CLUSTER,
            desired_sha="c" * 40,
            created_at=child.T0,
            policy=spec.rollout,
            reverts_op=upgrade.op_id,
        )
        point = RollbackPoint(helm_revision=1, chart_version="1.8.7")
        out = ex.run(back.step("rollback"), back, spec, now=datetime.now(UTC), rollback_to=point)
        assert out.state is StepState.SUCCEEDED, out.detail
        history = HelmCli(helm, home=tmp_path / "reader", kubeconfig=kubeconfig).history(
            RELEASE, NS
        )
        assert history[-1].status is HelmReleaseStatus.DEPLOYED
        assert [h.status for h in history].count(HelmReleaseStatus.FAILED) == 2  # the 409s
    finally:
        api.stop()
