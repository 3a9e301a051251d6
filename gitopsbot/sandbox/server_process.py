"""Upstream servers run as child processes for the tests (the real control plane, Gitea, registry).

Each child runs under the helm death shim with SIGKILL (it dies with this process, even when
this process is killed: its data is thrown away, so nothing needs a graceful shutdown), in
its own session (a Ctrl-C of the test run reaches the tests, not it), with its output in a
log file (``log_tail`` quotes its end when the start fails); ``stop_all`` ends them whatever
happened.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

from gitopsbot.adapters.helm_children import death_shim

HOST = "127.0.0.1"
STOP_GRACE_SECONDS = 3.0  # the data is thrown away: no need for a long graceful shutdown
# SIGKILL when this process dies: kube-apiserver's graceful shutdown, for one, would wait on
# an etcd that is already gone.
KILL_SHIM = death_shim(signal.SIGKILL)
LOG_TAIL_CHARS = 1500  # of a log, in the error of a child that failed to start


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        port: int = s.getsockname()[1]
        return port


def spawn(
    argv: list[str], log: Path, *, env: Mapping[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """Start ``argv`` under the death shim, in its own session, its output appended to ``log``."""
    with log.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, "-c", KILL_SHIM, str(os.getpid()), *argv],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=None if env is None else dict(env),
            start_new_session=True,
        )


def wait_ready(
    proc: subprocess.Popen[bytes],
    ready: Callable[[], bool],
    *,
    timeout: float,
    failed: Callable[[str], Exception],
) -> None:
    """Poll ``ready`` until it answers True; ``failed(why)`` is raised when the child exits
    first or the timeout passes."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise failed(f"exited ({proc.returncode})")
        if ready():
            return
        time.sleep(0.2)
    raise failed(f"not ready in {timeout:.0f}s")


def stop_all(procs: Iterable[subprocess.Popen[bytes]]) -> None:
    """SIGTERM each child's process group, then SIGKILL what is left after the grace."""
    running = list(procs)
    for proc in running:
        if proc.poll() is None:
            _signal_group(proc, signal.SIGTERM)
    deadline = time.monotonic() + STOP_GRACE_SECONDS
    for proc in running:
        try:
            proc.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            _signal_group(proc, signal.SIGKILL)
            proc.wait()


def log_tail(*logs: Path) -> str:
    """The end of each of a child's log files that exists, for the error of a failed start."""
    texts = []
    for log in logs:
        try:
            texts.append(log.read_text(errors="replace")[-LOG_TAIL_CHARS:])
        except OSError:
            continue
    return "\n".join(texts) or "(no log)"


def http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            return bool(resp.status == 200)
    except (OSError, ValueError):
        return False


def _signal_group(proc: subprocess.Popen[bytes], sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:
        pass
