"""helm children die with the bot, against real helm 3 and helm 4 and the API emulator.

Covers: each helm runs as the leader of its own process group, recorded in
``<home>/run/helm-<pid>.json`` while it runs (pid, start time, description, argv; no value)
and the record goes when it ends; ``kill -9`` of a Python process in the middle of an upgrade
(slowed by the emulator's latency fault) takes its helm down within seconds (the
parent-death signal) and helm records the upgrade ``failed``, not pending; the next HelmCli on
that home removes the dead process's record and work directory; ``terminate_children`` stops
a running upgrade (helm 3 and 4 record it ``failed``) and a running rollback (helm 3 and 4
die at once: ``pending-rollback`` is left); a recorded helm still running for a dead bot (a
stand-in process whose command line carries the description, ignoring SIGTERM) is stopped
at construction, while records that do not prove the process, or belong to a live owner,
never lead to a kill; ``operation_alive`` for own children and recorded ones; a binary
that cannot be run is HelmFailed ("cannot run ...").
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from gitopsbot.adapters import helm_children as children
from gitopsbot.adapters.helm import HelmCli
from gitopsbot.core.charts.observed import HelmReleaseStatus
from gitopsbot.errors import HelmFailed, HelmStopped
from gitopsbot.ports.helm import ChartRef, RollbackRequest, UpgradeRequest
from gitopsbot.sandbox.apiserver import ApiServer
from tests import open_files
from tests.executor.adapters.test_helm_cli import (
    CANARY,
    _files_holding,
    _runs,
    _wait_for_helm,
    _wait_until,
)

Charts = Callable[[str], ChartRef]
ROOT = Path(__file__).resolve().parents[3]
DESCRIPTION = "gitopsbot op=op-7 step=helm-upgrade"


def _statuses(helm: HelmCli) -> list[tuple[int, HelmReleaseStatus]]:
    return [(h.revision, h.status) for h in helm.history("tf", "default")]


def _install(helm: HelmCli, chart: Charts) -> None:
    helm.upgrade(UpgradeRequest(
        release="tf", namespace="default", chart=chart("1.8.0"), version="1.8.0",
        values={}, description="install",
    ))  # fmt: skip


class Background(threading.Thread):
    """A call run in a thread; ``errors`` gets its exception, if any."""

    def __init__(self, call: Callable[[], Any]) -> None:
        super().__init__()
        self.call = call
        self.errors: list[BaseException] = []

    def run(self) -> None:
        try:
            self.call()
        except BaseException as e:  # noqa: BLE001 - handed to the test
            self.errors.append(e)


@pytest.fixture
def background() -> Iterator[Callable[[Callable[[], Any]], Background]]:
    started: list[Background] = []

    def run(call: Callable[[], Any]) -> Background:
        thread = Background(call)
        started.append(thread)
        thread.start()
        return thread

    yield run
    for thread in started:
        thread.join(timeout=60)


@pytest.mark.slow
def test_child_is_a_group_leader_and_recorded_while_it_runs(
    helm_cli: HelmCli, api: ApiServer, chart: Charts, background: Any
) -> None:
    _install(helm_cli, chart)
    slow = api.faults.latency(2.0, path="*/tensorfusionclusters*")
    call = background(
        lambda: helm_cli.upgrade(
            UpgradeRequest(
                release="tf",
                namespace="default",
                chart=chart("1.8.7"),
                version="1.8.7",
                values={"agent": {"enrollToken": CANARY}},
                description=DESCRIPTION,
            )
        )
    )
    pid = _wait_for_helm(helm_cli, DESCRIPTION)
    assert os.getpgid(pid) == pid  # its own process group
    assert os.getsid(pid) == pid  # and session: a terminal's Ctrl-C does not reach it
    record = json.loads((helm_cli.home / "run" / f"helm-{pid}.json").read_text())
    assert record["pid"] == pid
    assert record["start_time"] == children.start_time(pid)
    assert record["description"] == DESCRIPTION
    assert record["argv"][0] == helm_cli.binary and "--values" in record["argv"]
    assert (record["owner_pid"], record["owner_start_time"]) == (os.getpid(), children.SELF_START)
    assert CANARY not in json.dumps(record)
    assert helm_cli.operation_alive(DESCRIPTION)
    assert not helm_cli.operation_alive("gitopsbot op=other step=helm-upgrade")
    api.faults.remove(slow)
    _wait_until(lambda: not _runs(pid, helm_cli.binary))
    _wait_until(lambda: not any((helm_cli.home / "run").iterdir()))
    assert not helm_cli.operation_alive(DESCRIPTION)
    call.join(timeout=30)
    assert not call.errors


BOT = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from gitopsbot.adapters.helm import HelmCli
    from gitopsbot.core.fleet.model import PoolPolicy, RolloutPolicy
    from gitopsbot.ports.helm import ChartRef, UpgradeRequest

    binary, home, kubeconfig, chart, description, token = sys.argv[1:]
    helm = HelmCli(binary, home=Path(home), kubeconfig=kubeconfig)
    helm.upgrade(UpgradeRequest(
        release="tf", namespace="default", chart=ChartRef(path=chart), version="1.8.7",
        values={"agent": {"enrollToken": token}}, description=description,
        post_render_policy=RolloutPolicy(pools=(PoolPolicy(name="shared"),)),
    ))
    """
)


