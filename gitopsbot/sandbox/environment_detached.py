"""The sandbox's detached ``serve`` process: ``up`` starts it, ``down`` stops it.

``start_detached`` runs ``python -m gitopsbot.sandbox.environment serve`` in its own session
and waits for its state file to say ready; ``stop_detached`` signals the recorded pid (only
when it is still that process) and checks that its ports closed.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from gitopsbot.adapters.pids import pid_exists
from gitopsbot.sandbox.environment import (
    LOG_FILE,
    SERVE_MODULE,
    SandboxError,
    SandboxOptions,
    SandboxState,
)


def start_detached(options: SandboxOptions, *, timeout: float = 180.0) -> SandboxState:
    """Start ``serve`` in its own session and wait until it reports ready."""
    state_dir = options.state_dir
    cmd = [
        sys.executable,
        "-m",
        SERVE_MODULE,
        "serve",
        "--state-dir",
        str(state_dir),
        "--pools",
        str(options.pools),
        "--nodes",
        str(options.nodes),
        "--namespace",
        options.namespace,
        "--release",
        options.release,
        "--charts",
        str(options.charts_dir),
    ]
    if options.chart_version:
        cmd += ["--chart-version", options.chart_version]
    if not options.fleet_services:
        cmd.append("--no-fleet")
    log_path = state_dir / LOG_FILE
    with log_path.open("ab") as log_file:
        proc = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # outlives the shell that ran `up`; `down` signals the pid
        )
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        code = proc.poll()
        if code is not None:
            raise SandboxError(f"the sandbox exited ({code}); {log_path} says:\n" + _tail(log_path))
        state = SandboxState.read(state_dir)
        if state is not None and state.ready and state.pid == proc.pid:
            return state
        time.sleep(0.2)
    terminate(proc.pid)
    proc.wait(timeout=5)
    raise SandboxError(
        f"not ready after {timeout:.0f}s; stopped it. {log_path}:\n" + _tail(log_path)
    )


def stop_detached(state: SandboxState) -> None:
    """Stop the recorded ``serve`` process; raise if it or one of its ports survives."""
    if process_alive(state.pid) and _is_sandbox(state.pid) and not terminate(state.pid):
        raise SandboxError(f"pid {state.pid} did not stop")
    still_open = [port for port in state.ports if port_open(port)]
    if still_open:
        raise SandboxError(f"ports still open after stopping pid {state.pid}: {still_open}")


def process_alive(pid: int) -> bool:
    if not pid_exists(pid):
        return False
    try:  # a zombie child of this process counts as gone
        done, _ = os.waitpid(pid, os.WNOHANG)
        return done == 0
    except ChildProcessError:
        return True


def _is_sandbox(pid: int) -> bool:
    # Never signal a process that merely reuses the recorded pid.
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
    except OSError:
        return True  # no /proc (macOS): trust the state file
    return SERVE_MODULE.encode() in cmdline


def terminate(pid: int, timeout: float = 20.0) -> bool:
    """SIGTERM, then SIGKILL after ``timeout``; True once the process is gone."""
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return True
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not process_alive(pid):
            return True
        time.sleep(0.1)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return True
    time.sleep(0.2)
    return not process_alive(pid)


def port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def _tail(path: Path, lines: int = 30) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:]) + "\n"
