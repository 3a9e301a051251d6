"""`gitopsbot sandbox up|down`: a local Kubernetes API with TensorFusion installed, and its end.

``up`` starts ``python -m gitopsbot.sandbox.environment serve`` detached (or runs it in this
process with --foreground), waits until the chart is installed and the TensorFusionCluster is
Running, and prints how to point kubectl and helm at it, plus the URLs and sandbox-only
credentials of the Git remote holding a fleet repository made for this sandbox (its chart
repository, kube context and pools: ``gitopsbot run`` works against it as is; docs/sandbox.md,
"Run the bot against the sandbox") and of the local GitHub forge.
``down`` stops that process (and so everything it started) and checks that its ports are
closed.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from gitopsbot.commands import SUMMARIES
from gitopsbot.errors import GitOpsBotError
from gitopsbot.sandbox import environment as env
from gitopsbot.sandbox import environment_detached as detached
from gitopsbot.sandbox.environment import SandboxState
from gitopsbot.sandbox.environment_help import connection_help

EPILOG = """\
examples:
  gitopsbot sandbox up                              # start it; prints how to reach it
  gitopsbot sandbox down                            # stop it
  gitopsbot sandbox up --pools 2 --foreground       # in this process, until Ctrl-C
  gitopsbot sandbox up --help                       # all options of `up`
"""

DOWN_EPILOG = """\
examples:
  gitopsbot sandbox down                            # the sandbox in the default state dir
  gitopsbot sandbox down --state-dir /tmp/sb        # the one started with this --state-dir

exit status: 0 stopped, or nothing running, 1 its state file unreadable or it would not stop
(docs/commands.md#exit-statuses).
"""

UP_EPILOG = """\
examples:
  gitopsbot sandbox up --pools 2 --nodes 50 --chart-version 1.8.0
  eval "$(gitopsbot tools --fetch --shell helm4 kubectl)"   # the pinned helm and kubectl
  export KUBECONFIG=~/.cache/gitopsbot/sandbox/kubeconfig
  kubectl get gpupools
  gitopsbot sandbox down
  gitopsbot sandbox up                              # 1 pool x 3 nodes, newest chart
  gitopsbot sandbox down

exit status: 0 ready (`sandbox down`: stopped, or nothing running), 1 a sandbox already running
from the state directory, 2 bad options, 130 --foreground stopped by Ctrl-C
(docs/commands.md#exit-statuses).
"""


def register(sub: Any) -> None:
    p = sub.add_parser(
        "sandbox",
        help=SUMMARIES["sandbox"],
        description="A local stand-in cluster: Kubernetes API emulator, TensorFusion controller "
        "simulator and chart repository on loopback, with the tensor-fusion test chart "
        "installed by real helm. See docs/sandbox.md.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
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
        "--fresh",
        action="store_true",
        help="discard the cluster state and fleet repository kept from an earlier run",
    )
    up.add_argument(
        "--timeout", type=float, default=180.0, help="seconds to wait for readiness (default 180)"
    )
    up.set_defaults(func=run_up)
    down = actions.add_parser(
        "down",
        help="stop the sandbox started by `up`",
        epilog=DOWN_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
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
    if existing is not None and detached.process_alive(existing.pid):
        sys.stderr.write(
            f"gitopsbot sandbox up: a sandbox is already running from {state_dir} "
            f"(pid {existing.pid}); run `gitopsbot sandbox down --state-dir {state_dir}` first\n"
        )
        return 1
    state_dir.mkdir(parents=True, exist_ok=True)
    (state_dir / env.STATE_FILE).unlink(missing_ok=True)
    if args.fresh:
        shutil.rmtree(state_dir / "cluster", ignore_errors=True)
        shutil.rmtree(state_dir / "git", ignore_errors=True)  # the fleet repository
    if args.foreground:
        return _foreground(options)
    try:
        state = detached.start_detached(options, timeout=args.timeout)
    except GitOpsBotError as e:
        sys.stderr.write(f"gitopsbot sandbox up: {e}\n")
        return 1
    print(connection_help(state))
    return 0


# How often a main thread that only waits for Ctrl-C looks for it (see _foreground).
WAKE_SECONDS = 0.5


def _foreground(options: env.SandboxOptions) -> int:
    """--foreground: up until Ctrl-C or SIGTERM. The command line's handler raises
    KeyboardInterrupt at a safe point, also while starting; the sandbox is stopped here
    first, then the command line says `interrupted` and exits 130."""
    sandbox = env.Sandbox(options)
    try:
        state = sandbox.start()
        print(connection_help(state), flush=True)
        while True:
            # Short sleeps: the kernel may hand SIGINT to another thread, and Python runs the
            # handler only once the main thread is back from its sleep (an hour, before).
            time.sleep(WAKE_SECONDS)
    finally:
        sandbox.stop()


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
    try:
        detached.stop_detached(state)
    except GitOpsBotError as e:
        sys.stderr.write(f"gitopsbot sandbox down: {e}\n")
        return 1
    (state_dir / env.STATE_FILE).unlink(missing_ok=True)
    print(f"sandbox stopped (pid {state.pid}); state kept in {state_dir}")
    return 0