@pytest.mark.slow
def test_kill_9_of_the_bot_takes_its_helm_down(
    helm_cli: HelmCli, api: ApiServer, kubeconfig: Path, chart: Charts
) -> None:
    """A bot killed with SIGKILL cannot clean up: the parent-death signal does. helm gets
    SIGTERM, cancels the upgrade and records it ``failed`` (helm 3 and 4); the next HelmCli
    removes the dead bot's record and work directory, and stops nothing."""
    _install(helm_cli, chart)
    slow = api.faults.latency(4.0, path="*/tensorfusionclusters*")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    argv = [helm_cli.binary, str(helm_cli.home), str(kubeconfig), chart("1.8.7").path]
    bot = subprocess.Popen(
        [sys.executable, "-c", BOT, *argv, DESCRIPTION, CANARY], env=env, start_new_session=True
    )
    try:
        pid = _wait_for_helm(helm_cli, DESCRIPTION)
        _wait_until(lambda: slow.hits > 0)  # helm is applying the chart
        bot.kill()
        bot.wait(timeout=10)
        killed = time.monotonic()
        _wait_until(lambda: children.start_time(pid) is None, timeout=5)
        assert time.monotonic() - killed < 5
    finally:
        if bot.poll() is None:
            bot.kill()
            bot.wait()
    api.faults.remove(slow)
    latest = helm_cli.status("tf", "default")
    assert latest is not None
    assert latest.status is HelmReleaseStatus.FAILED, latest  # cancelled, not pending-upgrade
    assert "context canceled" in latest.description
    # The dead bot's record and work directory are still there (and hold no secret) ...
    assert (helm_cli.home / "run" / f"helm-{pid}.json").is_file()
    assert any((helm_cli.home / "work").iterdir())
    assert _files_holding(helm_cli.home, CANARY) == []
    assert not helm_cli.operation_alive(DESCRIPTION)  # recorded, but that helm is gone
    # ... until the next HelmCli on this home.
    HelmCli(helm_cli.binary, home=helm_cli.home, kubeconfig=kubeconfig)
    assert not any((helm_cli.home / "run").iterdir())
    assert not any((helm_cli.home / "work").iterdir())


