"""`gitopsbot status --watch` as a person sees it (issue 17 item 1): on a terminal (a real
pty) a region redrawn in place with a progress bar per pool phase, the batch, the units done
and the ETA, through an intermediate batch between 0 % and 100 %; on a pipe (logs, CI) one
timestamped line per change and no escape codes. The bot's records are real journals
(``core.records.journal``) pushed to a real bare Git remote's state branch, as the bot pushes
them;
the watcher is the real command in a subprocess, stopped with a real SIGINT."""

from __future__ import annotations

import fcntl
import os
import re
import signal
import struct
import subprocess
import sys
import termios
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from gitopsbot.core.fleet.model import Component
from gitopsbot.core.records import journal as journal_mod
from gitopsbot.core.records.journal import (
    Journal,
    OperationKind,
    OperationStatus,
    PhaseProgress,
    PhaseState,
    ProgressMark,
    Step,
    StepKind,
    StepState,
)
from tests.executor.test_status_from_clone import bare_remote, fleet_source, record_state, seen

__all__ = ["fleet_source"]  # a fixture, used by name

POOL_STEP = "pool/shared/hypervisor"
GITOPSBOT = (sys.executable, "-m", "gitopsbot")


@pytest.fixture(autouse=True)
def _cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GITOPSBOT_CACHE", str(tmp_path / "cache"))


def journal_at(progress: int, t0: datetime) -> Journal:
    """An upgrade whose pool phase (3 nodes at 50 %: two batches) stands at ``progress``."""
    done = progress >= 100
    marks = [ProgressMark(0, t0 + timedelta(seconds=10))]
    if progress >= 50:
        marks.append(ProgressMark(50, t0 + timedelta(seconds=40)))
    if done:
        marks.append(ProgressMark(100, t0 + timedelta(seconds=70)))
    phase = PhaseProgress(
        step=POOL_STEP,
        state=PhaseState.DONE if done else PhaseState.ROLLING,
        started_at=t0 + timedelta(seconds=10),
        opened_at=None if done else t0 + timedelta(seconds=10),
        open_seconds=60 if done else 0,
        progress=progress,
        last_progress_at=marks[-1].at,
        batch_percentage=50,
        batch_interval_seconds=30,
        total=3,
        max_duration_seconds=3600,
        marks=tuple(marks),
    )
    steps = (
        Step(
            "helm-upgrade",
            StepKind.HELM_UPGRADE,
            StepState.SUCCEEDED,
            started_at=t0,
            finished_at=t0 + timedelta(seconds=8),
        ),
        Step(
            POOL_STEP,
            StepKind.POOL_PHASE,
            StepState.SUCCEEDED if done else StepState.RUNNING,
            started_at=t0 + timedelta(seconds=10),
            finished_at=t0 + timedelta(seconds=70) if done else None,
            pool="shared",
            component=Component.HYPERVISOR,
        ),
    )
    return Journal(
        op_id="op-live",
        kind=OperationKind.UPGRADE,
        cluster="alpha",
        desired_sha="ab" * 20,
        created_at=t0,
        status=OperationStatus.SUCCEEDED if done else OperationStatus.RUNNING,
        steps=steps,
        phases=(phase,),
    )


def push(tmp_path: Path, url: str, j: Journal) -> None:
    record_state(
        tmp_path,
        url,
        {"clusters/alpha/journal.yaml": journal_mod.dump_yaml(journal_mod.to_dict(j))},
    )


