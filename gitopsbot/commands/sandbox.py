"""`gitopsbot sandbox up|down`: a local Kubernetes API with TensorFusion installed, and its end.

``up`` starts ``python -m gitopsbot.sandbox.environment serve`` detached (or runs it in this
process with --foreground), waits until the chart is installed and the TensorFusionCluster is
Running, and prints how to point kubectl and helm at it. ``down`` stops that process (and so
everything it started) and checks that its ports are closed.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from gitopsbot.errors import GitOpsBotError
from gitopsbot.sandbox import environment as env
from gitopsbot.sandbox.environment import SandboxState

UP_EPILOG = """\
examples:
  gitopsbot sandbox up                              # 1 pool x 3 nodes, newest chart
  gitopsbot sandbox up --pools 2 --nodes 50 --chart-version 1.8.0
  export KUBECONFIG=~/.cache/gitopsbot/sandbox/kubeconfig
  kubectl get gpupools
  gitopsbot sandbox down
"""


def register(sub: Any) -> None:
    p = sub.add_parser(
        "sandbox",
        help="run a local Kubernetes API with TensorFusion installed (up/down)",
        description="A local stand-in cluster: Kubernetes API emulator, TensorFusion controller "
        "simulator and chart repository on loopback, with the tensor-fusion test chart "
        "installed by real helm. See docs/sandbox.md.",
    )
    actions = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    up = actions.add_parser(
        "up",
        help="start the sandbox and print how to reach it",
        epilog=UP_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    env.add_options(up)
    up.add_argument("--foreground", action="store_true", help="run in this process until Ctrl-C")
    up.add_argument(
        "--fresh", action="store_true", help="discard the cluster state kept from an earlier run"
    )
    up.add_argument(
        "--timeout", type=float, default=180.0, help="seconds to wait for readiness (default 180)"
    )
    up.set_defaults(func=run_up)
    down = actions.add_parser("down", help="stop the sandbox started by `up`")
    down.add_argument("--state-dir", type=Path, default=None, help="as given to `up`")
    down.set_defaults(func=run_down)
    p.set_defaults(func=lambda _args: (p.print_help(), 2)[1])


def run(args: argparse.Namespace) -> int:
    result: int = args.func(args)
    return result


def run_up(args: argparse.Namespace) -> int:
    try:
        options = env.options_from(args)
    except GitOpsBotError as e:
        sys.stderr.write(f"gitopsbot sandbox up: {e}\n")
        return 2
    state_dir = options.state_dir
    existing = env.SandboxState.read(state_dir)
    if existing is not None and _alive(existing.pid):
        sys.stderr.write(
            f"gitopsbot sandbox up: a sandbox is already running from {state_dir} "
            f"(pid {existing.pid}); run `gitopsbot sandbox down --state-dir {state_dir}` first\n"
        )
        return 1
    state_dir.mkdir(parents=True, exist_ok=True)
    (state_dir / env.STATE_FILE).unlink(missing_ok=True)
    if args.fresh:
        shutil.rmtree(state_dir / "cluster", ignore_errors=True)
    if args.foreground:
        return env.serve(options, on_ready=lambda s: print(env.connection_help(s), flush=True))
    return _detach(args, options, timeout=args.timeout)


def _detach(args: argparse.Namespace, options: env.SandboxOptions, *, timeout: float) -> int:
    state_dir = options.state_dir
    cmd = [
        sys.executable,
        "-m",
        env.SERVE_MODULE,
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
    log_path = state_dir / env.LOG_FILE
    with log_path.open("ab") as log_file:
        proc = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # survives this shell; `down` signals it by pid
        )
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        code = proc.poll()
        if code is not None:
            sys.stderr.write(
                f"gitopsbot sandbox up: the sandbox exited ({code}); {log_path} says:\n"
                + _tail(log_path)
            )
            return 1
        state = SandboxState.read(state_dir)
        if state is not None and state.ready and state.pid == proc.pid:
            print(env.connection_help(state))
            return 0
        time.sleep(0.2)
    _terminate(proc.pid)
    sys.stderr.write(
        f"gitopsbot sandbox up: not ready after {timeout:.0f}s; stopped it. {log_path}:\n"
        + _tail(log_path)
    )
    return 1


def run_down(args: argparse.Namespace) -> int:
    state_dir = (args.state_dir or env.default_state_dir()).resolve()
    try:
        state = SandboxState.read(state_dir)
    except GitOpsBotError as e:
        sys.stderr.write(f"gitopsbot sandbox down: {e}\n")
        return 1
    if state is None:
        print(f"no sandbox running from {state_dir}")
        return 0
    if _alive(state.pid) and _is_sandbox(state.pid) and not _terminate(state.pid):
        sys.stderr.write(f"gitopsbot sandbox down: pid {state.pid} did not stop\n")
        return 1
    (state_dir / env.STATE_FILE).unlink(missing_ok=True)
    still_open = [port for port in state.ports if _port_open(port)]
    if still_open:
        sys.stderr.write(f"gitopsbot sandbox down: ports still open: {still_open}\n")
        return 1
    print(f"sandbox stopped (pid {state.pid}); state kept in {state_dir}")
    return 0


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie child of this process counts as gone.
    try:
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
    return env.SERVE_MODULE.encode() in cmdline


def _terminate(pid: int, timeout: float = 20.0) -> bool:
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return True
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not _alive(pid):
            return True
        time.sleep(0.1)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return True
    time.sleep(0.2)
    return not _alive(pid)


def _port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def _tail(path: Path, lines: int = 30) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:]) + "\n"