@pytest.mark.slow
def test_terminate_children_stops_an_upgrade_helm_records_it_failed(
    helm_cli: HelmCli, api: ApiServer, chart: Charts, background: Any
) -> None:
    _install(helm_cli, chart)
    slow = api.faults.latency(3.0, path="*/tensorfusionclusters*")
    call = background(
        lambda: helm_cli.upgrade(
            UpgradeRequest(
                release="tf",
                namespace="default",
                chart=chart("1.8.7"),
                version="1.8.7",
                values={},
                description=DESCRIPTION,
            )
        )
    )
    _wait_for_helm(helm_cli, DESCRIPTION)
    _wait_until(lambda: slow.hits > 0)  # helm is applying the chart
    assert HelmCli.terminate_children(grace_seconds=10) == 1
    call.join(timeout=30)
    assert len(call.errors) == 1 and isinstance(call.errors[0], HelmStopped)
    assert "stopped: gitopsbot is shutting down" in str(call.errors[0])
    api.faults.clear()
    assert _statuses(helm_cli)[-1] == (2, HelmReleaseStatus.FAILED)
    assert HelmCli.terminate_children(grace_seconds=1) == 0


@pytest.mark.slow
def test_terminate_children_during_a_rollback_leaves_it_pending(
    helm_cli: HelmCli, api: ApiServer, chart: Charts, background: Any
) -> None:
    """helm 3 and helm 4 do not catch SIGTERM in ``rollback``: they die at once and the
    rollback revision stays pending-rollback (then refused, never forced: R8)."""
    _install(helm_cli, chart)
    helm_cli.upgrade(UpgradeRequest(
        release="tf", namespace="default", chart=chart("1.8.7"), version="1.8.7",
        values={}, description="up",
    ))  # fmt: skip
    slow = api.faults.latency(3.0, path="*/tensorfusionclusters*")
    call = background(
        lambda: helm_cli.rollback(
            RollbackRequest(
                release="tf", namespace="default", revision=1, description="op=op-8 step=rb"
            )
        )
    )
    _wait_for_helm(helm_cli, "op=op-8 step=rb")
    _wait_until(lambda: slow.hits > 0)
    assert helm_cli.operation_alive("op=op-8 step=rb")
    HelmCli.terminate_children(grace_seconds=10)
    call.join(timeout=30)
    assert len(call.errors) == 1 and isinstance(call.errors[0], HelmStopped)
    api.faults.clear()
    assert _statuses(helm_cli)[-1] == (3, HelmReleaseStatus.PENDING_ROLLBACK)
    assert not helm_cli.operation_alive("op=op-8 step=rb")


# -- orphans (no helm needed: a stand-in process carries the description) ---------------------

STAND_IN = (
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
    "print('ready', flush=True); time.sleep(120)"
)


@pytest.fixture
def orphan() -> Iterator[subprocess.Popen[bytes]]:
    """A long-running process whose command line looks like our helm's and that ignores
    SIGTERM, in its own process group."""
    process = subprocess.Popen(
        [sys.executable, "-c", STAND_IN, "upgrade", "tf", "--description", DESCRIPTION],
        stdout=subprocess.PIPE,
        start_new_session=True,
    )
    assert process.stdout is not None and process.stdout.readline() == b"ready\n"
    yield process
    if process.poll() is None:
        process.kill()
    process.wait()


def _record(home: Path, process: subprocess.Popen[bytes], **changes: Any) -> Path:
    record = {
        "pid": process.pid,
        "start_time": children.start_time(process.pid),
        "description": DESCRIPTION,
        "argv": [sys.executable, "-c", STAND_IN, "upgrade", "tf", "--description", DESCRIPTION],
        "owner_pid": 999_999,  # gone
        "owner_start_time": 1,
        **changes,
    }
    path = home / "run" / f"helm-{process.pid}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record))
    return path