class Reader:
    """Everything a file descriptor gives, read on a thread."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.data = b""
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()

    def _run(self) -> None:
        while True:
            try:
                chunk = os.read(self.fd, 65536)
            except OSError:  # the pty's other side closed
                return
            if not chunk:
                return
            self.data += chunk

    def text(self) -> str:
        return self.data.decode("utf-8", "replace")

    def wait_for(self, needle: str, timeout: float = 30, *, regex: bool = False) -> None:
        deadline = time.monotonic() + timeout
        while not (re.search(needle, self.text()) if regex else needle in self.text()):
            if time.monotonic() > deadline:
                raise AssertionError(f"{needle!r} not shown within {timeout}s:\n{self.text()}")
            time.sleep(0.05)


def _env(tmp_path: Path) -> dict[str, str]:
    env = dict(os.environ, GITOPSBOT_CACHE=str(tmp_path / "cache"), COLUMNS="200")
    env.pop("NO_COLOR", None)
    env["TERM"] = "xterm-256color"
    return env


def _watch(url: str, tmp_path: Path, **streams: int) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gitopsbot",
            "status",
            "--fleet-url",
            url,
            "--watch",
            "--interval",
            "0.3",
        ],
        env=_env(tmp_path),
        start_new_session=True,
        **streams,  # type: ignore[call-overload]
    )


def _stop(proc: subprocess.Popen[bytes]) -> int:
    os.kill(proc.pid, signal.SIGINT)
    try:
        return proc.wait(timeout=15)
    finally:
        if proc.poll() is None:
            proc.kill()


def test_a_terminal_shows_the_batches_redrawn_in_place(tmp_path: Path, fleet_source: Path) -> None:
    url = bare_remote(tmp_path, fleet_source, files=seen("alpha"))
    t0 = datetime.now(UTC).replace(microsecond=0) - timedelta(seconds=45)
    push(tmp_path, url, journal_at(0, t0))
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 200, 0, 0))
    proc = _watch(url, tmp_path, stdin=slave, stdout=slave, stderr=slave)
    os.close(slave)
    out = Reader(master)
    try:
        out.wait_for("batch 1/2 of 2 nodes")
        out.wait_for("0/3 nodes done")
        push(tmp_path, url, journal_at(50, t0))  # the intermediate batch
        out.wait_for("batch 2/2 of 2 nodes")
        out.wait_for("2/3 nodes done · progress 50%")
        push(tmp_path, url, journal_at(100, t0))
        out.wait_for("3/3 nodes done · progress 100%")
    finally:
        code = _stop(proc)
        os.close(master)
    text = out.text()
    assert code == 0, text
    assert "━" in text  # rich's progress bar
    # Redrawn in place: the cursor goes back up over the region, never a full-screen clear.
    assert re.search(r"\x1b\[\d*A", text), text
    assert "\x1b[2J" not in text
    assert "ETA" in text and "deadline" in text
    assert "state: gitopsbot/state" in text  # which ref, in the region (first line)
    assert "Traceback" not in text


def test_a_pipe_gets_one_line_per_change_and_no_escape_codes(
    tmp_path: Path, fleet_source: Path
) -> None:
    url = bare_remote(tmp_path, fleet_source, files=seen("alpha"))
    t0 = datetime.now(UTC).replace(microsecond=0) - timedelta(seconds=45)
    push(tmp_path, url, journal_at(0, t0))
    proc = _watch(url, tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    assert proc.stdout is not None
    out = Reader(proc.stdout.fileno())
    try:
        out.wait_for("batch 1/2 of 2 nodes")
        time.sleep(1.5)  # several refreshes with nothing new: nothing printed for them
        push(tmp_path, url, journal_at(50, t0))
        out.wait_for("progress 50%")
        time.sleep(1.5)
        push(tmp_path, url, journal_at(100, t0))
        out.wait_for("upgrade succeeded")
    finally:
        code = _stop(proc)
    text = out.text()
    assert code == 0, text
    assert "\x1b" not in text
    changes = [line for line in text.splitlines() if re.match(r"\d\d:\d\d:\d\d ", line)]
    fifty = [line for line in changes if "progress 50%" in line]
    assert len(fifty) == 1, text  # once, however many refreshes saw it
    assert "batch 2/2 of 2 nodes · 2/3 nodes done" in fifty[0]
    assert any("progress 100%" in line and "succeeded" in line for line in changes), text


def test_status_without_watch_prints_the_batch_summary(
    tmp_path: Path, fleet_source: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from gitopsbot.cli import main

    url = bare_remote(tmp_path, fleet_source, files=seen("alpha"))
    t0 = datetime.now(UTC).replace(microsecond=0) - timedelta(seconds=45)
    push(tmp_path, url, journal_at(50, t0))
    assert main(["status", "--fleet-url", url]) == 0
    out = capsys.readouterr().out
    assert "batch 2/2 of 2 nodes · 2/3 nodes done · progress 50%" in out
    assert re.search(r"helm-upgrade\s+succeeded\s+\d\d:\d\d:\d\d \+8s", out), out