def test_orphan_of_a_dead_bot_is_stopped_at_construction(
    orphan: subprocess.Popen[bytes], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    home = tmp_path / "home"
    before = HelmCli("helm", home=home)
    path = _record(home, orphan)
    assert before.operation_alive(DESCRIPTION)  # proven: pid, start time, command line
    caplog.set_level(logging.WARNING)
    started = time.monotonic()
    HelmCli("helm", home=home, term_grace_seconds=0.5)
    assert orphan.wait(timeout=5) == -signal.SIGKILL  # SIGTERM ignored: killed after grace
    assert time.monotonic() - started < 5
    assert not path.exists()
    assert f"stopping helm pid {orphan.pid} ({DESCRIPTION})" in caplog.text
    assert "killed" in caplog.text
    assert not before.operation_alive(DESCRIPTION)


@pytest.mark.parametrize(
    "changes",
    [
        pytest.param({"start_time": 1}, id="pid-reused-by-another-process"),
        pytest.param({"argv": ["helm", "upgrade", "--description", "other"]}, id="other-cmdline"),
    ],
)
def test_a_record_that_does_not_prove_the_process_never_kills(
    orphan: subprocess.Popen[bytes], tmp_path: Path, changes: dict[str, Any]
) -> None:
    home = tmp_path / "home"
    path = _record(home, orphan, **changes)
    helm = HelmCli("helm", home=home, term_grace_seconds=0.5)
    assert orphan.poll() is None
    assert not path.exists()  # a dead owner's record goes either way
    assert not helm.operation_alive(DESCRIPTION)


def test_a_live_owners_helm_is_left_alone(orphan: subprocess.Popen[bytes], tmp_path: Path) -> None:
    """Another HelmCli on the same home (this process, or another live one) is running it."""
    home = tmp_path / "home"
    path = _record(home, orphan, owner_pid=os.getpid(), owner_start_time=children.SELF_START)
    helm = HelmCli("helm", home=home, term_grace_seconds=0.5)
    assert orphan.poll() is None
    assert path.exists()
    assert helm.operation_alive(DESCRIPTION)


def test_a_binary_that_cannot_be_run_is_helm_failed(tmp_path: Path) -> None:
    helm = HelmCli(tmp_path / "no-helm", home=tmp_path / "home")
    with pytest.raises(HelmFailed, match=r"cannot run .*no-helm: No such file or directory"):
        helm.version  # noqa: B018 - the property runs helm
    assert not any((tmp_path / "home" / "run").iterdir())


@pytest.mark.parametrize("pidfd", [True, False], ids=["pidfd", "polling"])
def test_exited_returns_once_the_child_ended_and_times_out_while_it_runs(
    pidfd: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``exited`` (what ``wait`` blocks on) with a pidfd, and the polling fallback where
    there is none: it returns when the child ends, leaves the reaping to ``wait``, and raises
    TimeoutExpired on a child still running, which keeps running."""
    if pidfd and not hasattr(os, "pidfd_open"):
        pytest.skip("no pidfd_open on this platform")
    if not pidfd:
        monkeypatch.delattr(os, "pidfd_open", raising=False)
    quick = subprocess.Popen([sys.executable, "-c", "import sys; sys.exit(3)"])
    children.exited(quick, 30.0)
    assert quick.wait(timeout=0) == 3  # ended: reaped at once
    slow = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        with pytest.raises(subprocess.TimeoutExpired):
            children.exited(slow, 0.2)
        assert slow.poll() is None  # still running
    finally:
        slow.kill()
        slow.wait()
    children.exited(slow, 5.0)  # ended and reaped already: returns


def test_exited_waits_on_a_descriptor_past_1024() -> None:
    """At 1,000 clusters the bot holds more than 1,024 sockets (its release watches), so the
    pidfd ``exited`` waits on is numbered past 1,024: with ``select()`` every helm step
    failed there ("filedescriptor out of range"), and the first merge's operation stayed at
    helm-upgrade (#29)."""
    if not hasattr(os, "pidfd_open"):
        pytest.skip("no pidfd_open on this platform")
    with open_files.past(1100):
        quick = subprocess.Popen([sys.executable, "-c", "import sys; sys.exit(3)"])
        children.exited(quick, 30.0)
        assert quick.wait(timeout=0) == 3
